"""`conv_general_dilated`: lax's signature, depthwise problems on this library's kernels.

A drop-in for `jax.lax.conv_general_dilated`, and the function flax's Conv layers
call. A call runs `depthwise_conv2d` when it is a depthwise convolution the
kernels take:

- one group per input channel (feature_group_count equal to the input channels
  C), any channel multiplier m: rhs (..., 1, m * C);
- 1 or 2 spatial dimensions, channels last: ("NWC", "WIO", "NWC") or
  ("NHWC", "HWIO", "NHWC") in any spelling, flax's layout;
- no input dilation (lhs_dilation all 1), batch_group_count 1, and
  preferred_element_type None or the operands' dtype;
- float32, float16 or bfloat16 operands of one dtype (float64 runs XLA's conv
  inside `depthwise_conv2d` under implementation=None).

Every other call runs lax's own function with the same arguments. A multiplier
m repeats each input channel m times first (output feature j reads input channel
j // m, as lax's grouped convolution does): one more pass over the input, not a
new kernel. Rank 3 (N, L, C) runs as the rank-4 problem (N, 1, L, C).
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import jax.numpy as jnp
from jax import dtypes, lax

from ._geometry import SUPPORTED_DTYPES
from .conv import IMPLEMENTATIONS, depthwise_conv2d

_CHANNELS_LAST = {3: ("NWC", "WIO", "NWC"), 4: ("NHWC", "HWIO", "NHWC")}


def _is_channels_last(lhs_shape, rhs_shape, dimension_numbers) -> bool:
  expected = _CHANNELS_LAST.get(len(lhs_shape))
  if expected is None or dimension_numbers is None:
    return False
  try:
    given = lax.conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
  except (TypeError, ValueError):
    return False
  return tuple(given) == tuple(lax.conv_dimension_numbers(lhs_shape, rhs_shape, expected))


def _index(value):
  """`value` as an int if it is integer-like (any integer type), else None."""
  try:
    return operator.index(value)
  except TypeError:
    return None


def _all_ones(values) -> bool:
  return values is None or all(_index(v) == 1 for v in values)


def _dtype(a):
  # What lax computes in: float64 is float32 unless jax_enable_x64 is on.
  return dtypes.canonicalize_dtype(a.dtype)


def is_depthwise(lhs, rhs, dimension_numbers=None, feature_group_count=1, lhs_dilation=None,
                 batch_group_count=1, preferred_element_type=None, **unused) -> bool:
  """Whether the call is a depthwise problem of the kernels' form, whatever its dtype."""
  if not (hasattr(lhs, "shape") and hasattr(rhs, "shape") and hasattr(lhs, "dtype")):
    return False
  if len(lhs.shape) != len(rhs.shape) or not _is_channels_last(lhs.shape, rhs.shape, dimension_numbers):
    return False
  channels = lhs.shape[-1]
  if preferred_element_type is not None and dtypes.canonicalize_dtype(preferred_element_type) != _dtype(lhs):
    return False
  return (channels > 0 and _index(feature_group_count) == channels
          and _index(batch_group_count) == 1 and rhs.shape[-2] == 1
          and rhs.shape[-1] > 0 and rhs.shape[-1] % channels == 0 and _all_ones(lhs_dilation))


def _has_kernel(lhs, rhs) -> bool:
  return _dtype(lhs) == _dtype(rhs) and _dtype(lhs) in SUPPORTED_DTYPES


def takes(lhs, rhs, dimension_numbers=None, feature_group_count=1, lhs_dilation=None, batch_group_count=1,
          preferred_element_type=None, **unused) -> bool:
  """Whether `conv_general_dilated` runs this call on the library's kernels."""
  return (is_depthwise(lhs, rhs, dimension_numbers, feature_group_count, lhs_dilation, batch_group_count,
                       preferred_element_type) and _has_kernel(lhs, rhs))


def conv_general_dilated(lhs, rhs, window_strides=None, padding="VALID", lhs_dilation=None, rhs_dilation=None,
                         dimension_numbers=None, feature_group_count=1, batch_group_count=1, precision=None,
                         preferred_element_type=None, *, implementation: str | None = None,
                         **lax_only: Any):
  """`jax.lax.conv_general_dilated`, with depthwise calls on this library's kernels.

  Arguments as in lax (window_strides None means 1 in every dimension), plus:

  implementation: None (default) runs the depthwise calls this library has
    kernels for on them, and everything else, float64 and integer operands
    included, on lax; "flashdwc" does the same but raises a TypeError for a
    depthwise call whose dtype has no kernel; "xla" runs every call on lax.
  lax_only: keyword arguments only lax knows (out_sharding, ...); given as
    anything but None, they send the call to lax.
  """
  if implementation is not None and implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation must be None or one of {IMPLEMENTATIONS}; got {implementation!r}")
  if window_strides is None and hasattr(lhs, "shape"):
    window_strides = (1,) * (len(lhs.shape) - 2)
  lax_kwargs = {k: v for k, v in lax_only.items() if v is not None}

  def lax_call():
    return lax.conv_general_dilated(
        lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation,
        dimension_numbers=dimension_numbers, feature_group_count=feature_group_count,
        batch_group_count=batch_group_count, precision=precision, preferred_element_type=preferred_element_type,
        **lax_kwargs)

  if implementation == "xla" or lax_kwargs or not is_depthwise(
      lhs, rhs, dimension_numbers, feature_group_count, lhs_dilation, batch_group_count, preferred_element_type):
    return lax_call()
  if not _has_kernel(lhs, rhs):
    if implementation == "flashdwc":
      supported = ", ".join(str(d) for d in SUPPORTED_DTYPES)
      raise TypeError(f"implementation='flashdwc' has depthwise kernels for {supported} operands of one dtype; "
                      f"got lhs {_dtype(lhs)} and rhs {_dtype(rhs)} (implementation=None or "
                      "'xla' runs lax's conv for them)")
    return lax_call()
  lhs, rhs = jnp.asarray(lhs), jnp.asarray(rhs)
  spatial = lhs.ndim - 2
  strides = tuple(window_strides)
  dilation = tuple(rhs_dilation) if rhs_dilation is not None else (1,) * spatial
  multiplier = rhs.shape[-1] // lhs.shape[-1]
  x = jnp.repeat(lhs, multiplier, axis=-1) if multiplier > 1 else lhs
  w = rhs
  if spatial == 1:
    # (N, L, C) as (N, 1, L, C), the filter (K, 1, C) as (1, K, 1, C).
    x, w = x[:, None], w[None]
    strides, dilation = (1, *strides), (1, *dilation)
    if not isinstance(padding, str):
      padding = ((0, 0), *(tuple(p) for p in padding))
  y = depthwise_conv2d(x, w, strides=strides, padding=padding, kernel_dilation=dilation, precision=precision,
                       implementation=implementation)
  return y[:, 0] if spatial == 1 else y


@dataclasses.dataclass(frozen=True)
class Routed:
  """`conv_general_dilated` with a fixed `implementation`: the conv function to hand
  to flax's Conv layers (their `conv_general_dilated` argument). Frozen and
  compared by value, so that two layers built alike have equal static fields."""

  implementation: str | None = None

  def __post_init__(self):
    if self.implementation is not None and self.implementation not in IMPLEMENTATIONS:
      raise ValueError(f"implementation must be None or one of {IMPLEMENTATIONS}; got {self.implementation!r}")

  def __call__(self, lhs, rhs, window_strides=None, padding="VALID", *args, **kwargs):
    return conv_general_dilated(lhs, rhs, window_strides, padding, *args, implementation=self.implementation,
                                **kwargs)
