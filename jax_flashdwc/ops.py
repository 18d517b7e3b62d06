"""The three operations of depthwise convolution, as JAX sees them.

- dwconv_fwd(x, w) -> y
- dwconv_fwd_fused(x, w, bias, scale, shift) -> activation(conv(prologue(x), w) + bias),
  in the same kernel
- dwconv_bwd_data(dy, w) -> dx
- dwconv_bwd_filter(x, dy) -> dw (optionally deterministic)

x: (N, H, W, C); w: (KH, KW, 1, C); y and dy: (N, Ho, Wo, C).

Each is a custom call (_custom_calls.py: a primitive with abstract evaluation and
an FFI lowering per platform) inside partitioning rules (_partitioning.py, so that
sharded operands stay sharded), inside a batching rule (here, through
jax.custom_batching.custom_vmap): a vmapped axis of size B is folded into N when
only the image-like operand is mapped (the filter is shared), and into C
otherwise (each mapped filter is its own set of channels). Either way a vmapped
call is still one kernel launch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

from . import _partitioning
from ._geometry import ConvGeometry


def _to_channels(a, batched, size):
  """(..., C) with the vmapped axis at 0 (or none) -> (..., size * C), batch-major."""
  if batched:
    a = jnp.moveaxis(a, 0, a.ndim - 2)
  else:
    a = jnp.broadcast_to(a[..., None, :], (*a.shape[:-1], size, a.shape[-1]))
  return a.reshape(*a.shape[:-2], size * a.shape[-1])


def _from_channels(out, size):
  """(..., size * C) -> (size, ..., C): the vmapped axis back in front."""
  out = out.reshape(*out.shape[:-1], size, out.shape[-1] // size)
  return jnp.moveaxis(out, out.ndim - 2, 0)


def _image_filter_op(call, image, w):
  """Batching for the (image, filter) -> image passes: fwd (x, w) and bwd_data (dy, w)."""

  @custom_vmap
  def op(image, w):
    return call(image, w)

  @op.def_vmap
  def _batched(size, in_batched, image, w):
    image_batched, w_batched = in_batched
    if not w_batched:
      out = _image_filter_op(call, image.reshape(size * image.shape[1], *image.shape[2:]), w)
      return out.reshape(size, image.shape[1], *out.shape[1:]), True
    out = _image_filter_op(call, _to_channels(image, image_batched, size), _to_channels(w, True, size))
    return _from_channels(out, size), True

  return op(image, w)


def dwconv_fwd(x: jax.Array, w: jax.Array, geometry: ConvGeometry) -> jax.Array:
  """y = conv(x, w): (N, H, W, C), (KH, KW, 1, C) -> (N, Ho, Wo, C)."""
  return _image_filter_op(lambda x, w: _partitioning.fwd(x, w, geometry), x, w)


def dwconv_fwd_fused(x: jax.Array, w: jax.Array, bias: jax.Array, scale: jax.Array, shift: jax.Array,
                     geometry: ConvGeometry, activation: str | None, prologue: bool = False,
                     input_activation: str | None = None) -> jax.Array:
  """activation(conv(x', w) + bias), x' = input_activation(x * scale + shift) per channel
  when `prologue` (else x' = x), all in one kernel: the prologue as x is read, the
  bias (C,) and activation as y is stored. scale and shift are (C,) float32."""

  @custom_vmap
  def op(x, w, bias, scale, shift):
    return _partitioning.fwd_fused(x, w, bias, scale, shift, geometry, activation, prologue, input_activation)

  @op.def_vmap
  def _batched(size, in_batched, x, w, bias, scale, shift):
    x_batched, *per_channel_batched = in_batched
    if not any(per_channel_batched):
      out = dwconv_fwd_fused(x.reshape(size * x.shape[1], *x.shape[2:]), w, bias, scale, shift, geometry,
                             activation, prologue, input_activation)
      return out.reshape(size, x.shape[1], *out.shape[1:]), True
    w, bias, scale, shift = (_to_channels(a, batched, size)
                             for a, batched in zip((w, bias, scale, shift), per_channel_batched))
    out = dwconv_fwd_fused(_to_channels(x, x_batched, size), w, bias, scale, shift, geometry, activation,
                           prologue, input_activation)
    return _from_channels(out, size), True

  return op(x, w, bias, scale, shift)


def dwconv_bwd_data(dy: jax.Array, w: jax.Array, geometry: ConvGeometry,
                    input_hw: tuple[int, int]) -> jax.Array:
  """dx from dy: (N, Ho, Wo, C), (KH, KW, 1, C) -> (N, H, W, C), (H, W) = input_hw."""
  input_hw = tuple(input_hw)
  return _image_filter_op(lambda dy, w: _partitioning.bwd_data(dy, w, geometry, input_hw), dy, w)


def dwconv_bwd_filter(x: jax.Array, dy: jax.Array, geometry: ConvGeometry,
                      kernel_hw: tuple[int, int], deterministic: bool = False) -> jax.Array:
  """dw from x and dy: (N, H, W, C), (N, Ho, Wo, C) -> (KH, KW, 1, C), (KH, KW) = kernel_hw.

  deterministic: sum the partial results in a fixed order (bit-identical across
  runs) instead of merging them with atomic adds on the GPU.
  """
  kernel_hw = tuple(kernel_hw)
  deterministic = bool(deterministic)

  @custom_vmap
  def op(x, dy):
    return _partitioning.bwd_filter(x, dy, geometry, kernel_hw, deterministic)

  @op.def_vmap
  def _batched(size, in_batched, x, dy):
    # Each vmapped pair has its own filter gradient: always fold into channels.
    out = dwconv_bwd_filter(_to_channels(x, in_batched[0], size), _to_channels(dy, in_batched[1], size),
                            geometry, kernel_hw, deterministic)
    return _from_channels(out, size), True

  return op(x, dy)
