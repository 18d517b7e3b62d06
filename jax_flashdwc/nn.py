"""Flax layers: `Conv` and `intercept` for linen, `DepthwiseConv2D` for linen and nnx.

`Conv` is `flax.linen.Conv` (a subclass: same fields, defaults, parameters and
initializers, any rank) whose depthwise calls run this library's kernels;
`intercept()` does the same for every `flax.linen.Conv` of unmodified model code
(see docs/drop-in.md). The nnx counterparts are in `jax_flashdwc.nnx`.

Both mirror `Conv(features=C, feature_group_count=C)` of their API: the same
attribute names, the same parameters ("kernel": (KH, KW, 1, C), "bias": (C,)),
the same default initializers, and the same dtype promotion, so that a
checkpoint of one loads into the other. They compute with
`jax_flashdwc.depthwise_conv2d`. Needs flax (`pip install ".[nn]"`).

`fold_batch_norm` turns a preceding BatchNorm into the scale and shift of the
layers' input prologue (BN + activation + depthwise conv in one kernel).

Differences from flax's Conv, all deliberate: 2-D only, so an int kernel_size
means (k, k) (flax reads an int as a 1-D kernel); no input_dilation, mask or
custom conv function; `precision` is honoured by implementation="xla" only (the
library's kernels always compute in float32).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import jax
import flax
import jax.numpy as jnp
from flax import linen, nnx

from .conv import depthwise_conv2d
from .lax_conv import Routed

PaddingLike = Any
Implementation = Literal["flashdwc", "xla"] | None

default_kernel_init = linen.initializers.lecun_normal()
default_bias_init = linen.initializers.zeros_init()


def _kernel_hw(kernel_size) -> tuple[int, int]:
  if isinstance(kernel_size, int):
    return (kernel_size, kernel_size)
  kernel_size = tuple(kernel_size)
  if len(kernel_size) != 2:
    raise ValueError(f"kernel_size must be an int or (KH, KW); got {kernel_size!r}")
  return kernel_size


def fold_batch_norm(mean: jax.Array, var: jax.Array, scale: jax.Array | None = None,
                    bias: jax.Array | None = None, epsilon: float = 1e-5) -> tuple[jax.Array, jax.Array]:
  """A batch norm as the per-channel (input_scale, input_shift) of the layers' prologue.

  `(x - mean) / sqrt(var + epsilon) * scale + bias` equals `x * input_scale +
  input_shift`. Pass flax's `BatchNorm` statistics ("mean", "var" in
  batch_stats) and parameters ("scale", "bias"), and the same epsilon (flax's
  default is 1e-5); then `DepthwiseConv2D(..., input_activation=act)(x,
  *fold_batch_norm(...))` computes the layer on `act(BatchNorm(x))` without
  writing the normalized tensor. Differentiable, so it also works with batch
  statistics computed in a training step. Results are float32.
  """
  mean, var = jnp.asarray(mean, jnp.float32), jnp.asarray(var, jnp.float32)
  input_scale = jax.lax.rsqrt(var + epsilon)
  if scale is not None:
    input_scale = input_scale * jnp.asarray(scale, jnp.float32)
  input_shift = -mean * input_scale
  if bias is not None:
    input_shift = input_shift + jnp.asarray(bias, jnp.float32)
  return input_scale, input_shift


def _apply(inputs, kernel, bias, *, features, strides, padding, kernel_dilation, dtype, precision,
           implementation, activation, deterministic, promote_dtype, input_scale, input_shift, input_activation):
  """Shared forward of both layers: promotion, batch flattening, conv, bias."""
  if inputs.ndim < 3:
    raise ValueError(f"inputs must be (..., H, W, C); got shape {inputs.shape}")
  if inputs.shape[-1] != features:
    raise ValueError(f"inputs have {inputs.shape[-1]} channels but the layer has features={features}; "
                     "a depthwise layer keeps the channel count")
  inputs, kernel, bias = promote_dtype(inputs, kernel, bias, dtype=dtype)
  batch_shape = inputs.shape[:-3]
  x = inputs.reshape((-1, *inputs.shape[-3:]))
  # The bias (and activation) go into the kernel's epilogue, the input scale, shift
  # and activation into its prologue: no extra pass over y or x.
  y = depthwise_conv2d(x, kernel, strides=strides, padding=padding, kernel_dilation=kernel_dilation,
                       precision=precision, implementation=implementation, bias=bias, activation=activation,
                       input_scale=input_scale, input_shift=input_shift, input_activation=input_activation,
                       deterministic=deterministic)
  return y.reshape((*batch_shape, *y.shape[1:]))


class DepthwiseConv2D(linen.Module):
  """Depthwise 2-D convolution, a drop-in for `linen.Conv(C, k, feature_group_count=C)`.

  Attributes:
    features: number of channels C (input and output).
    kernel_size: int or (KH, KW).
    strides: int or (stride_h, stride_w).
    padding: "SAME", "VALID", "SAME_LOWER", an int, or ((top, bottom), (left, right)).
    kernel_dilation: int or (dilation_h, dilation_w).
    use_bias: whether to add a per-channel bias.
    dtype: computation dtype (None: inferred from inputs and params).
    param_dtype: dtype of the parameters.
    precision: passed to XLA when implementation="xla".
    kernel_init, bias_init: initializers of "kernel" (KH, KW, 1, C) and "bias" (C,).
    implementation: None/"flashdwc" for this library's kernels, "xla" for XLA's conv.
    activation: None, "relu", "gelu", "gelu_tanh" or "silu", applied after the
      bias inside the kernel (an addition to Conv's attributes; None matches Conv).
    input_activation: the activation of the input prologue (see `__call__`), or
      None. An addition to Conv's attributes.
    deterministic: a bit-identical kernel gradient from run to run (see
      `depthwise_conv2d`).
  """

  features: int
  kernel_size: int | Sequence[int]
  strides: int | Sequence[int] = 1
  padding: PaddingLike = "SAME"
  kernel_dilation: int | Sequence[int] = 1
  use_bias: bool = True
  dtype: Any = None
  param_dtype: Any = jnp.float32
  precision: Any = None
  kernel_init: Any = default_kernel_init
  bias_init: Any = default_bias_init
  implementation: Implementation = None
  activation: str | None = None
  input_activation: str | None = None
  deterministic: bool = False

  @linen.compact
  def __call__(self, inputs: jax.Array, input_scale: jax.Array | None = None,
               input_shift: jax.Array | None = None) -> jax.Array:
    """inputs: (..., H, W, C) -> (..., Ho, Wo, C).

    input_scale, input_shift: optional (C,) arrays; the conv then runs on
    input_activation(inputs * input_scale + input_shift), applied by the kernel
    as it reads the inputs: a preceding batch norm folded into a scale and shift
    (see `depthwise_conv2d`).
    """
    kernel = self.param("kernel", self.kernel_init, (*_kernel_hw(self.kernel_size), 1, self.features),
                        self.param_dtype)
    bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype) if self.use_bias else None
    return _apply(inputs, kernel, bias, features=self.features, strides=self.strides, padding=self.padding,
                  kernel_dilation=self.kernel_dilation, dtype=self.dtype, precision=self.precision,
                  implementation=self.implementation, activation=self.activation,
                  deterministic=self.deterministic, promote_dtype=linen.dtypes.promote_dtype,
                  input_scale=input_scale, input_shift=input_shift, input_activation=self.input_activation)


class NnxDepthwiseConv2D(nnx.Module):
  """Depthwise 2-D convolution for nnx, a drop-in for
  `nnx.Conv(C, C, k, feature_group_count=C, rngs=rngs)`; attributes as in the linen layer."""

  def __init__(self, features: int, kernel_size: int | Sequence[int], strides: int | Sequence[int] = 1, *,
               padding: PaddingLike = "SAME", kernel_dilation: int | Sequence[int] = 1, use_bias: bool = True,
               dtype: Any = None, param_dtype: Any = jnp.float32, precision: Any = None,
               kernel_init: Any = default_kernel_init, bias_init: Any = default_bias_init,
               implementation: Implementation = None, activation: str | None = None,
               input_activation: str | None = None, deterministic: bool = False, rngs: nnx.Rngs):
    kernel_hw = _kernel_hw(kernel_size)
    self.kernel = nnx.Param(kernel_init(rngs.params(), (*kernel_hw, 1, features), param_dtype))
    self.bias = nnx.Param(bias_init(rngs.params(), (features,), param_dtype)) if use_bias else nnx.data(None)
    self.features = features
    self.kernel_size = kernel_hw
    self.strides = strides
    self.padding = padding
    self.kernel_dilation = kernel_dilation
    self.use_bias = use_bias
    self.dtype = dtype
    self.param_dtype = param_dtype
    self.precision = precision
    self.implementation = implementation
    self.activation = activation
    self.input_activation = input_activation
    self.deterministic = deterministic

  def __call__(self, inputs: jax.Array, input_scale: jax.Array | None = None,
               input_shift: jax.Array | None = None) -> jax.Array:
    """inputs: (..., H, W, C) -> (..., Ho, Wo, C); the prologue as in the linen layer."""
    bias = self.bias[...] if self.use_bias else None
    return _apply(inputs, self.kernel[...], bias, features=self.features, strides=self.strides,
                  padding=self.padding, kernel_dilation=self.kernel_dilation, dtype=self.dtype,
                  precision=self.precision, implementation=self.implementation,
                  activation=self.activation, deterministic=self.deterministic,
                  promote_dtype=lambda *arrays, dtype: nnx.nn.dtypes.promote_dtype(arrays, dtype=dtype),
                  input_scale=input_scale, input_shift=input_shift, input_activation=self.input_activation)


# flax.linen.Conv takes its conv function as a field (`conv_general_dilated`,
# None: lax's). Its __call__ reads the field when it convolves, so setting it for
# the length of one call routes that call without re-implementing the layer.
_HAS_CONV_FIELD = "conv_general_dilated" in {f.name for f in dataclasses.fields(linen.Conv)}


def _check_conv_field():
  if not _HAS_CONV_FIELD:
    raise NotImplementedError("jax_flashdwc.nn.Conv and intercept() need a flax whose linen.Conv has the "
                              f"`conv_general_dilated` field; flax {flax.__version__} lacks it")


@contextlib.contextmanager
def _conv_function(module: linen.Conv, fn) -> Iterator[None]:
  """`module` convolves with `fn` inside the block (the field is frozen outside setup)."""
  object.__setattr__(module, "conv_general_dilated", fn)
  try:
    yield
  finally:
    object.__setattr__(module, "conv_general_dilated", None)


def _uses_lax(module: linen.Conv) -> bool:
  return module.conv_general_dilated is None and module.conv_general_dilated_cls is None


class Conv(linen.Conv):
  """`flax.linen.Conv` with its depthwise calls on this library's kernels.

  Every field, default, parameter name, shape, dtype and initializer is
  flax's (this is a subclass; the class is named Conv so that auto-named
  submodules are "Conv_0", ... as with flax's), so checkpoints load both ways.
  A call with feature_group_count equal to the input channels (any multiplier:
  features = m * channels) runs `depthwise_conv2d` through
  `jax_flashdwc.lax_conv.conv_general_dilated`; every other call, and every
  call of a layer given its own `conv_general_dilated` or
  `conv_general_dilated_cls`, runs flax's code unchanged. Padding ('CIRCULAR',
  'CAUSAL', ...), batch dimensions and dtype promotion are flax's own.

  Attributes (in addition to flax's):
    implementation: None runs depthwise calls in float32, float16 and bfloat16
      on this library's kernels and the others (float64, ...) on XLA's conv;
      "flashdwc" raises a TypeError for a depthwise call without a kernel;
      "xla" runs XLA's conv always.
  """

  implementation: Implementation = None

  def __call__(self, inputs: jax.Array) -> jax.Array:
    _check_conv_field()
    if not _uses_lax(self):
      return super().__call__(inputs)
    with _conv_function(self, Routed(self.implementation)):
      return super().__call__(inputs)


@contextlib.contextmanager
def intercept(implementation: Implementation = None) -> Iterator[None]:
  """Routes every `flax.linen.Conv` called inside the block to this library.

  Built on `flax.linen.intercept_methods`: unmodified model code, written
  against `flax.linen.Conv`, runs its depthwise convolutions on the library's
  kernels (as `Conv` above); dense and grouped ones, and layers given their own
  conv function, run flax's code unchanged. Parameters are untouched:
  `model.init` and `model.apply` inside the block give and take flax's trees.
  Applies to the calls traced inside the block: a function JAX traced before
  it (`jax.jit(model.apply)` called outside, even through another `jax.jit` of
  the same function) keeps its cached trace, with lax's conv.

      with jax_flashdwc.nn.intercept():
        y = model.apply(variables, x)
  """
  _check_conv_field()
  fn = Routed(implementation)

  def interceptor(next_fun, args, kwargs, context):
    module = context.module
    if (context.method_name != "__call__" or not isinstance(module, linen.Conv) or isinstance(module, Conv)
        or not _uses_lax(module)):
      return next_fun(*args, **kwargs)
    with _conv_function(module, fn):
      return next_fun(*args, **kwargs)

  with linen.intercept_methods(interceptor):
    yield
