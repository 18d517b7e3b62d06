"""The 1-D convolution's kernels as JAX primitives, with their differentiation.

- conv1d_fwd_p(x, w, b, seg, state) -> y = act(conv(x, w) + b), segments masked,
  the state in place of the causal zero padding: one custom call.
- conv1d_tangent_p(x, w, b, seg, state, tx, tw, tb, tstate) -> ty, the tangent of
  conv1d_fwd_p, linear in (tx, tw, tb, tstate). Evaluated (forward mode) as
  act'(z) * (conv(tx, w; tstate) + conv(x, tw) + tb) on the forward kernel; its
  transpose (reverse mode) is conv1d_bwd_p on the cotangent.
- conv1d_bwd_p(x, w, b, seg, state, dy) -> (dx, dstate, dw, db): one custom call
  that recomputes z from x, forms dz = dy * act'(z) in registers, and writes dx,
  dstate and per-block partial filter and bias gradients in float32, which are
  then summed in a fixed order (an XLA reduction over the blocks), per shard and
  then, in float32, across the batch shards. With filter_grad=False (the transpose
  asks for neither the filter's nor the bias's cotangent) the call writes no
  partials, and dw and db are zeros that nothing reads.

So jax.grad runs the forward kernel once and the backward kernel once, and the
pre-activation z is never stored. Higher derivatives of conv1d_tangent_p and
conv1d_bwd_p (grad of grad) differentiate the jnp implementation in _conv1d_xla.py:
correct, not fast. vmap folds the vmapped axis into N where the filters and biases
are shared (forward and tangent) or into C where the segment ids are shared
(tangent and backward); otherwise it vmaps the jnp implementation.

Sharding: the custom calls lower through _conv1d_partitioning.py (N and C shard
with no communication, L is gathered).

Operands that a problem lacks are empty: bias (0,), seg (0,), state (N, 0, C).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from . import _activations, _conv1d_partitioning, _conv1d_xla, _ffi, ops
from ._conv1d_args import Conv1DSpec

# The primitives lower through custom_partitioning, which needs the device
# assignment at lowering time; JAX hands it only to jaxprs holding a primitive of
# this registry (see ops.py).
from jax._src.dispatch import prim_requires_devices_during_lowering

try:
  from jax.interpreters.xla import apply_primitive
except ImportError:  # Newer jax keeps it in dispatch only.
  from jax._src.dispatch import apply_primitive

# Positions per block of the backward kernels (CPU and CUDA): the filter-gradient
# partials are (N * ceil(L / CHUNK), K, C) float32, CHUNK / (K * 4 bytes / itemsize)
# times smaller than x; at 128 and bf16 K = 4 they are 1/16 of x's bytes, and the
# K - 1 halo each block rereads is 2% of its input.
BWD_CHUNK = 128
_NOT_MAPPED = getattr(batching, "not_mapped", None)


def _spec(x, w, pad_lo, dilation):
  k = w.shape[0]
  return Conv1DSpec(kernel_size=k, stride=1, dilation=dilation, padding=(pad_lo, dilation * (k - 1) - pad_lo))


def _optional(b, state):
  return (None if b.shape[0] == 0 else b), (None if state.shape[1] == 0 else state)


def _reference_fwd(x, w, b, seg, state, *, pad_lo, dilation, activation):
  """conv1d_fwd_p in jnp."""
  b, state = _optional(b, state)
  return _conv1d_xla.conv1d(x, w, _spec(x, w, pad_lo, dilation), b, activation,
                            None if seg.shape[0] == 0 else seg, state)


# --- the custom calls --------------------------------------------------------


def _missing_cuda_lowering(ctx, *operands, **params):
  raise NotImplementedError("jax_flashdwc was built without its CUDA kernels, so depthwise_conv1d cannot run "
                            "them on a GPU: reinstall it where nvcc is on PATH, or pass implementation='xla'.")


def _call_primitive(name, abstract, attributes, **lowering_args):
  prim = Primitive(name + "_call")
  prim.multiple_results = True
  prim.def_impl(partial(apply_primitive, prim))
  prim.def_abstract_eval(abstract)
  lower = jax.ffi.ffi_lowering(name, **lowering_args)

  def rule(ctx, *operands, **params):
    return lower(ctx, *operands, **attributes(**params))

  mlir.register_lowering(prim, rule, platform="cpu")
  mlir.register_lowering(prim, rule if _ffi.cuda_available() else _missing_cuda_lowering, platform="cuda")
  return prim


def _i64(v):
  return np.int64(v)


_fwd_call_p = _call_primitive(
    "flashdwc_conv1d_fwd",
    lambda x, w, b, seg, state, **_: [ShapedArray(x.shape, x.dtype)],
    lambda pad_lo, dilation, activation: dict(pad_lo=_i64(pad_lo), dilation=_i64(dilation),
                                              activation=_i64(_activations.code(activation))))


def _bwd_call_abstract(x, w, b, seg, state, dy, *, pad_lo, dilation, activation, chunk, filter_grad):
  n, length, c = x.shape
  # Empty partial buffers tell the kernels to skip the filter and bias sums.
  parts = n * -(-length // chunk) if filter_grad else 0
  return [ShapedArray(x.shape, x.dtype), ShapedArray(state.shape, state.dtype),
          ShapedArray((parts, w.shape[0], c), jnp.float32), ShapedArray((parts, c), jnp.float32)]


_bwd_call_p = _call_primitive(
    "flashdwc_conv1d_bwd", _bwd_call_abstract,
    lambda pad_lo, dilation, activation, chunk, filter_grad: dict(
        pad_lo=_i64(pad_lo), dilation=_i64(dilation), activation=_i64(_activations.code(activation)),
        chunk=_i64(chunk)))


def _step_abstract(x, state, w, b, **_):
  return [ShapedArray(x.shape, x.dtype), ShapedArray(state.shape, state.dtype)]


# The decoding step: (y, new_state) from x_t (N, C), state (N, K - 1, C), w, b; the new
# state is written over the state's buffer (operand 1 aliases result 1), so under
# jit with the state donated no copy of it is made.
_step_call_p = _call_primitive(
    "flashdwc_conv1d_step", _step_abstract,
    lambda activation: dict(activation=_i64(_activations.code(activation))),
    operand_output_aliases={1: 1})


# The custom calls with their sharding rules (_conv1d_partitioning.py): the backward
# one sums its float32 filter and bias partials per shard, then across shards.
_fwd_partitioned = _conv1d_partitioning.partitioned_fwd(
    lambda x, w, b, seg, state, pad_lo, dilation, activation: _fwd_call_p.bind(
        x, w, b, seg, state, pad_lo=pad_lo, dilation=dilation, activation=activation)[0])


def _bwd_sums(x, w, b, seg, state, dy, pad_lo, dilation, activation, chunk, filter_grad):
  dx, dstate, dw_part, db_part = _bwd_call_p.bind(x, w, b, seg, state, dy, pad_lo=pad_lo, dilation=dilation,
                                                  activation=activation, chunk=chunk, filter_grad=filter_grad)
  # Sums over no partials (filter_grad False) are zeros.
  return dx, dstate, jnp.sum(dw_part, axis=0)[:, None, :], jnp.sum(db_part, axis=0)


_bwd_partitioned = _conv1d_partitioning.partitioned_bwd(_bwd_sums)

_step_partitioned = _conv1d_partitioning.partitioned_step(
    lambda x, state, w, b, activation: tuple(_step_call_p.bind(x, state, w, b, activation=activation)))


# --- the public primitives ---------------------------------------------------


def _primitive(name, abstract, impl, multiple_results=False):
  prim = Primitive(name)
  prim.multiple_results = multiple_results
  prim.def_impl(partial(apply_primitive, prim))
  prim.def_abstract_eval(abstract)
  mlir.register_lowering(prim, mlir.lower_fun(impl, multiple_results=multiple_results))
  prim_requires_devices_during_lowering.add(prim)
  return prim


def _fwd_impl(x, w, b, seg, state, *, pad_lo, dilation, activation):
  return _fwd_partitioned(x, w, b, seg, state, pad_lo, dilation, activation)


conv1d_fwd_p = _primitive("flashdwc_conv1d_fwd", lambda x, *_, **__: ShapedArray(x.shape, x.dtype), _fwd_impl)


def _bwd_impl(x, w, b, seg, state, dy, *, pad_lo, dilation, activation, filter_grad):
  dx, dstate, dw, db = _bwd_partitioned(x, w, b, seg, state, dy, pad_lo, dilation, activation, BWD_CHUNK,
                                        filter_grad)
  db = db.astype(b.dtype) if b.shape[0] else jnp.zeros(b.shape, b.dtype)
  return [dx, dstate, dw.astype(w.dtype), db]


conv1d_bwd_p = _primitive(
    "flashdwc_conv1d_bwd",
    lambda x, w, b, seg, state, dy, **_: [ShapedArray(x.shape, x.dtype), ShapedArray(state.shape, state.dtype),
                                          ShapedArray(w.shape, w.dtype), ShapedArray(b.shape, b.dtype)],
    _bwd_impl, multiple_results=True)


def _tangent_impl(x, w, b, seg, state, tx, tw, tb, tstate, *, pad_lo, dilation, activation):
  params = dict(pad_lo=pad_lo, dilation=dilation, activation=None)
  no_bias = jnp.zeros((0,), x.dtype)
  tz = (conv1d_fwd_p.bind(tx, w, no_bias, seg, tstate, **params).astype(jnp.float32)
        + conv1d_fwd_p.bind(x, tw, no_bias, seg, state, **params).astype(jnp.float32))
  if b.shape[0]:
    tz = tz + tb.astype(jnp.float32)
  if activation is not None:
    z = conv1d_fwd_p.bind(x, w, b, seg, state, **params).astype(jnp.float32)
    tz = jax.jvp(partial(_activations.apply, activation), (z,), (tz,))[1]
  return tz.astype(x.dtype)


conv1d_tangent_p = _primitive("flashdwc_conv1d_tangent", lambda x, *_, **__: ShapedArray(x.shape, x.dtype),
                              _tangent_impl)


def _step_impl(x, state, w, b, *, activation):
  return list(_step_partitioned(x, state, w, b, activation))


conv1d_step_p = _primitive("flashdwc_conv1d_step", _step_abstract, _step_impl, multiple_results=True)


def conv1d_fwd(x, w, b, seg, state, *, pad_lo, dilation, activation):
  return conv1d_fwd_p.bind(x, w, b, seg, state, pad_lo=pad_lo, dilation=dilation, activation=activation)


# --- differentiation ---------------------------------------------------------


def _instantiate(t, like):
  return jnp.zeros(like.shape, like.dtype) if type(t) is ad.Zero else t


def _fwd_jvp(primals, tangents, **params):
  x, w, b, seg, state = primals
  tx, tw, tb, _, tstate = tangents
  y = conv1d_fwd_p.bind(*primals, **params)
  if all(type(t) is ad.Zero for t in (tx, tw, tb, tstate)):
    return y, ad.Zero.from_primal_value(y)
  ty = conv1d_tangent_p.bind(x, w, b, seg, state, _instantiate(tx, x), _instantiate(tw, w), _instantiate(tb, b),
                             _instantiate(tstate, state), **params)
  return y, ty


ad.primitive_jvps[conv1d_fwd_p] = _fwd_jvp


def _tangent_transpose(ct, x, w, b, seg, state, tx, tw, tb, tstate, **params):
  undefined = [ad.is_undefined_primal(t) for t in (tx, tw, tb, tstate)]
  if type(ct) is ad.Zero:
    return [None] * 5 + [ad.Zero(t.aval) if u else None for t, u in zip((tx, tw, tb, tstate), undefined)]
  filter_grad = undefined[1] or undefined[2]
  dx, dstate, dw, db = conv1d_bwd_p.bind(x, w, b, seg, state, ct, filter_grad=filter_grad, **params)
  return [None] * 5 + [g if u else None for g, u in zip((dx, dw, db, dstate), undefined)]


ad.primitive_transposes[conv1d_tangent_p] = _tangent_transpose


def _reference_tangent(x, w, b, seg, state, tx, tw, tb, tstate, **params):
  f = lambda x, w, b, state: _reference_fwd(x, w, b, seg, state, **params)
  return jax.jvp(f, (x, w, b, state), (tx, tw, tb, tstate))[1]


def _reference_bwd(x, w, b, seg, state, dy, filter_grad=True, **params):
  f = lambda x, w, b, state: _reference_fwd(x, w, b, seg, state, **params)
  dx, dw, db, dstate = jax.vjp(f, x, w, b, state)[1](dy)
  if not filter_grad:  # as the kernels: zeros where the filter and bias sums were not asked for
    dw, db = jnp.zeros_like(dw), jnp.zeros_like(db)
  return [dx, dstate, dw, db]


def _jvp_by_reference(prim, reference, seg_index):
  """A JVP rule from the jnp implementation (the segment ids, an integer operand,
  are closed over: they have no tangent)."""

  def rule(primals, tangents, **params):
    seg = primals[seg_index]
    rest = [p for i, p in enumerate(primals) if i != seg_index]
    rest_t = [_instantiate(t, p) for i, (t, p) in enumerate(zip(tangents, primals)) if i != seg_index]
    f = lambda *a: reference(*a[:seg_index], seg, *a[seg_index:], **params)
    return jax.jvp(f, rest, rest_t)

  ad.primitive_jvps[prim] = rule


_jvp_by_reference(conv1d_tangent_p, _reference_tangent, 3)
_jvp_by_reference(conv1d_bwd_p, _reference_bwd, 3)


def _reference_step(x, state, w, b, *, activation):
  y, new_state = _conv1d_xla.conv1d_update(x, state, w, b if b.shape[0] else None, activation)
  return [y, new_state]


def _step_jvp(primals, tangents, **params):
  # The step's derivative is the jnp step's (a decoding loop is rarely differentiated;
  # correct, not fast), its value the kernel's.
  out = conv1d_step_p.bind(*primals, **params)
  _, t_out = jax.jvp(lambda *a: _reference_step(*a, **params), tuple(primals),
                     tuple(_instantiate(t, p) for t, p in zip(tangents, primals)))
  return out, t_out


ad.primitive_jvps[conv1d_step_p] = _step_jvp


# --- batching ----------------------------------------------------------------


def _batch_fwd(args, dims, **params):
  x, w, b, seg, state = args
  xd, wd, bd, sd, std = dims
  size = next(a.shape[d] for a, d in zip(args, dims) if d is not _NOT_MAPPED)
  if wd is _NOT_MAPPED and bd is _NOT_MAPPED and size > 0:
    # The vmapped problems share the filter: fold the vmapped axis into N.
    def fold(a, d):
      a = jnp.broadcast_to(a, (size, *a.shape)) if d is _NOT_MAPPED else jnp.moveaxis(a, d, 0)
      return a.reshape(size * a.shape[1], *a.shape[2:])
    absent_seg = sd is _NOT_MAPPED and seg.ndim == 1
    y = conv1d_fwd_p.bind(fold(x, xd), w, b, seg if absent_seg else fold(seg, sd), fold(state, std), **params)
    return y.reshape(size, -1, *y.shape[1:]), 0
  return _batch_by_reference(_reference_fwd, False)(args, dims, **params)


def _batch_by_reference(reference, multiple):
  def rule(args, dims, **params):
    out = jax.vmap(partial(reference, **params), in_axes=dims)(*args)
    return (out, [0] * len(out)) if multiple else (out, 0)
  return rule


def _fold_into_n(a, d, size):
  """(N, ...) with the vmapped axis at `d` (or none) -> (size * N, ...), vmap-major."""
  a = jnp.broadcast_to(a, (size, *a.shape)) if d is _NOT_MAPPED else jnp.moveaxis(a, d, 0)
  return a.reshape(size * a.shape[1], *a.shape[2:])


def _fold_into_c(a, d, size):
  """(..., C) -> (..., size * C), vmap-major; an absent bias, (0,) unbatched, stays (0,)."""
  if a.size == 0 and a.ndim - (d is not _NOT_MAPPED) == 1:
    return jnp.zeros((0,), a.dtype)
  return ops._to_channels(a, d, size)


def _unmapped(dims, *indices):
  return all(dims[i] is _NOT_MAPPED for i in indices)


def _batch_tangent(args, dims, **params):
  """vmap of conv1d_tangent_p on its own kernels: the vmapped axis is folded into N when
  the filters and biases are shared, else into C when the segment ids are shared."""
  size = next(a.shape[d] for a, d in zip(args, dims) if d is not _NOT_MAPPED)
  x, w, b, seg, state, tx, tw, tb, tstate = args
  if size > 0 and _unmapped(dims, 1, 2, 6, 7):
    absent_seg = dims[3] is _NOT_MAPPED and seg.ndim == 1
    images = [_fold_into_n(a, dims[i], size) for i, a in ((0, x), (4, state), (5, tx), (8, tstate))]
    seg = seg if absent_seg else _fold_into_n(seg, dims[3], size)
    out = conv1d_tangent_p.bind(images[0], w, b, seg, images[1], images[2], tw, tb, images[3], **params)
    return out.reshape(size, -1, *out.shape[1:]), 0
  if size > 0 and _unmapped(dims, 3):
    folded = [seg if i == 3 else _fold_into_c(a, d, size) for i, (a, d) in enumerate(zip(args, dims))]
    return ops._from_channels(conv1d_tangent_p.bind(*folded, **params), size), 0
  return _batch_by_reference(_reference_tangent, False)(args, dims, **params)


def _batch_bwd(args, dims, **params):
  """vmap of conv1d_bwd_p on its own kernel where the segment ids are shared: the
  vmapped axis is folded into C, so that each vmapped problem keeps its own filter and
  bias gradient (folding into N would sum them)."""
  size = next(a.shape[d] for a, d in zip(args, dims) if d is not _NOT_MAPPED)
  if size == 0 or not _unmapped(dims, 3):
    return _batch_by_reference(_reference_bwd, True)(args, dims, **params)
  folded = [args[3] if i == 3 else _fold_into_c(a, d, size) for i, (a, d) in enumerate(zip(args, dims))]
  dx, dstate, dw, db = conv1d_bwd_p.bind(*folded, **params)
  db = ops._from_channels(db, size) if db.shape[0] else jnp.zeros((size, 0), db.dtype)
  return [ops._from_channels(a, size) for a in (dx, dstate, dw)] + [db], [0] * 4


def _batch_step(args, dims, **params):
  """vmap of conv1d_step_p: the vmapped axis folded into N where the filter and bias
  are shared, else the jnp step vmapped."""
  size = next(a.shape[d] for a, d in zip(args, dims) if d is not _NOT_MAPPED)
  x, state, w, b = args
  if size > 0 and _unmapped(dims, 2, 3):
    y, new_state = conv1d_step_p.bind(_fold_into_n(x, dims[0], size), _fold_into_n(state, dims[1], size), w, b,
                                      **params)
    return [y.reshape(size, -1, *y.shape[1:]), new_state.reshape(size, -1, *new_state.shape[1:])], [0, 0]
  return _batch_by_reference(_reference_step, True)(args, dims, **params)


batching.primitive_batchers[conv1d_step_p] = _batch_step
batching.primitive_batchers[conv1d_fwd_p] = _batch_fwd
batching.primitive_batchers[conv1d_tangent_p] = _batch_tangent
batching.primitive_batchers[conv1d_bwd_p] = _batch_bwd
