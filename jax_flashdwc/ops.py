"""The three JAX primitives of depthwise convolution and their rules.

Each primitive has an abstract evaluation (output shape and dtype), an FFI
lowering per platform (cpu to the C++ handlers, cuda to the CUDA handlers) and
a batching rule that folds a vmapped axis into the batch or the channel axis, so
that a vmapped call is still one kernel launch.

- dwconv_fwd(x, w) -> y
- dwconv_bwd_data(dy, w) -> dx
- dwconv_bwd_filter(x, dy) -> dw

x: (N, H, W, C); w: (KH, KW, 1, C); y and dy: (N, Ho, Wo, C).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from . import _ffi
from ._geometry import ConvGeometry

try:
  from jax.interpreters.xla import apply_primitive as _apply_primitive
except ImportError:  # Newer jax keeps it in dispatch only.
  from jax._src.dispatch import apply_primitive as _apply_primitive

dwconv_fwd_p = Primitive("flashdwc_fwd")
dwconv_bwd_data_p = Primitive("flashdwc_bwd_data")
dwconv_bwd_filter_p = Primitive("flashdwc_bwd_filter")


def dwconv_fwd(x: jax.Array, w: jax.Array, geometry: ConvGeometry) -> jax.Array:
  """y = conv(x, w): (N, H, W, C), (KH, KW, 1, C) -> (N, Ho, Wo, C)."""
  return dwconv_fwd_p.bind(x, w, geometry=geometry)


def dwconv_bwd_data(dy: jax.Array, w: jax.Array, geometry: ConvGeometry,
                    input_hw: tuple[int, int]) -> jax.Array:
  """dx from dy: (N, Ho, Wo, C), (KH, KW, 1, C) -> (N, H, W, C), (H, W) = input_hw."""
  return dwconv_bwd_data_p.bind(dy, w, geometry=geometry, input_hw=tuple(input_hw))


def dwconv_bwd_filter(x: jax.Array, dy: jax.Array, geometry: ConvGeometry,
                      kernel_hw: tuple[int, int]) -> jax.Array:
  """dw from x and dy: (N, H, W, C), (N, Ho, Wo, C) -> (KH, KW, 1, C), (KH, KW) = kernel_hw."""
  return dwconv_bwd_filter_p.bind(x, dy, geometry=geometry, kernel_hw=tuple(kernel_hw))


# Abstract evaluation.

def _fwd_abstract(x, w, *, geometry):
  ho, wo = geometry.output_hw(x.shape[1:3], w.shape[:2])
  return ShapedArray((x.shape[0], ho, wo, x.shape[3]), x.dtype)


def _bwd_data_abstract(dy, w, *, geometry, input_hw):
  return ShapedArray((dy.shape[0], *input_hw, dy.shape[3]), dy.dtype)


def _bwd_filter_abstract(x, dy, *, geometry, kernel_hw):
  return ShapedArray((*kernel_hw, 1, x.shape[3]), x.dtype)


# Lowering: only `geometry` reaches the handler; the shapes travel with the buffers.

def _ffi_lowering(target: str):
  lower = jax.ffi.ffi_lowering(target)

  def rule(ctx, *operands, geometry, **_shape_params):
    return lower(ctx, *operands, geometry=geometry.ffi_attribute())

  return rule


def _missing_cuda_lowering(ctx, *operands, **params):
  raise NotImplementedError(
      "jax_flashdwc was built without its CUDA kernels (no CUDA compiler was found at "
      "install time), so it cannot run on a GPU. Reinstall it where nvcc is on PATH, or "
      "pass implementation='xla' to depthwise_conv2d.")


for _prim, _abstract in ((dwconv_fwd_p, _fwd_abstract),
                         (dwconv_bwd_data_p, _bwd_data_abstract),
                         (dwconv_bwd_filter_p, _bwd_filter_abstract)):
  _prim.def_impl(partial(_apply_primitive, _prim))
  _prim.def_abstract_eval(_abstract)
  mlir.register_lowering(_prim, _ffi_lowering(_prim.name), platform="cpu")
  mlir.register_lowering(
      _prim, _ffi_lowering(_prim.name) if _ffi.cuda_available() else _missing_cuda_lowering,
      platform="cuda")


# Batching. A vmapped axis of size B becomes part of N when only the image-like
# operand is mapped (the filter is shared), and part of C otherwise (each mapped
# filter is its own set of channels). Both keep one launch per vmapped call.

def _to_channels(a, bdim, size):
  """(..., C) with a batch axis at bdim (or none) -> (..., size * C), batch-major."""
  if bdim is None:
    a = jnp.broadcast_to(a[..., None, :], (*a.shape[:-1], size, a.shape[-1]))
  else:
    a = jnp.moveaxis(a, bdim, a.ndim - 2)
  return a.reshape(*a.shape[:-2], size * a.shape[-1])


def _split_channels(out, size):
  """(..., size * C) -> (..., size, C); the batch axis is ndim - 2."""
  return out.reshape(*out.shape[:-1], size, out.shape[-1] // size), out.ndim - 1


def _image_filter_batcher(prim, args, dims, **params):
  """Batching for fwd (x, w) and bwd_data (dy, w): image-like first, filter second."""
  image, w = args
  image_dim, w_dim = dims
  if w_dim is None:
    image = jnp.moveaxis(image, image_dim, 0)
    size, n = image.shape[:2]
    out = prim.bind(image.reshape(size * n, *image.shape[2:]), w, **params)
    return out.reshape(size, n, *out.shape[1:]), 0
  size = w.shape[w_dim]
  out = prim.bind(_to_channels(image, image_dim, size), _to_channels(w, w_dim, size), **params)
  return _split_channels(out, size)


def _bwd_filter_batcher(args, dims, **params):
  x, dy = args
  size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
  out = dwconv_bwd_filter_p.bind(_to_channels(x, dims[0], size), _to_channels(dy, dims[1], size),
                                 **params)
  return _split_channels(out, size)


batching.primitive_batchers[dwconv_fwd_p] = partial(_image_filter_batcher, dwconv_fwd_p)
batching.primitive_batchers[dwconv_bwd_data_p] = partial(_image_filter_batcher, dwconv_bwd_data_p)
batching.primitive_batchers[dwconv_bwd_filter_p] = _bwd_filter_batcher
