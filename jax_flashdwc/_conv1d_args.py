"""Argument checking and normalization for the depthwise 1-D convolution.

Everything a caller of `depthwise_conv1d` or `depthwise_conv1d_update` can get
wrong is caught here, with a ValueError or TypeError naming the argument, what
was given and what is supported, before anything is traced into a custom call.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
from jax import lax

from . import _activations
from ._geometry import SUPPORTED_DTYPES

IMPLEMENTATIONS = ("flashdwc", "xla")
_PADDING_STRINGS = ("CAUSAL", "SAME", "SAME_LOWER", "VALID")
_FLOAT64 = jnp.dtype(jnp.float64)


@dataclasses.dataclass(frozen=True)
class Conv1DSpec:
  """The normalized geometry of one depthwise 1-D convolution. Hashable."""

  kernel_size: int
  stride: int
  dilation: int
  padding: tuple[int, int]  # (before, after), may be negative (crops)

  @property
  def state_length(self) -> int:
    """How many past inputs a causal step needs: dilation * (K - 1)."""
    return self.dilation * (self.kernel_size - 1)

  @property
  def is_causal(self) -> bool:
    return self.padding == (self.state_length, 0)

  def output_length(self, length: int) -> int:
    lo, hi = self.padding
    return (length + lo + hi - self.state_length - 1) // self.stride + 1


def _is_int(value: Any) -> bool:
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _positive_int(name: str, value: Any) -> int:
  if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 1:
    value = value[0]  # flax writes 1-D strides and dilations as (s,)
  if not _is_int(value):
    raise TypeError(f"{name} must be an int (or a 1-tuple of one); got {value!r}")
  if value < 1:
    raise ValueError(f"{name} must be >= 1; got {value!r}")
  return int(value)


def _padding(padding: Any, length: int, kernel_size: int, stride: int, dilation: int) -> tuple[int, int]:
  span = dilation * (kernel_size - 1)
  if isinstance(padding, str):
    name = padding.upper()
    if name not in _PADDING_STRINGS:
      raise ValueError(f"padding must be one of {', '.join(_PADDING_STRINGS)}, an int, or (before, after); "
                       f"got {padding!r}")
    if name == "CAUSAL":
      return (span, 0)
    ((lo, hi),) = lax.padtype_to_pads((length,), (span + 1,), (stride,), name)
    return (int(lo), int(hi))
  form_error = TypeError("padding must be 'CAUSAL', 'SAME', 'SAME_LOWER', 'VALID', an int (both sides), "
                         f"(before, after) or [(before, after)] as flax writes it; got {padding!r}")
  if _is_int(padding):
    pads = (int(padding), int(padding))
  elif isinstance(padding, Sequence) and len(padding) == 1 and isinstance(padding[0], Sequence):
    return _padding(tuple(padding[0]), length, kernel_size, stride, dilation)
  elif isinstance(padding, Sequence) and len(padding) == 2 and all(_is_int(v) for v in padding):
    pads = (int(padding[0]), int(padding[1]))
  else:
    raise form_error
  if -min(pads[0], 0) - min(pads[1], 0) > length:
    raise ValueError(f"negative padding crops more than the input holds: padding {padding!r} on L = {length}")
  return pads


def _check_array(name: str, value: Any):
  if not hasattr(value, "shape") or not hasattr(value, "dtype"):
    raise TypeError(f"{name} must be an array; got {type(value).__name__}")


def _check_float_dtype(name: str, dtype, allow_float64: bool) -> None:
  dtypes = SUPPORTED_DTYPES + ((_FLOAT64,) if allow_float64 else ())
  if jnp.dtype(dtype) not in dtypes:
    raise TypeError(f"{name} dtype must be one of {', '.join(str(d) for d in dtypes)}; got {jnp.dtype(dtype)}")


def check_activation(activation) -> None:
  if activation not in _activations.ACTIVATIONS:
    names = tuple(a for a in _activations.ACTIVATIONS if a is not None)
    raise ValueError(f"activation must be None or one of {names}; got {activation!r}")


def check_implementation(implementation) -> None:
  if implementation is not None and implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation must be None or one of {IMPLEMENTATIONS}; got {implementation!r}")


def check_kernel(kernel, channels: int, dtype, allow_float64: bool) -> int:
  """The filter size K of a (K, 1, C) kernel, after checking it against x."""
  _check_array("kernel", kernel)
  if kernel.ndim != 3 or kernel.shape[1] != 1:
    raise ValueError("kernel must have shape (K, 1, C), the layout of flax's "
                     f"Conv(features=C, kernel_size=(K,), feature_group_count=C); got shape {tuple(kernel.shape)}")
  if kernel.shape[2] != channels:
    raise ValueError(f"kernel has {kernel.shape[2]} channels but x has {channels}; "
                     "a depthwise kernel needs one filter per channel")
  if kernel.shape[0] < 1:
    raise ValueError(f"kernel must have K >= 1 taps; got shape {tuple(kernel.shape)}")
  _check_float_dtype("kernel", kernel.dtype, allow_float64)
  if jnp.dtype(kernel.dtype) != jnp.dtype(dtype):
    raise TypeError(f"x and kernel must have the same dtype; got x {jnp.dtype(dtype)} and kernel "
                    f"{jnp.dtype(kernel.dtype)}")
  return int(kernel.shape[0])


def check_bias(bias, channels: int, dtype):
  if bias is None:
    return None
  _check_array("bias", bias)
  if tuple(bias.shape) != (channels,):
    raise ValueError(f"bias must have shape (C,) = ({channels},), one value per channel; got {tuple(bias.shape)}")
  if jnp.dtype(bias.dtype) != jnp.dtype(dtype):
    raise TypeError(f"bias must have x's dtype {jnp.dtype(dtype)}; got {jnp.dtype(bias.dtype)}")
  return bias


def check_conv1d(x, kernel, *, padding, strides, kernel_dilation, bias, activation, segment_ids, initial_state,
                 return_final_state, implementation) -> Conv1DSpec:
  """Checks every argument of depthwise_conv1d; returns the normalized geometry."""
  check_implementation(implementation)
  allow_float64 = implementation != "flashdwc"
  _check_array("x", x)
  if x.ndim != 3:
    raise ValueError(f"x must have rank 3 (N, L, C); got shape {tuple(x.shape)}")
  if x.shape[2] == 0:
    raise ValueError(f"x must have at least one channel; got shape {tuple(x.shape)}")
  _check_float_dtype("x", x.dtype, allow_float64)
  n, length, channels = x.shape
  k = check_kernel(kernel, channels, x.dtype, allow_float64)
  stride = _positive_int("strides", strides)
  dilation = _positive_int("kernel_dilation", kernel_dilation)
  spec = Conv1DSpec(kernel_size=k, stride=stride, dilation=dilation,
                    padding=_padding(padding, length, k, stride, dilation))
  if spec.output_length(length) < 0:
    raise ValueError(f"the output would be empty: L = {length}, K = {k}, kernel_dilation = {dilation}, "
                     f"padding = {spec.padding}, strides = {stride}; pad more or use a smaller kernel")
  check_bias(bias, channels, x.dtype)
  check_activation(activation)
  if not isinstance(return_final_state, bool):
    raise TypeError(f"return_final_state must be a bool; got {return_final_state!r}")
  if segment_ids is not None:
    _check_array("segment_ids", segment_ids)
    if tuple(segment_ids.shape) != (n, length):
      raise ValueError(f"segment_ids must have shape (N, L) = ({n}, {length}); got {tuple(segment_ids.shape)}")
    if not jnp.issubdtype(segment_ids.dtype, jnp.integer):
      raise TypeError(f"segment_ids must be an integer array; got {jnp.dtype(segment_ids.dtype)}")
    lo, hi = spec.padding
    # Output t belongs to position t's segment: that needs one output per input.
    if stride != 1 or lo < 0 or hi < 0 or lo + hi != spec.state_length:
      raise ValueError("segment_ids needs one output per input position: strides=1 and padding 'CAUSAL', "
                       "'SAME', 'SAME_LOWER' or (before, after) >= 0 with before + after = "
                       f"kernel_dilation * (K - 1) = {spec.state_length}; got strides={strides!r}, "
                       f"padding={padding!r}")
  if initial_state is not None or return_final_state:
    what = "initial_state" if initial_state is not None else "return_final_state=True"
    if stride != 1 or not spec.is_causal:
      raise ValueError(f"{what} needs a causal convolution: strides=1 and padding 'CAUSAL' (or "
                       f"({spec.state_length}, 0)); got strides={strides!r}, padding={padding!r}")
  if initial_state is not None:
    _check_array("initial_state", initial_state)
    want = (n, spec.state_length, channels)
    if tuple(initial_state.shape) != want:
      raise ValueError(f"initial_state must have shape (N, kernel_dilation * (K - 1), C) = {want}; "
                       f"got {tuple(initial_state.shape)}")
    if jnp.dtype(initial_state.dtype) != jnp.dtype(x.dtype):
      raise TypeError(f"initial_state must have x's dtype {jnp.dtype(x.dtype)}; "
                      f"got {jnp.dtype(initial_state.dtype)}")
  return spec


def check_update(x_t, state, kernel, bias, activation, implementation=None) -> int:
  """Checks every argument of depthwise_conv1d_update; returns K."""
  check_implementation(implementation)
  _check_array("x_t", x_t)
  _check_array("state", state)
  if x_t.ndim != 2:
    raise ValueError(f"x_t must have rank 2 (N, C), one step of each sequence; got shape {tuple(x_t.shape)}")
  allow_float64 = implementation != "flashdwc"
  _check_float_dtype("x_t", x_t.dtype, allow_float64=allow_float64)
  n, channels = x_t.shape
  k = check_kernel(kernel, channels, x_t.dtype, allow_float64=allow_float64)
  if tuple(state.shape) != (n, k - 1, channels):
    raise ValueError(f"state must have shape (N, K - 1, C) = {(n, k - 1, channels)}, the last K - 1 inputs "
                     f"oldest first; got {tuple(state.shape)}")
  if jnp.dtype(state.dtype) != jnp.dtype(x_t.dtype):
    raise TypeError(f"state must have x_t's dtype {jnp.dtype(x_t.dtype)}; got {jnp.dtype(state.dtype)}")
  check_bias(bias, channels, x_t.dtype)
  check_activation(activation)
  return k
