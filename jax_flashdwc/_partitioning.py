"""How the custom calls split across devices.

Each pass is wrapped in `jax.experimental.custom_partitioning`, so that XLA's
partitioner runs it on per-device shards instead of gathering its operands:

- batch N and channels C shard with no communication in the forward and
  backward-data passes (each device convolves its own images and channels);
- in the filter gradient N is a reduction: each device computes the partial
  sum of its images and the partials are all-reduced (in float32);
- H and W shard with a halo exchange: each device owns a block of output rows
  (columns) and the input rows (columns) under them, receives the few rows its
  windows reach into from the neighbouring shards (`ppermute`), and convolves the
  extended block with no padding on that dimension; the edge shards receive zeros,
  which are the global padding. The input gradient is the transpose: each device
  computes the gradient of its extended block and sends the halo rows' part back
  to the neighbour that owns them, where it is added. The filter gradient runs on
  the extended block and is all-reduced over the spatial axes as over N.

A spatial dimension keeps its sharding only when the input extent is exactly the
stride times the output extent (H = s * Ho: "SAME" padding with H divisible by s,
stride 1 included), the shard count divides Ho, and each halo fits inside one
neighbour's block. Then output row o and input rows [s*o, s*o + s) live on the same
shard, so every shard owns a whole number of output rows and the same program runs
on each. Any other spatial sharding ("VALID" padding, a stride that does not divide
H, more shards than output rows, halos wider than a shard) is gathered first, as
before: correct, not fast.

On one device, and inside `shard_map` (where every axis is manual), the wrapper
lowers straight to the custom call.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from jax._src.lib.mlir import ir
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec as P
from jax._src import sharding_impls

from . import _activations
from . import _custom_calls as calls
from ._geometry import ConvGeometry


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


def _decoded(mesh, shapes):
  """`shapes` with NamedShardings on `mesh`. A sharding that is no PartitionSpec of the
  mesh (Shardy splits a mesh axis into sub-axes when it propagates a sharding through
  a reshape of an indivisible dimension, e.g. the sub-grid layout of a dilated
  convolution) reads as replicated: the partitioner then gathers that operand."""
  out = []
  for shape in shapes:
    sharding = getattr(shape, "sharding", None)
    if not isinstance(sharding, NamedSharding):
      spec = P()
      hlo = getattr(sharding, "_hlo_sharding", None)
      if hlo is not None and not mesh.empty:
        try:
          spec = sharding_impls.parse_flatten_op_sharding(hlo, mesh)[0]
        except ValueError:
          spec = P()
      sharding = NamedSharding(mesh, spec) if not mesh.empty else None
    out.append(jax.ShapeDtypeStruct(shape.shape, shape.dtype, sharding=sharding))
  return out


# Spatial sharding.


@dataclasses.dataclass(frozen=True)
class Halo:
  """One sharded spatial dimension: its mesh axes and shard count, and the rows a
  shard reads beyond its own block of `block` input rows: `before` from the previous
  shard, `after` from the next (negative: the last -after rows of the block are read
  by no output row of this shard and are dropped)."""
  axes: tuple
  shards: int
  block: int
  before: int
  after: int
  # The same axes in the mesh's order, as ppermute wants them, and the (source,
  # target) pairs, in that order's linear index, that send a block to the next shard
  # (`down`) and to the previous one (`up`).
  permute_axes: tuple = ()
  down: tuple = ()
  up: tuple = ()


def _halo_sizes(geometry: ConvGeometry, dim: int, kernel: int) -> tuple[int, int]:
  """(before, after) rows for output rows [i*m, (i+1)*m) over input rows [i*s*m, (i+1)*s*m).

  Output row o reads padded input rows s*o - lo + d*k, k < K, so the block's first
  output row reaches lo rows above the block and its last reaches
  d*(K-1) - lo - (s-1) rows below it."""
  s, d, (lo, _hi) = geometry.strides[dim], geometry.dilation[dim], geometry.padding[dim]
  return lo, d * (kernel - 1) - lo - (s - 1)


def halo_fits(geometry: ConvGeometry, dim: int, in_size: int, out_size: int) -> bool:
  """Whether the sizes allow halo sharding of spatial dimension `dim` at all: the input
  extent is the stride times the output extent, so that shards of whole output rows
  own whole strides of input rows."""
  return out_size > 0 and in_size == geometry.strides[dim] * out_size


def _plan_halo(mesh, axes, geometry, dim, in_size, out_size, kernel) -> Halo | None:
  """The halo plan of dimension `dim` sharded over `axes`, or None where it must be gathered."""
  if not axes or not halo_fits(geometry, dim, in_size, out_size):
    return None
  shards = math.prod(mesh.shape[a] for a in axes)
  if shards == 1 or out_size % shards:
    return None
  block = in_size // shards
  before, after = _halo_sizes(geometry, dim, kernel)
  if before > block or after > block:
    return None
  permute_axes, position = _mesh_order(mesh, tuple(axes))
  down = tuple((position(j), position(j + 1)) for j in range(shards - 1))
  up = tuple((target, source) for source, target in down)
  return Halo(tuple(axes), shards, block, before, after, permute_axes, down, up)


def _mesh_order(mesh, axes):
  """`axes` in the mesh's order, and a function from a shard's position along the
  dimension (its linear index over `axes` in the spec's order, the first major) to its
  linear index over the mesh-ordered axes."""
  ordered = tuple(a for a in mesh.axis_names if a in axes)

  def position(p):
    coords = {}
    for a in reversed(axes):
      p, coords[a] = divmod(p, mesh.shape[a])
    index = 0
    for a in ordered:
      index = index * mesh.shape[a] + coords[a]
    return index

  return ordered, position


def _take(a, dim, start, stop):
  return jax.lax.slice_in_dim(a, start, stop, axis=dim)


def extend(a, dim, halo: Halo | None):
  """The local block of `a` with its halo rows along `dim`: the last `before` rows of the
  previous shard on top, the first `after` rows of the next below (zeros at the edges)."""
  if halo is None:
    return a
  size = a.shape[dim]
  parts = []
  if halo.before > 0:
    parts.append(jax.lax.ppermute(_take(a, dim, size - halo.before, size), halo.permute_axes, halo.down))
  parts.append(a if halo.after >= 0 else _take(a, dim, 0, size + halo.after))
  if halo.after > 0:
    parts.append(jax.lax.ppermute(_take(a, dim, 0, halo.after), halo.permute_axes, halo.up))
  return jnp.concatenate(parts, axis=dim) if len(parts) > 1 else parts[0]


def fold(g, dim, halo: Halo | None):
  """The transpose of `extend`: the gradient of the extended block back to the local
  block, each halo's part sent to the shard that owns those rows and added there."""
  if halo is None:
    return g
  kept = halo.block + min(halo.after, 0)
  local = _take(g, dim, halo.before, halo.before + kept)
  if halo.after < 0:
    pad = [(0, 0)] * g.ndim
    pad[dim] = (0, -halo.after)
    local = jnp.pad(local, pad)
  if halo.before > 0:
    # Rows above this block belong to the previous shard's last `before` rows.
    from_next = jax.lax.ppermute(_take(g, dim, 0, halo.before), halo.permute_axes, halo.up)
    pad = [(0, 0)] * g.ndim
    pad[dim] = (halo.block - halo.before, 0)
    local = local + jnp.pad(from_next, pad)
  if halo.after > 0:
    # Rows below this block belong to the next shard's first `after` rows.
    end = halo.before + halo.block
    from_previous = jax.lax.ppermute(_take(g, dim, end, end + halo.after), halo.permute_axes, halo.down)
    pad = [(0, 0)] * g.ndim
    pad[dim] = (0, halo.block - halo.after)
    local = local + jnp.pad(from_previous, pad)
  return local


def _local_geometry(geometry: ConvGeometry, halos) -> ConvGeometry:
  """The geometry each shard runs: no padding on the dimensions its halos extend."""
  pads = tuple((0, 0) if h is not None else p for p, h in zip(geometry.padding, halos))
  return dataclasses.replace(geometry, padding=pads)


def _extended_hw(block_hw, halos):
  return tuple(b if h is None else h.before + h.block + h.after for b, h in zip(block_hw, halos))


# The shardings of each pass.


@dataclasses.dataclass(frozen=True)
class Plan:
  operands: tuple
  result: NamedSharding
  reduce_axes: tuple
  halos: tuple  # (Halo | None, Halo | None) for H and W


def _spatial_axes(specs, dim, taken):
  """The mesh axes of spatial dimension `dim`: from the first spec that shards it,
  without the axes N or C already use."""
  for spec in specs:
    axes = _axes(spec, dim)
    if axes:
      return () if set(axes) & set(taken) else axes
  return ()


def _halos(mesh, geometry, specs, taken, in_hw, out_hw, kernel_hw):
  halos = []
  for dim in range(2):
    axes = _spatial_axes(specs, dim + 1, taken)
    halo = _plan_halo(mesh, axes, geometry, dim, in_hw[dim], out_hw[dim], kernel_hw[dim])
    taken = taken + (halo.axes if halo else ())
    halos.append(halo)
  return tuple(halos)


def _image_spec(batch, halos, channels):
  return P(_entry(batch), *(_entry(h.axes) if h else None for h in halos), _entry(channels))


def _image_filter_plan(mesh, geometry, arg_shapes, result_shape, transposed):
  """Shardings for (image, filter) -> image passes: fwd (x, w) -> y and, `transposed`,
  bwd_data (dy, w) -> dx."""
  image_spec, w_spec = _spec_of(arg_shapes[0]), _spec_of(arg_shapes[1])
  batch, channels = _batch_and_channel_axes(image_spec, w_spec, 3)
  image_hw, result_hw = arg_shapes[0].shape[1:3], result_shape.shape[1:3]
  in_hw, out_hw = (result_hw, image_hw) if transposed else (image_hw, result_hw)
  halos = _halos(mesh, geometry, (image_spec, _spec_of(result_shape)), batch + channels, in_hw, out_hw,
                 arg_shapes[1].shape[:2])
  image = NamedSharding(mesh, _image_spec(batch, halos, channels))
  w = NamedSharding(mesh, P(None, None, None, _entry(channels)))
  return Plan((image, w), image, (), halos)


def _fused_plan(mesh, geometry, arg_shapes, result_shape):
  """Shardings for the fused forward (x, w, bias, scale, shift) -> y: the per-channel
  operands go with the channels."""
  plan = _image_filter_plan(mesh, geometry, arg_shapes, result_shape, False)
  image, w = plan.operands
  per_channel = NamedSharding(mesh, P(w.spec[3]))
  return dataclasses.replace(plan, operands=(image, w, per_channel, per_channel, per_channel))


def _bwd_filter_plan(mesh, geometry, arg_shapes, result_shape):
  """Shardings for bwd_filter (x, dy) -> dw, and the axes its partials sum over."""
  x_spec, dy_spec = _spec_of(arg_shapes[0]), _spec_of(arg_shapes[1])
  batch, channels = _batch_and_channel_axes(x_spec, dy_spec, 3, other_batch_dim=0)
  halos = _halos(mesh, geometry, (x_spec, dy_spec), batch + channels, arg_shapes[0].shape[1:3],
                 arg_shapes[1].shape[1:3], result_shape.shape[:2])
  image = NamedSharding(mesh, _image_spec(batch, halos, channels))
  dw = NamedSharding(mesh, P(None, None, None, _entry(channels)))
  reduce_axes = batch + tuple(a for h in halos if h for a in h.axes)
  return Plan((image, image), dw, reduce_axes, halos)


# The per-shard bodies. Each takes the plan's halos (None for an unsharded dimension)
# and the static parameters of its pass.


def _extend_hw(a, halos):
  return extend(extend(a, 1, halos[0]), 2, halos[1])


def _fold_hw(g, halos):
  # The transpose of _extend_hw: W was extended last, so it is folded first.
  return fold(fold(g, 2, halos[1]), 1, halos[0])


def _fwd(x, w, geometry):
  return calls.fwd_call_p.bind(x, w, geometry=geometry)


def _fwd_local(halos, x, w, geometry):
  return _fwd(_extend_hw(x, halos), w, _local_geometry(geometry, halos))


def _fwd_fused(x, w, bias, scale, shift, geometry, activation, prologue, input_activation):
  return calls.fwd_fused_call_p.bind(x, w, bias, scale, shift, geometry=geometry, activation=activation,
                                     prologue=prologue, input_activation=input_activation)


def _fwd_fused_local(halos, x, w, bias, scale, shift, geometry, activation, prologue, input_activation):
  if prologue and any(halos):
    # The kernel applies the prologue to every row it reads and treats only its own
    # padding as zeros after it, so the zero halo rows of the edge shards would be
    # transformed too. Apply the prologue here, before the exchange, instead.
    x = _activations.apply(input_activation, x.astype(jnp.float32) * scale + shift).astype(x.dtype)
    prologue, input_activation = False, None
  return _fwd_fused(_extend_hw(x, halos), w, bias, scale, shift, _local_geometry(geometry, halos), activation,
                    prologue, input_activation)


def _bwd_data(dy, w, geometry, input_hw):
  return calls.bwd_data_call_p.bind(dy, w, geometry=geometry, input_hw=input_hw)


def _bwd_data_local(halos, dy, w, geometry, input_hw):
  block_hw = tuple(s if h is None else h.block for s, h in zip(input_hw, halos))
  dx = _bwd_data(dy, w, _local_geometry(geometry, halos), _extended_hw(block_hw, halos))
  return _fold_hw(dx, halos)


def _bwd_filter(x, dy, geometry, kernel_hw, deterministic):
  return calls.bwd_filter_call_p.bind(x, dy, geometry=geometry, kernel_hw=kernel_hw, deterministic=deterministic)


def _bwd_filter_local(halos, x, dy, geometry, kernel_hw, deterministic):
  return _bwd_filter(_extend_hw(x, halos), dy, _local_geometry(geometry, halos), kernel_hw, deterministic)


# The Shardy rules.


def _dims(t):
  return tuple(ir.RankedTensorType(t).shape)


def _sharding_rule(image_of, kind):
  """A callable building the Shardy rule from the static arguments and the shapes.

  A spatial dimension whose input extent is s times its output extent is the compound
  factor (o s) on the input side and o on the output side, so that a sharding of one
  propagates to the other (o major: a shard holds whole output rows and the s input
  rows of each); `s` is never sharded. Any other spatial dimension has separate
  factors on the two sides that must stay whole (gathered).
  """

  def rule(*args):
    geometry, *_ = args
    *_static, _mesh, operand_types, result_types = args
    in_hw, out_hw = image_of(operand_types, result_types)
    in_dims, out_dims, factor_sizes, replicated, spatial = [], [], {}, ["kh", "kw", "one"], []
    for dim, (name, stride_name) in enumerate((("ho", "sh"), ("wo", "sw"))):
      stride = geometry.strides[dim]
      if halo_fits(geometry, dim, in_hw[dim], out_hw[dim]):
        spatial.append(name)
        if stride == 1:
          in_dims.append(name)
        else:
          in_dims.append(f"({name} {stride_name})")
          factor_sizes[stride_name] = stride
          replicated.append(stride_name)
      else:
        whole = name[0]
        in_dims.append(whole)
        replicated += [whole, name]
      out_dims.append(name)
    image = f"n {' '.join(in_dims)} c"
    out = f"n {' '.join(out_dims)} c"
    if kind == "fwd":
      text = f"{image}, kh kw one c -> {out}"
    elif kind == "fused":
      text = f"{image}, kh kw one c, c, c, c -> {out}"
    elif kind == "bwd_data":
      text = f"{out}, kh kw one c -> {image}"
    else:
      text = f"{image}, {out} -> kh kw one c"
    extra = dict(factor_sizes)
    # Shardy wants the special factors in the order they first appear in the rule.
    order = list(dict.fromkeys(text.replace("(", " ").replace(")", " ").replace(",", " ")
                               .replace("->", " ").split()))
    extra["need_replication_factors"] = tuple(sorted(set(replicated), key=order.index))
    if kind == "bwd_filter":
      extra["reduction_factors"] = tuple(sorted({"n", *spatial}, key=order.index))
    return text, extra

  return rule


def _fwd_hw(operand_types, result_types):
  return _dims(operand_types[0])[1:3], _dims(result_types[0])[1:3]


def _bwd_data_hw(operand_types, result_types):
  return _dims(result_types[0])[1:3], _dims(operand_types[0])[1:3]


def _bwd_filter_hw(operand_types, result_types):
  return _dims(operand_types[0])[1:3], _dims(operand_types[1])[1:3]


def _partitioned(body, local, kind, static_argnums):
  """`body(*operands, *static)` as a custom_partitioning function; `local(halos,
  *operands, *static)` is what each shard runs under a sharding of the plan."""
  fn = custom_partitioning(body, static_argnums=static_argnums)
  plans = {"fwd": lambda m, g, a, r: _image_filter_plan(m, g, a, r, False),
           "bwd_data": lambda m, g, a, r: _image_filter_plan(m, g, a, r, True),
           "fused": _fused_plan, "bwd_filter": _bwd_filter_plan}
  plan_of = plans[kind]
  image_of = {"fwd": _fwd_hw, "fused": _fwd_hw, "bwd_data": _bwd_data_hw, "bwd_filter": _bwd_filter_hw}[kind]

  def infer(*args):
    *static, mesh, arg_shapes, result_shape = args
    return plan_of(mesh, static[0], _decoded(mesh, arg_shapes), result_shape).result

  def partition(*args):
    *static, mesh, arg_shapes, result_shape = args
    arg_shapes, (result_shape,) = _decoded(mesh, arg_shapes), _decoded(mesh, (result_shape,))
    plan = plan_of(mesh, static[0], arg_shapes, result_shape)

    def lower(*operands):
      out = local(plan.halos, *operands, *static)
      if not plan.reduce_axes:
        return out
      return jax.lax.psum(out.astype(jnp.float32), plan.reduce_axes).astype(out.dtype)

    return mesh, lower, plan.result, plan.operands

  fn.def_partition(partition=partition, infer_sharding_from_operands=infer, propagate_user_sharding=None,
                   decode_shardings=False, sharding_rule=_sharding_rule(image_of, kind))
  return fn


fwd = _partitioned(_fwd, _fwd_local, "fwd", (2,))
fwd_fused = _partitioned(_fwd_fused, _fwd_fused_local, "fused", (5, 6, 7, 8))
bwd_data = _partitioned(_bwd_data, _bwd_data_local, "bwd_data", (2, 3))
bwd_filter = _partitioned(_bwd_filter, _bwd_filter_local, "bwd_filter", (2, 3, 4))
