"""Argument checking and normalization for depthwise convolution.

Everything a user can get wrong is caught here, with a ValueError or TypeError
naming the argument, before anything is traced into a custom call.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

SUPPORTED_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))
_PADDING_STRINGS = ("SAME", "SAME_LOWER", "VALID")


@dataclasses.dataclass(frozen=True)
class ConvGeometry:
  """Stride, explicit padding and dilation of a 2-D depthwise convolution.

  Hashable, so that it can be a primitive parameter.
  """

  strides: tuple[int, int]
  padding: tuple[tuple[int, int], tuple[int, int]]  # ((top, bottom), (left, right))
  dilation: tuple[int, int]

  def output_hw(self, in_hw: Sequence[int], kernel_hw: Sequence[int]) -> tuple[int, int]:
    """(Ho, Wo) of the forward convolution of an (H, W) input with a (KH, KW) filter."""
    out = []
    for size, k, s, (lo, hi), d in zip(in_hw, kernel_hw, self.strides, self.padding, self.dilation):
      out.append((size + lo + hi - d * (k - 1) - 1) // s + 1)
    return tuple(out)

  def cropped(self) -> tuple[tuple[tuple[int, int], tuple[int, int]], "ConvGeometry"]:
    """The rows and columns that negative padding crops, ((top, bottom), (left, right)),
    and this geometry with that padding at 0: the kernels then see a plain input."""
    crops = tuple((max(-lo, 0), max(-hi, 0)) for lo, hi in self.padding)
    pads = tuple((max(lo, 0), max(hi, 0)) for lo, hi in self.padding)
    return crops, dataclasses.replace(self, padding=pads)

  def live_taps(self, in_hw: Sequence[int], kernel_hw: Sequence[int]) -> tuple[tuple[int, int], "ConvGeometry"]:
    """((first, last) filter row, (first, last) filter column) that can touch the input,
    and the geometry of the filter cut to them: the same outputs with less padding.

    A tap whose every position falls in the padding only ever multiplies zeros: where
    a filter spans more than the padded map can give it (VAN's 7x7 at dilation 3 on
    7x7 maps: rows and columns 1-5 of 7 live; a 31x31 "SAME" filter on a 7x7 map: 9-21),
    cutting it removes its work and its padding exactly, in every pass. Padding never
    goes below 0 (that would crop x), and a filter no tap of which is live stays whole.
    """
    out_hw = self.output_hw(in_hw, kernel_hw)
    ranges, padding = [], []
    for n_in, n_out, k, s, d, (lo, hi) in zip(in_hw, out_hw, kernel_hw, self.strides, self.dilation, self.padding):
      # Input index of tap t at output o: o * s - lo + d * t; live if some o lands in [0, n_in).
      live = [t for t in range(k) if n_out > 0 and -lo + d * t <= n_in - 1 and (n_out - 1) * s - lo + d * t >= 0]
      if not live:
        ranges.append((0, k - 1))
        padding.append((lo, hi))
        continue
      first = min(live[0], lo // d if lo > 0 else 0)
      last = max(live[-1], k - 1 - (hi // d if hi > 0 else 0))
      ranges.append((first, last))
      padding.append((lo - d * first, hi - d * (k - 1 - last)))
    return tuple(ranges), dataclasses.replace(self, padding=tuple(padding))

  def transposed(self) -> "ConvGeometry":
    """The same convolution with height and width exchanged (on transposed operands)."""
    return ConvGeometry(strides=self.strides[::-1], padding=self.padding[::-1], dilation=self.dilation[::-1])

  def ffi_attribute(self) -> dict[str, np.int64]:
    """The `geometry` attribute of the custom calls (csrc/ffi/dwconv_attrs.h)."""
    return {
        "stride_h": np.int64(self.strides[0]),
        "stride_w": np.int64(self.strides[1]),
        "pad_top": np.int64(self.padding[0][0]),
        "pad_left": np.int64(self.padding[1][0]),
        "dilation_h": np.int64(self.dilation[0]),
        "dilation_w": np.int64(self.dilation[1]),
    }


def _is_int(value: Any) -> bool:
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _positive_pair(value: Any, name: str) -> tuple[int, int]:
  if _is_int(value):
    pair = (int(value), int(value))
  elif (isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2
        and all(_is_int(v) for v in value)):
    pair = (int(value[0]), int(value[1]))
  else:
    raise TypeError(f"{name} must be an int or a pair of ints (height, width); got {value!r}")
  if min(pair) < 1:
    raise ValueError(f"{name} must be >= 1 in both dimensions; got {value!r}")
  return pair


def _explicit_padding(padding: Any, in_hw, kernel_hw, strides, dilation):
  if isinstance(padding, str):
    name = padding.upper()
    if name not in _PADDING_STRINGS:
      raise ValueError(f"padding must be one of {', '.join(_PADDING_STRINGS)}, an int, or "
                       f"((top, bottom), (left, right)); got {padding!r}")
    effective = [d * (k - 1) + 1 for k, d in zip(kernel_hw, dilation)]
    pads = lax.padtype_to_pads(in_hw, effective, strides, name)
    return tuple((int(lo), int(hi)) for lo, hi in pads)
  form_error = TypeError(
      "padding must be 'SAME', 'VALID', 'SAME_LOWER', an int, a pair of ints (one per "
      f"dimension, both sides), or ((top, bottom), (left, right)); got {padding!r}")
  if _is_int(padding):
    pads = ((int(padding),) * 2,) * 2
  elif isinstance(padding, Sequence) and len(padding) == 2:
    pads = []
    for dim in padding:
      if _is_int(dim):
        pads.append((int(dim), int(dim)))
      elif isinstance(dim, Sequence) and len(dim) == 2 and all(_is_int(v) for v in dim):
        pads.append((int(dim[0]), int(dim[1])))
      else:
        raise form_error
    pads = tuple(pads)
  else:
    raise form_error
  # Negative padding crops, as in lax.conv_general_dilated, by at most the size.
  for (lo, hi), size in zip(pads, in_hw):
    if -min(lo, 0) - min(hi, 0) > size:
      raise ValueError(f"negative padding crops more than the input holds: padding {padding!r} on an input "
                       f"of (H, W) = {tuple(in_hw)}")
  return pads


def _check_operands(x, kernel, allow_float64) -> None:
  for name, arr in (("x", x), ("kernel", kernel)):
    if not hasattr(arr, "shape") or not hasattr(arr, "dtype"):
      raise TypeError(f"{name} must be an array; got {type(arr).__name__}")
  if x.ndim != 4:
    raise ValueError(f"x must have rank 4 (N, H, W, C); got shape {tuple(x.shape)}")
  if kernel.ndim != 4 or kernel.shape[2] != 1:
    raise ValueError("kernel must have shape (KH, KW, 1, C), the layout of "
                     f"flax.linen.Conv(feature_group_count=C); got shape {tuple(kernel.shape)}")
  if kernel.shape[3] != x.shape[3]:
    raise ValueError(f"kernel has {kernel.shape[3]} channels but x has {x.shape[3]}; "
                     "a depthwise kernel needs one filter per input channel")
  # Zero images or a zero-size map give an empty or all-zero result, as in lax; lax
  # refuses zero channels (feature_group_count 0) and zero-size filters, and so do we.
  if x.shape[3] == 0:
    raise ValueError(f"x must have at least one channel; got shape {tuple(x.shape)}")
  if 0 in kernel.shape[:2]:
    raise ValueError(f"kernel must have KH, KW >= 1; got shape {tuple(kernel.shape)}")
  dtypes = SUPPORTED_DTYPES + ((jnp.dtype(jnp.float64),) if allow_float64 else ())
  supported = ", ".join(str(d) for d in dtypes)
  for name, arr in (("x", x), ("kernel", kernel)):
    if jnp.dtype(arr.dtype) not in dtypes:
      raise TypeError(f"{name} dtype must be one of {supported}; got {jnp.dtype(arr.dtype)}")
  if jnp.dtype(x.dtype) != jnp.dtype(kernel.dtype):
    raise TypeError(f"x and kernel must have the same dtype; got x {jnp.dtype(x.dtype)} and "
                    f"kernel {jnp.dtype(kernel.dtype)}")


def make_geometry(x, kernel, strides, padding, kernel_dilation, allow_float64=False) -> ConvGeometry:
  """Checks every argument of depthwise_conv2d and returns the explicit geometry.

  allow_float64: accept float64 operands (which only XLA's conv runs).
  """
  _check_operands(x, kernel, allow_float64)
  strides = _positive_pair(strides, "strides")
  dilation = _positive_pair(kernel_dilation, "kernel_dilation")
  in_hw = tuple(x.shape[1:3])
  kernel_hw = tuple(kernel.shape[:2])
  pads = _explicit_padding(padding, in_hw, kernel_hw, strides, dilation)
  geometry = ConvGeometry(strides=strides, padding=pads, dilation=dilation)
  out_hw = geometry.output_hw(in_hw, kernel_hw)
  if min(out_hw) < 0:
    raise ValueError(
        f"the output would be empty: input (H, W) = {in_hw}, kernel (KH, KW) = {kernel_hw}, "
        f"kernel_dilation = {dilation}, padding = {pads}, strides = {strides} give output "
        f"(Ho, Wo) = {out_hw}; pad more or use a smaller (or less dilated) kernel")
  return geometry
