"""The operations of depthwise convolution as JAX primitives.

- dwconv_fwd_p: (x, w) -> y
- dwconv_bwd_data_p: (dy, w) -> dx
- dwconv_bwd_filter_p: (x, dy) -> dw
- dwconv_fwd_fused_p: (x, w, bias, scale, shift) -> activation(conv(x', w) + bias),
  x' = input_activation(x * scale + shift) when `prologue`, all in one kernel

x: (N, H, W, C); w: (KH, KW, 1, C); y and dy: (N, Ho, Wo, C).

The first three are bilinear, and each is the transpose of the others in one
operand, as lax.conv_general_dilated and its two gradients are:

  fwd(x, w):         x-transpose bwd_data(ct, w),   w-transpose bwd_filter(x, ct)
  bwd_data(dy, w):   dy-transpose fwd(ct, w),       w-transpose bwd_filter(ct, dy)
  bwd_filter(x, dy): x-transpose bwd_data(dy, ct),  dy-transpose fwd(x, ct)

so `ad.defbilinear` closes the set under differentiation: jvp, vjp, jacfwd,
jacrev, hessian, grad of grad run on this library's kernels to any order, in
both modes. The fused forward is not bilinear; conv.py gives it a custom_jvp
whose tangent is built from the bilinear three.

Batching: a vmapped axis of size B is folded into N when only the image-like
operand is mapped (the filter is shared), and into C otherwise (each mapped
filter is its own set of channels). Either way a vmapped call is one launch.

Lowering: through the partitioning rules (_partitioning.py, so that sharded
operands stay sharded) to the custom calls (_custom_calls.py). A problem with a
zero-size operand or result lowers to zeros: there is nothing to compute.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from . import _custom_calls as calls
from . import _dilation, _partitioning, routing
from ._geometry import ConvGeometry

# The primitives lower through custom_partitioning, which needs the device
# assignment at lowering time; JAX hands it only to jaxprs holding a primitive of
# this registry (its own cuDNN attention primitives, which wrap custom_partitioning
# the same way, register there too).
from jax._src.dispatch import prim_requires_devices_during_lowering

try:
  from jax.interpreters.xla import apply_primitive
except ImportError:  # Newer jax keeps it in dispatch only.
  from jax._src.dispatch import apply_primitive


def _primitive(name, abstract, partitioned, xla=None, problem=None):
  """A primitive: `abstract` gives its result, `partitioned(*operands, **params)` lowers it.

  With `xla` and `problem`, a bind with routed=True lowers to `xla(*operands, **params)`
  where routing.route says XLA's conv is the faster for `problem(*avals, **params)`
  on the platform being lowered for (implementation=None); routed=False always runs
  this library's kernels (implementation="flashdwc").
  """
  prim = Primitive(name)
  prim.def_impl(lambda *args, **params: apply_primitive(prim, *args, **params))
  prim.def_abstract_eval(abstract)

  def lower(ctx, *operands, **params):
    (out,) = ctx.avals_out
    if any(math.prod(a.shape) == 0 for a in (*ctx.avals_in, out)):
      fn = lambda *_: [jnp.zeros(out.shape, out.dtype)]
    elif (xla is not None and params.get("routed")
          and routing.route(*problem(*ctx.avals_in, **params), platform=_platform(ctx)) == "xla"):
      fn = lambda *args: [xla(*args, **params)]
    else:
      fn = lambda *args: [partitioned(*args, **params)]
    return mlir.lower_fun(fn, multiple_results=True)(ctx, *operands)

  mlir.register_lowering(prim, lower)
  prim_requires_devices_during_lowering.add(prim)
  return prim


def _platform(ctx):
  """The one platform a lowering is for, or None when lowering for several at once."""
  platforms = tuple(getattr(ctx.module_context, "platforms", ()) or ())
  return platforms[0] if len(platforms) == 1 else None


def _fwd_abstract(x, w, *, geometry, deterministic, routed):
  return calls.fwd_abstract(x, w, geometry=geometry)


def _bwd_data_abstract(dy, w, *, geometry, input_hw, deterministic, routed):
  return calls.bwd_data_abstract(dy, w, geometry=geometry, input_hw=input_hw)


def _bwd_filter_abstract(x, dy, *, geometry, kernel_hw, deterministic, routed):
  return calls.bwd_filter_abstract(x, dy, geometry=geometry, kernel_hw=kernel_hw, deterministic=deterministic)


def _fwd_fused_abstract(x, w, bias, scale, shift, *, geometry, activation, prologue, input_activation):
  return calls.fwd_abstract(x, w, geometry=geometry)


dwconv_fwd_p = _primitive(
    "flashdwc_dwconv_fwd", _fwd_abstract,
    lambda x, w, *, geometry, deterministic, routed: _partitioning.fwd(x, w, geometry),
    xla=lambda x, w, *, geometry, deterministic, routed: routing.xla_fwd(x, w, geometry),
    problem=lambda x, w, *, geometry, **_: ("fwd", x, w.shape[:2], geometry))
dwconv_bwd_data_p = _primitive(
    "flashdwc_dwconv_bwd_data", _bwd_data_abstract,
    lambda dy, w, *, geometry, input_hw, deterministic, routed: _partitioning.bwd_data(dy, w, geometry, input_hw),
    xla=lambda dy, w, *, geometry, input_hw, deterministic, routed: routing.xla_bwd_data(dy, w, geometry, input_hw),
    problem=lambda dy, w, *, geometry, input_hw, **_: (
        "dx", jax.ShapeDtypeStruct((dy.shape[0], *input_hw, dy.shape[3]), dy.dtype), w.shape[:2], geometry))
dwconv_bwd_filter_p = _primitive(
    "flashdwc_dwconv_bwd_filter", _bwd_filter_abstract,
    lambda x, dy, *, geometry, kernel_hw, deterministic, routed: _partitioning.bwd_filter(
        x, dy, geometry, kernel_hw, deterministic),
    xla=lambda x, dy, *, geometry, kernel_hw, deterministic, routed: routing.xla_bwd_filter(x, dy, geometry, kernel_hw),
    problem=lambda x, dy, *, geometry, kernel_hw, **_: ("dw", x, kernel_hw, geometry))
dwconv_fwd_fused_p = _primitive(
    "flashdwc_dwconv_fwd_fused", _fwd_fused_abstract,
    lambda x, w, bias, scale, shift, *, geometry, activation, prologue, input_activation: _partitioning.fwd_fused(
        x, w, bias, scale, shift, geometry, activation, prologue, input_activation))


def dwconv_fwd(x, w, geometry: ConvGeometry, deterministic: bool = False, routed: bool = False):
  """y = conv(x, w): (N, H, W, C), (KH, KW, 1, C) -> (N, Ho, Wo, C).

  deterministic: whether the filter gradients that differentiation derives from
  this call sum their partials in a fixed order (bit-identical across runs).
  routed: whether this pass, and the passes differentiation derives from it, may
  run XLA's conv where routing.py's measured rule says it is faster.
  """
  return dwconv_fwd_p.bind(x, w, geometry=geometry, deterministic=bool(deterministic), routed=bool(routed))


def dwconv_bwd_data(dy, w, geometry: ConvGeometry, input_hw, deterministic: bool = False, routed: bool = False):
  """dx from dy: (N, Ho, Wo, C), (KH, KW, 1, C) -> (N, H, W, C), (H, W) = input_hw."""
  return dwconv_bwd_data_p.bind(dy, w, geometry=geometry, input_hw=tuple(input_hw),
                                deterministic=bool(deterministic), routed=bool(routed))


def dwconv_bwd_filter(x, dy, geometry: ConvGeometry, kernel_hw, deterministic: bool = False,
                      routed: bool = False):
  """dw from x and dy: (N, H, W, C), (N, Ho, Wo, C) -> (KH, KW, 1, C), (KH, KW) = kernel_hw.

  deterministic: sum the partial results in a fixed order (bit-identical across
  runs) instead of merging them with atomic adds on the GPU.

  A dilated stride-1 problem (whose forward and input gradient read the residue
  classes in place, _dilation.in_place) rearranges x and dy into sub-grids here and
  runs the undilated filter gradient: 5.8-127x XLA's on the registry's dilated layers
  (H100, bf16) against 1.5-2.3x for the direct kernel (docs/design-notes.md, dilation).
  """
  if _dilation.applies(geometry, prologue=False):
    x_sub, valid = _dilation.to_subgrids(x, geometry)
    dy_sub = _dilation.to_subgrid_outputs(dy, geometry, _shape_of(x)[1:3], kernel_hw)
    return dwconv_bwd_filter_p.bind(x_sub, dy_sub, geometry=valid, kernel_hw=tuple(kernel_hw),
                                    deterministic=bool(deterministic), routed=False)
  return dwconv_bwd_filter_p.bind(x, dy, geometry=geometry, kernel_hw=tuple(kernel_hw),
                                  deterministic=bool(deterministic), routed=bool(routed))


def dwconv_fwd_fused(x, w, bias, scale, shift, geometry: ConvGeometry, activation: str | None,
                     prologue: bool = False, input_activation: str | None = None):
  """activation(conv(x', w) + bias), x' = input_activation(x * scale + shift) per channel
  when `prologue` (else x' = x), all in one kernel: the prologue as x is read, the
  bias (C,) and activation as y is stored. scale and shift are (C,) float32."""
  return dwconv_fwd_fused_p.bind(x, w, bias, scale, shift, geometry=geometry, activation=activation,
                                 prologue=bool(prologue), input_activation=input_activation)


# Differentiation: the transposes of each bilinear primitive in each operand.


def _shape_of(a):
  """The shape of an operand, defined or the undefined one being transposed for."""
  aval = getattr(a, "aval", None)
  return aval.shape if aval is not None else jnp.shape(a)


def _fwd_transpose_x(ct, x, w, *, geometry, deterministic, routed):
  return dwconv_bwd_data(ct, w, geometry, _shape_of(x)[1:3], deterministic, routed)


def _fwd_transpose_w(ct, x, w, *, geometry, deterministic, routed):
  return dwconv_bwd_filter(x, ct, geometry, _shape_of(w)[:2], deterministic, routed)


def _bwd_data_transpose_dy(ct, dy, w, *, geometry, input_hw, deterministic, routed):
  return dwconv_fwd(ct, w, geometry, deterministic, routed)


def _bwd_data_transpose_w(ct, dy, w, *, geometry, input_hw, deterministic, routed):
  return dwconv_bwd_filter(ct, dy, geometry, _shape_of(w)[:2], deterministic, routed)


def _bwd_filter_transpose_x(ct, x, dy, *, geometry, kernel_hw, deterministic, routed):
  return dwconv_bwd_data(dy, ct, geometry, _shape_of(x)[1:3], deterministic, routed)


def _bwd_filter_transpose_dy(ct, x, dy, *, geometry, kernel_hw, deterministic, routed):
  return dwconv_fwd(x, ct, geometry, deterministic, routed)


ad.defbilinear(dwconv_fwd_p, _fwd_transpose_x, _fwd_transpose_w)
ad.defbilinear(dwconv_bwd_data_p, _bwd_data_transpose_dy, _bwd_data_transpose_w)
ad.defbilinear(dwconv_bwd_filter_p, _bwd_filter_transpose_x, _bwd_filter_transpose_dy)


# Batching.

# What a batching rule is given for an operand vmap does not map.
_NOT_MAPPED = getattr(batching, "not_mapped", None)


def _to_channels(a, bdim, size):
  """(..., C) with the vmapped axis at `bdim` (or none) -> (..., size * C), batch-major."""
  if bdim is _NOT_MAPPED:
    a = jnp.broadcast_to(a[..., None, :], (*a.shape[:-1], size, a.shape[-1]))
  else:
    a = jnp.moveaxis(a, bdim, a.ndim - 2)
  return a.reshape(*a.shape[:-2], size * a.shape[-1])


def _from_channels(out, size):
  """(..., size * C) -> (size, ..., C): the vmapped axis back in front."""
  out = out.reshape(*out.shape[:-1], size, out.shape[-1] // size)
  return jnp.moveaxis(out, out.ndim - 2, 0)


def _unbatched_shape(a, bdim):
  return a.shape if bdim is _NOT_MAPPED else (*a.shape[:bdim], *a.shape[bdim + 1:])


def _batch_size(args, dims):
  return next(a.shape[d] for a, d in zip(args, dims) if d is not _NOT_MAPPED)


def _empty_batch(prim, args, dims, params):
  """The result of a vmap over zero elements: (0, *unbatched result shape)."""
  specs = [jax.ShapeDtypeStruct(_unbatched_shape(a, d), a.dtype) for a, d in zip(args, dims)]
  out = jax.eval_shape(lambda *ops: prim.bind(*ops, **params), *specs)
  return jnp.zeros((0, *out.shape), out.dtype), 0


def _image_filter_batch(prim):
  """Batching of the (image, filter) -> image passes: fwd (x, w) and bwd_data (dy, w)."""

  def rule(args, dims, **params):
    (image, w), (image_dim, w_dim) = args, dims
    size = _batch_size(args, dims)
    if size == 0:
      return _empty_batch(prim, args, dims, params)
    if w_dim is _NOT_MAPPED:
      image = jnp.moveaxis(image, image_dim, 0)
      out = prim.bind(image.reshape(size * image.shape[1], *image.shape[2:]), w, **params)
      return out.reshape(size, image.shape[1], *out.shape[1:]), 0
    out = prim.bind(_to_channels(image, image_dim, size), _to_channels(w, w_dim, size), **params)
    return _from_channels(out, size), 0

  return rule


def _bwd_filter_batch(args, dims, **params):
  # Each vmapped pair has its own filter gradient: always fold into channels.
  size = _batch_size(args, dims)
  if size == 0:
    return _empty_batch(dwconv_bwd_filter_p, args, dims, params)
  (x, dy), (x_dim, dy_dim) = args, dims
  out = dwconv_bwd_filter_p.bind(_to_channels(x, x_dim, size), _to_channels(dy, dy_dim, size), **params)
  return _from_channels(out, size), 0


def _fwd_fused_batch(args, dims, **params):
  size = _batch_size(args, dims)
  if size == 0:
    return _empty_batch(dwconv_fwd_fused_p, args, dims, params)
  (x, *per_channel), (x_dim, *per_channel_dims) = args, dims
  if all(d is _NOT_MAPPED for d in per_channel_dims):
    x = jnp.moveaxis(x, x_dim, 0)
    out = dwconv_fwd_fused_p.bind(x.reshape(size * x.shape[1], *x.shape[2:]), *per_channel, **params)
    return out.reshape(size, x.shape[1], *out.shape[1:]), 0
  folded = [_to_channels(a, d, size) for a, d in zip(per_channel, per_channel_dims)]
  out = dwconv_fwd_fused_p.bind(_to_channels(x, x_dim, size), *folded, **params)
  return _from_channels(out, size), 0


batching.primitive_batchers[dwconv_fwd_p] = _image_filter_batch(dwconv_fwd_p)
batching.primitive_batchers[dwconv_bwd_data_p] = _image_filter_batch(dwconv_bwd_data_p)
batching.primitive_batchers[dwconv_bwd_filter_p] = _bwd_filter_batch
batching.primitive_batchers[dwconv_fwd_fused_p] = _fwd_fused_batch
