"""How the 1-D custom calls split across devices.

`flashdwc_conv1d_fwd` and `flashdwc_conv1d_bwd` are wrapped in
`jax.experimental.custom_partitioning`, so that XLA's partitioner runs them on
per-device shards of x (N, L, C) instead of gathering their operands:

- batch N and channels C shard with no communication: each device convolves its
  own sequences and channels. segment_ids (N, L) and initial_state (N, S, C) shard
  like x on N (and the state on C); the kernel (K, 1, C) and bias (C,) shard on C.
- in the backward pass N is a reduction for the filter and bias gradients: each
  device sums the float32 partials of its own sequences, and those sums are
  all-reduced (psum) over the batch axes in float32, before the one rounding to the
  parameters' dtype. dx and d initial_state stay sharded like x and the state.
- the sequence axis L is gathered: a sharding of L is replaced by a replicated L
  before the call (correct, not fast). Unlike the 2-D passes' H and W there is no
  halo exchange along L; a sequence-parallel model shards N and C, or exchanges
  the d * (K - 1) positions itself (initial_state is that halo) inside shard_map.

Inside `shard_map` (every axis manual) and on one device the wrapper lowers
straight to the custom call.
"""

from __future__ import annotations

import jax
from jax._src.lib.mlir import ir
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec as P

from ._partitioning import _axes, _decoded, _entry, _spec_of


def _plan_axes(specs):
  """Mesh axes of N and C from (spec, batch dim, channel dim) triples, first one that
  shards a dimension wins; C never reuses an axis of N."""
  batch, channels = (), ()
  for spec, n_dim, c_dim in specs:
    if not batch and n_dim is not None:
      batch = _axes(spec, n_dim)
    if not channels and c_dim is not None:
      channels = _axes(spec, c_dim)
  if set(channels) & set(batch):
    channels = ()
  return batch, channels


def _operand_axes(arg_shapes):
  """(spec, N dim, C dim) of each operand x, w, b, seg, state[, dy] that is not empty."""
  x, w, b, seg, state, *dy = arg_shapes
  out = [(_spec_of(x), 0, 2)]
  out += [(_spec_of(a), 0, 2) for a in dy]
  out.append((_spec_of(w), None, 2))
  if b.shape[0]:
    out.append((_spec_of(b), None, 0))
  if seg.shape[0]:
    out.append((_spec_of(seg), 0, None))
  if state.shape[1]:
    out.append((_spec_of(state), 0, 2))
  return out


def _shardings(mesh, arg_shapes):
  """The operand shardings each shard runs under, and the axes of N and of C."""
  batch, channels = _plan_axes(_operand_axes(arg_shapes))
  n, c = _entry(batch), _entry(channels)
  x, w, b, seg, state, *dy = arg_shapes
  image = NamedSharding(mesh, P(n, None, c))
  operands = [image, NamedSharding(mesh, P(None, None, c)),
              NamedSharding(mesh, P(c) if b.shape[0] else P()),
              NamedSharding(mesh, P(n, None) if seg.shape[0] else P()),
              image] + [image] * len(dy)
  return operands, batch, channels


def _fwd_results(mesh, arg_shapes):
  operands, _, _ = _shardings(mesh, arg_shapes)
  return operands[0]


def _bwd_results(mesh, arg_shapes):
  operands, _, channels = _shardings(mesh, arg_shapes)
  image, w = operands[0], operands[1]
  return image, image, w, NamedSharding(mesh, P(_entry(channels)))


# The Shardy rules: L, K and the state's length never shard (need replication);
# an absent operand (size 0) gets a factor of its own.


def _operand_rule(arg_types):
  dims = [tuple(ir.RankedTensorType(t).shape) for t in arg_types]
  bias = "c" if dims[2][0] else "nobias"
  seg = "n l" if dims[3][0] else "noseg"
  return ["n l c", "k one c", bias, seg, "n s c"], ["l", "k", "one", "s", "nobias", "noseg"]


def _fwd_rule(*args):
  *_static, _mesh, arg_types, _result_types = args
  operands, replicated = _operand_rule(arg_types)
  return f"{', '.join(operands)} -> n l c", dict(need_replication_factors=_ordered(replicated, operands))


def _bwd_rule(*args):
  *_static, _mesh, arg_types, _result_types = args
  operands, replicated = _operand_rule(arg_types)
  operands.append("n l c")
  return (f"{', '.join(operands)} -> n l c, n s c, k one c, c",
          dict(need_replication_factors=_ordered(replicated, operands)))


def _ordered(factors, operands):
  """The factors that occur in the rule, in the order they first appear (as Shardy wants)."""
  order = list(dict.fromkeys(" ".join(operands).split()))
  return tuple(sorted((f for f in factors if f in order), key=order.index))


def _step_shardings(mesh, arg_shapes):
  """Operand and result shardings of the decoding step: x_t (N, C), state (N, S, C),
  w (K, 1, C), bias (C,) or (0,); N and C shard, S and K never."""
  x, state, w, b = arg_shapes
  specs = [(_spec_of(x), 0, 1), (_spec_of(state), 0, 2), (_spec_of(w), None, 2)]
  if b.shape[0]:
    specs.append((_spec_of(b), None, 0))
  batch, channels = _plan_axes(specs)
  n, c = _entry(batch), _entry(channels)
  step, state_sharding = NamedSharding(mesh, P(n, c)), NamedSharding(mesh, P(n, None, c))
  operands = (step, state_sharding, NamedSharding(mesh, P(None, None, c)),
              NamedSharding(mesh, P(c) if b.shape[0] else P()))
  return operands, (step, state_sharding)


def _step_rule(*args):
  *_static, _mesh, arg_types, _result_types = args
  bias = "c" if tuple(ir.RankedTensorType(arg_types[3]).shape)[0] else "nobias"
  operands = ["n c", "n s c", "k one c", bias]
  return (f"{', '.join(operands)} -> n c, n s c",
          dict(need_replication_factors=_ordered(["s", "k", "one", "nobias"], operands)))


def partitioned_step(call):
  """`call(x_t, state, w, b, activation) -> (y, new_state)`, the decoding step, as a
  partitioned function: each device steps its own sequences and channels."""
  fn = custom_partitioning(call, static_argnums=(4,))

  def infer(*args):
    *_static, mesh, arg_shapes, _result_shape = args
    return _step_shardings(mesh, _decoded(mesh, arg_shapes))[1]

  def partition(*args):
    *static, mesh, arg_shapes, _result_shape = args
    operands, results = _step_shardings(mesh, _decoded(mesh, arg_shapes))
    return mesh, lambda *ops: call(*ops, *static), results, operands

  fn.def_partition(partition=partition, infer_sharding_from_operands=infer, propagate_user_sharding=None,
                   decode_shardings=False, sharding_rule=_step_rule)
  return fn


def partitioned_fwd(call):
  """`call(x, w, b, seg, state, pad_lo, dilation, activation) -> y` as a partitioned function."""
  fn = custom_partitioning(call, static_argnums=(5, 6, 7))

  def infer(*args):
    *_static, mesh, arg_shapes, _result_shape = args
    return _fwd_results(mesh, _decoded(mesh, arg_shapes))

  def partition(*args):
    *static, mesh, arg_shapes, _result_shape = args
    arg_shapes = _decoded(mesh, arg_shapes)
    operands, _, _ = _shardings(mesh, arg_shapes)
    return mesh, lambda *ops: call(*ops, *static), operands[0], tuple(operands)

  fn.def_partition(partition=partition, infer_sharding_from_operands=infer, propagate_user_sharding=None,
                   decode_shardings=False, sharding_rule=_fwd_rule)
  return fn


def partitioned_bwd(call):
  """`call(x, w, b, seg, state, dy, pad_lo, dilation, activation, chunk, filter_grad) ->
  (dx, dstate, dw, db)`, dw (K, 1, C) and db (C,) in float32, as a partitioned function
  whose filter and bias gradients are summed over the batch shards."""
  fn = custom_partitioning(call, static_argnums=(6, 7, 8, 9, 10))

  def infer(*args):
    *_static, mesh, arg_shapes, _result_shape = args
    return _bwd_results(mesh, _decoded(mesh, arg_shapes))

  def partition(*args):
    *static, mesh, arg_shapes, _result_shape = args
    arg_shapes = _decoded(mesh, arg_shapes)
    operands, batch, _ = _shardings(mesh, arg_shapes)

    def lower(*ops):
      dx, dstate, dw, db = call(*ops, *static)
      if batch:
        # Each shard holds the float32 sums of its own sequences only.
        dw, db = jax.lax.psum((dw, db), batch)
      return dx, dstate, dw, db

    return mesh, lower, _bwd_results(mesh, arg_shapes), tuple(operands)

  fn.def_partition(partition=partition, infer_sharding_from_operands=infer, propagate_user_sharding=None,
                   decode_shardings=False, sharding_rule=_bwd_rule)
  return fn
