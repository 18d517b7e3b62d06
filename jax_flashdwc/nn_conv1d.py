"""Flax layers for the depthwise 1-D convolution: `CausalConv1D` (linen) and
`NnxCausalConv1D` (nnx).

Their parameters are named and shaped as those of
``Conv(features=C, kernel_size=(K,), feature_group_count=C, padding='CAUSAL')``
("kernel": (K, 1, C), "bias": (C,)), with the same default initializers and dtype
promotion, so checkpoints move between them and flax's Conv. They compute with
`jax_flashdwc.depthwise_conv1d`; `padding` may be any of its paddings, so the
same layers serve non-causal sequence convolutions. Needs flax.

Calls take (..., L, C) inputs and the keyword arguments segment_ids,
initial_state and return_final_state of depthwise_conv1d; `step` runs one
decoding step with depthwise_conv1d_update.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp
from flax import linen, nnx

from .conv1d import depthwise_conv1d, depthwise_conv1d_update

Implementation = Literal["flashdwc", "xla"] | None

default_kernel_init = linen.initializers.lecun_normal()
default_bias_init = linen.initializers.zeros_init()


def _kernel_size(kernel_size) -> int:
  if isinstance(kernel_size, Sequence):
    if len(kernel_size) != 1:
      raise ValueError(f"kernel_size must be an int or (K,) for a 1-D convolution; got {kernel_size!r}")
    kernel_size = kernel_size[0]
  return int(kernel_size)


def _check_features(inputs, features):
  if inputs.ndim < 2:
    raise ValueError(f"inputs must be (..., L, C); got shape {inputs.shape}")
  if inputs.shape[-1] != features:
    raise ValueError(f"inputs have {inputs.shape[-1]} channels but the layer has features={features}; "
                     "a depthwise layer keeps the channel count")


def _apply(inputs, kernel, bias, layer, promote_dtype, segment_ids, initial_state, return_final_state):
  _check_features(inputs, layer.features)
  inputs, kernel, bias, initial_state = promote_dtype(inputs, kernel, bias, initial_state, dtype=layer.dtype)
  batch_shape = inputs.shape[:-2]
  flat = lambda a: None if a is None else a.reshape((-1, *a.shape[len(batch_shape):]))
  out = depthwise_conv1d(flat(inputs), kernel, padding=layer.padding, strides=layer.strides,
                         kernel_dilation=layer.kernel_dilation, bias=bias, activation=layer.activation,
                         segment_ids=flat(segment_ids), initial_state=flat(initial_state),
                         return_final_state=return_final_state, implementation=layer.implementation)
  unflat = lambda a: a.reshape((*batch_shape, *a.shape[1:]))
  return (unflat(out[0]), unflat(out[1])) if return_final_state else unflat(out)


def _step(x_t, state, kernel, bias, layer, promote_dtype):
  if layer.kernel_dilation not in (1, (1,)) or layer.strides not in (1, (1,)):
    raise ValueError("step needs kernel_dilation=1 and strides=1; the layer has "
                     f"kernel_dilation={layer.kernel_dilation!r}, strides={layer.strides!r}")
  x_t, kernel, bias, state = promote_dtype(x_t, kernel, bias, state, dtype=layer.dtype)
  return depthwise_conv1d_update(x_t, state, kernel, bias, layer.activation, layer.implementation)


class CausalConv1D(linen.Module):
  """Depthwise 1-D convolution, a drop-in for
  `linen.Conv(C, (K,), feature_group_count=C, padding='CAUSAL')`.

  Attributes:
    features: number of channels C (input and output).
    kernel_size: K, as an int or (K,).
    strides, padding, kernel_dilation: as in depthwise_conv1d (padding "CAUSAL"
      by default).
    use_bias: whether to add a per-channel bias.
    dtype: computation dtype (None: inferred from inputs and params).
    param_dtype: dtype of the parameters.
    kernel_init, bias_init: initializers of "kernel" (K, 1, C) and "bias" (C,).
    activation: None, "relu", "gelu", "gelu_tanh" or "silu", fused after the bias
      (an addition to Conv's attributes; None matches Conv).
    implementation: None/"flashdwc" for this library's kernels, "xla" for XLA.
  """

  features: int
  kernel_size: int | Sequence[int]
  strides: int | Sequence[int] = 1
  padding: Any = "CAUSAL"
  kernel_dilation: int | Sequence[int] = 1
  use_bias: bool = True
  dtype: Any = None
  param_dtype: Any = jnp.float32
  kernel_init: Any = default_kernel_init
  bias_init: Any = default_bias_init
  activation: str | None = None
  implementation: Implementation = None

  def _params(self):
    kernel = self.param("kernel", self.kernel_init, (_kernel_size(self.kernel_size), 1, self.features),
                        self.param_dtype)
    bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype) if self.use_bias else None
    return kernel, bias

  @linen.compact
  def __call__(self, inputs: jax.Array, *, segment_ids: jax.Array | None = None,
               initial_state: jax.Array | None = None, return_final_state: bool = False):
    """inputs (..., L, C) -> (..., Lo, C), or (y, final_state) with return_final_state."""
    kernel, bias = self._params()
    return _apply(inputs, kernel, bias, self, linen.dtypes.promote_dtype, segment_ids, initial_state,
                  return_final_state)

  @linen.compact
  def step(self, x_t: jax.Array, state: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One decoding step: x_t (N, C), state (N, K - 1, C) -> (y_t, new_state)."""
    kernel, bias = self._params()
    return _step(x_t, state, kernel, bias, self, linen.dtypes.promote_dtype)


def _nnx_promote(*arrays, dtype):
  return nnx.nn.dtypes.promote_dtype(arrays, dtype=dtype)


class NnxCausalConv1D(nnx.Module):
  """Depthwise 1-D convolution for nnx, a drop-in for
  `nnx.Conv(C, C, (K,), feature_group_count=C, padding='CAUSAL', rngs=rngs)`;
  attributes as in the linen layer."""

  def __init__(self, features: int, kernel_size: int | Sequence[int], strides: int | Sequence[int] = 1, *,
               padding: Any = "CAUSAL", kernel_dilation: int | Sequence[int] = 1, use_bias: bool = True,
               dtype: Any = None, param_dtype: Any = jnp.float32, kernel_init: Any = default_kernel_init,
               bias_init: Any = default_bias_init, activation: str | None = None,
               implementation: Implementation = None, rngs: nnx.Rngs):
    k = _kernel_size(kernel_size)
    self.kernel = nnx.Param(kernel_init(rngs.params(), (k, 1, features), param_dtype))
    self.bias = nnx.Param(bias_init(rngs.params(), (features,), param_dtype)) if use_bias else nnx.data(None)
    self.features = features
    self.kernel_size = (k,)
    self.strides = strides
    self.padding = padding
    self.kernel_dilation = kernel_dilation
    self.use_bias = use_bias
    self.dtype = dtype
    self.param_dtype = param_dtype
    self.activation = activation
    self.implementation = implementation

  def _params(self):
    return self.kernel[...], (self.bias[...] if self.use_bias else None)

  def __call__(self, inputs: jax.Array, *, segment_ids: jax.Array | None = None,
               initial_state: jax.Array | None = None, return_final_state: bool = False):
    """inputs (..., L, C) -> (..., Lo, C), or (y, final_state) with return_final_state."""
    kernel, bias = self._params()
    return _apply(inputs, kernel, bias, self, _nnx_promote, segment_ids, initial_state, return_final_state)

  def step(self, x_t: jax.Array, state: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One decoding step: x_t (N, C), state (N, K - 1, C) -> (y_t, new_state)."""
    kernel, bias = self._params()
    return _step(x_t, state, kernel, bias, self, _nnx_promote)
