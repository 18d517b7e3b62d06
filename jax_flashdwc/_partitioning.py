"""How the custom calls split across devices.

Each pass is wrapped in `jax.experimental.custom_partitioning`, so that XLA's
partitioner runs it on per-device shards instead of gathering its operands:

- batch N and channels C shard with no communication in the forward and
  backward-data passes (each device convolves its own images and channels);
- in the filter gradient N is a reduction: each device computes the partial
  sum of its images and the partials are all-reduced (in float32);
- H and W must be whole on each device (a convolution window crosses any split),
  so a spatially sharded operand is gathered first. That is correct, not fast.

On one device, and inside `shard_map` (where every axis is manual), the wrapper
lowers straight to the custom call.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec as P

from . import _custom_calls as calls

# Factors that must not be split: every spatial and filter dimension.
_SPATIAL = ("h", "w", "ho", "wo", "kh", "kw")


def _axes(spec, dim):
  """The mesh axes of dimension `dim` in a PartitionSpec, as a tuple."""
  if spec is None or dim >= len(spec) or spec[dim] is None:
    return ()
  entry = spec[dim]
  return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


def _spec_of(shape):
  sharding = getattr(shape, "sharding", None)
  return getattr(sharding, "spec", None)


def _entry(axes):
  return None if not axes else axes[0] if len(axes) == 1 else tuple(axes)


def _batch_and_channel_axes(image_spec, other_spec, other_channel_dim, other_batch_dim=None):
  """Mesh axes for N and C: from the image-like operand, else from the other one."""
  batch = _axes(image_spec, 0) or (_axes(other_spec, other_batch_dim) if other_batch_dim is not None else ())
  channels = _axes(image_spec, 3) or _axes(other_spec, other_channel_dim)
  if set(channels) & set(batch):
    channels = ()
  return batch, channels


def _image_filter_plan(mesh, arg_shapes):
  """Shardings for (image, filter) -> image passes: fwd (x, w) and bwd_data (dy, w)."""
  image_spec, w_spec = _spec_of(arg_shapes[0]), _spec_of(arg_shapes[1])
  batch, channels = _batch_and_channel_axes(image_spec, w_spec, 3)
  image = NamedSharding(mesh, P(_entry(batch), None, None, _entry(channels)))
  w = NamedSharding(mesh, P(None, None, None, _entry(channels)))
  return (image, w), image, ()


def _fused_plan(mesh, arg_shapes):
  """Shardings for the fused forward (x, w, bias, scale, shift) -> y: the per-channel
  operands go with the channels."""
  (image, w), result, reduce_axes = _image_filter_plan(mesh, arg_shapes)
  per_channel = NamedSharding(mesh, P(w.spec[3]))
  return (image, w, per_channel, per_channel, per_channel), result, reduce_axes


def _bwd_filter_plan(mesh, arg_shapes):
  """Shardings for bwd_filter (x, dy) -> dw, and the axes its partials sum over."""
  x_spec, dy_spec = _spec_of(arg_shapes[0]), _spec_of(arg_shapes[1])
  batch, channels = _batch_and_channel_axes(x_spec, dy_spec, 3, other_batch_dim=0)
  image = NamedSharding(mesh, P(_entry(batch), None, None, _entry(channels)))
  dw = NamedSharding(mesh, P(None, None, None, _entry(channels)))
  return (image, image), dw, batch


def _partitioned(body, rule, static_argnums, reduction=(), plan=None):
  """`body(*operands, *static)` as a custom_partitioning function with the Shardy `rule`.

  A pass with a reduction factor (N in the filter gradient) all-reduces its
  per-device partials, in float32.
  """
  fn = custom_partitioning(body, static_argnums=static_argnums)
  plan = plan or (_bwd_filter_plan if reduction else _image_filter_plan)

  def infer(*args):
    *_static, mesh, arg_shapes, _result_shape = args
    return plan(mesh, arg_shapes)[1]

  def partition(*args):
    *static, mesh, arg_shapes, _result_shape = args
    operands, result, reduce_axes = plan(mesh, arg_shapes)

    def lower(*operands):
      out = body(*operands, *static)
      if not reduce_axes:
        return out
      return jax.lax.psum(out.astype(jnp.float32), reduce_axes).astype(out.dtype)

    return mesh, lower, result, operands

  # Shardy wants the special factors in the order they first appear in the rule.
  factors = dict.fromkeys(rule.replace(",", " ").replace("->", " ").split())
  need_replication = tuple(f for f in factors if f in _SPATIAL)
  fn.def_partition(partition=partition, infer_sharding_from_operands=infer,
                   propagate_user_sharding=None, sharding_rule=rule,
                   reduction_factors=reduction, need_replication_factors=need_replication)
  return fn


def _fwd(x, w, geometry):
  return calls.fwd_call_p.bind(x, w, geometry=geometry)


def _fwd_fused(x, w, bias, scale, shift, geometry, activation, prologue, input_activation):
  return calls.fwd_fused_call_p.bind(x, w, bias, scale, shift, geometry=geometry, activation=activation,
                                     prologue=prologue, input_activation=input_activation)


def _bwd_data(dy, w, geometry, input_hw):
  return calls.bwd_data_call_p.bind(dy, w, geometry=geometry, input_hw=input_hw)


def _bwd_filter(x, dy, geometry, kernel_hw, deterministic):
  return calls.bwd_filter_call_p.bind(x, dy, geometry=geometry, kernel_hw=kernel_hw, deterministic=deterministic)


fwd = _partitioned(_fwd, "n h w c, kh kw one c -> n ho wo c", (2,))
fwd_fused = _partitioned(_fwd_fused, "n h w c, kh kw one c, c, c, c -> n ho wo c", (5, 6, 7, 8),
                         plan=_fused_plan)
bwd_data = _partitioned(_bwd_data, "n ho wo c, kh kw one c -> n h w c", (2, 3))
bwd_filter = _partitioned(_bwd_filter, "n h w c, n ho wo c -> kh kw one c", (2, 3, 4), reduction=("n",))
