"""Spatial sharding with halo exchange (jax_flashdwc/_partitioning.py).

When H or W is sharded, each pass must equal the one-device oracle, keep the
activation sharded (no all-gather, no all-to-all, no all-reduce larger than a
filter) and move, in collective-permutes, exactly the halo rows and columns: per
shard, `pad_lo` rows from the previous shard and `d*(K-1) - pad_lo - (s-1)` from
the next, on the N x H x W x C block each device holds (W's halos taken after H's,
so they include the corners).
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jax_flashdwc import _dilation
from jax_flashdwc import depthwise_conv2d
from jax_flashdwc._geometry import make_geometry
from numerics import fresh_seed
from shapes import ConvCase

# 32 x 32 on 8 shards is 4 rows a shard: the halos below fit in one neighbour.
CASES = [
    ConvCase("k7", 2, 32, 32, 8, 7, 7),
    ConvCase("k5_asym", 2, 32, 32, 8, 5, 5, padding=((0, 4), (4, 0))),
    ConvCase("s2_k4_asym", 2, 32, 32, 8, 4, 4, strides=2, padding=((1, 2), (2, 1))),
    ConvCase("s2_d2_k5", 2, 32, 32, 8, 5, 5, strides=2, dilation=2),
    ConvCase("s2_k1", 2, 32, 32, 8, 1, 1, strides=2, padding="VALID"),
    # Stride 1 and dilated: the halo path when the sub-grid layout is off (see
    # test_dilated_stride_one_subgrids_are_correct for the default).
    ConvCase("d3_k3_direct", 2, 32, 32, 8, 3, 3, dilation=3),
]
# (name, mesh shape as a function of the device count n, axis names, x spec)
MESHES = {
    "H": (lambda n: (n,), ("a",), P(None, "a")),
    "W": (lambda n: (n,), ("a",), P(None, None, "a")),
    "HxW": (lambda n: (n // 2, 2), ("a", "b"), P(None, "a", "b")),
    "NxH": (lambda n: (2, n // 2), ("a", "b"), P("a", "b")),
    # H over two mesh axes, the minor one first: the shard order is not the mesh's.
    "H_ba": (lambda n: (2, n // 2), ("a", "b"), P(None, ("b", "a"))),
}
_COLLECTIVE = re.compile(
    r"=\s+(\([^=]*?\)|\S+)\s+(all-gather|all-reduce|all-to-all|reduce-scatter|collective-permute)(-start)?\(")
_ARRAY = re.compile(r"\b(f32|bf16|f16|f64|s32|u32|pred)\[([\d,]*)\]")
_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "f64": 8, "s32": 4, "u32": 4, "pred": 1}


def _gpus():
  try:
    return jax.devices("gpu")
  except RuntimeError:
    return []


@pytest.fixture(params=["cpu", "gpu"])
def devices(request):
  """The 8 simulated host devices, or every local GPU (an even number, at least two)."""
  if request.param == "cpu":
    cpus = jax.devices("cpu")
    if len(cpus) < 8:
      pytest.skip("needs 8 host devices (XLA_FLAGS set in conftest)")
    return cpus[:8]
  gpus = _gpus()
  if len(gpus) < 2 or len(gpus) % 2:
    pytest.skip(f"needs an even number of GPUs, 2 or more; found {len(gpus)}")
  return gpus


def _mesh(devices, layout):
  shape_of, names, spec = MESHES[layout]
  return Mesh(np.array(devices).reshape(shape_of(len(devices))), names), spec


def collectives(hlo):
  """[(op, [(dtype, shape), ...])] for every collective of a compiled HLO module; an
  async start lists its operand only."""
  found = []
  for shapes, op, start in _COLLECTIVE.findall(hlo):
    arrays = [(t, tuple(int(d) for d in dims.split(",") if d)) for t, dims in _ARRAY.findall(shapes)]
    found.append((op, arrays[:1] if start else arrays))
  return found


def _nbytes(arrays):
  return sum(_BYTES[t] * int(np.prod(s)) for t, s in arrays)


def _halo(case, dim, shards):
  """(before, after) rows of dimension `dim` (0: H, 1: W), from the explicit padding."""
  geometry = make_geometry(jnp.zeros(case.x_shape), jnp.zeros(case.kernel_shape), case.strides,
                                       case.padding, case.dilation)
  k, s, d = case.kernel_shape[dim], geometry.strides[dim], geometry.dilation[dim]
  lo = geometry.padding[dim][0]
  return lo, d * (k - 1) - lo - (s - 1)


def expected_permute_bytes(case, mesh, spec, itemsize=4):
  """Bytes each shard's program sends through collective-permutes in one pass: its halos."""
  spec = tuple(spec) + (None,) * (4 - len(spec))
  count = lambda entry: 1 if entry is None else int(np.prod([mesh.shape[a] for a in np.atleast_1d(entry)]))
  n, rows, cols = case.n // count(spec[0]), case.h // count(spec[1]), case.w // count(spec[2])
  total = 0
  if spec[1] is not None:
    before, after = _halo(case, 0, count(spec[1]))
    total += n * (max(before, 0) + max(after, 0)) * cols * case.c
    rows += before + after
  if spec[2] is not None:
    before, after = _halo(case, 1, count(spec[2]))
    total += n * rows * (max(before, 0) + max(after, 0)) * case.c
  return total * itemsize


def _oracle(case):
  geometry = make_geometry(jnp.zeros(case.x_shape), jnp.zeros(case.kernel_shape), case.strides,
                                       case.padding, case.dilation)
  return lambda x, w: lax.conv_general_dilated(
      x, w, geometry.strides, geometry.padding, rhs_dilation=geometry.dilation,
      dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=x.shape[-1],
      precision=lax.Precision.HIGHEST)


def _passes(conv):
  """The three passes as functions of (x, w, ct): the forward, the input gradient and
  the filter gradient, each alone in its program."""
  return {
      "fwd": lambda x, w, ct: conv(x, w),
      "dx": lambda x, w, ct: jax.vjp(lambda x: conv(x, w), x)[1](ct)[0],
      "dw": lambda x, w, ct: jax.vjp(lambda w: conv(x, w), w)[1](ct)[0],
  }


def _check_traffic(hlo, what, filter_elements, halo_bytes):
  ops = collectives(hlo)
  moved = [op for op, _ in ops if op in ("all-gather", "all-to-all", "reduce-scatter")]
  assert not moved, f"{what}: the activation is gathered or redistributed: {moved}"
  for op, arrays in ops:
    if op == "all-reduce":
      assert all(np.prod(s) <= filter_elements for _, s in arrays), f"{what}: all-reduce of {arrays}"
  permuted = sum(_nbytes(a) for op, a in ops if op == "collective-permute")
  assert permuted == halo_bytes, f"{what}: collective-permutes move {permuted} bytes, the halos are {halo_bytes}"


@pytest.mark.parametrize("layout", list(MESHES))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_spatial_sharding_exchanges_halos_only(case, layout, devices, monkeypatch):
  monkeypatch.setattr(_dilation, "ENABLED", False)
  mesh, spec = _mesh(devices, layout)
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  conv = lambda x, w: depthwise_conv2d(x, w, implementation="flashdwc", **case.conv_kwargs())
  oracle = _oracle(case)
  x = jnp.asarray(rng.uniform(-1, 1, case.x_shape), jnp.float32)
  w = jnp.asarray(rng.uniform(-1, 1, case.kernel_shape), jnp.float32)
  y_shape = jax.eval_shape(oracle, x, w).shape
  ct = jnp.asarray(rng.uniform(-1, 1, y_shape), jnp.float32)
  one = devices[0]
  expected = {name: jax.jit(fn)(*jax.device_put((x, w, ct), one)) for name, fn in _passes(oracle).items()}
  sharded = NamedSharding(mesh, spec)
  args = (jax.device_put(x, sharded), jax.device_put(w, NamedSharding(mesh, P())), jax.device_put(ct, sharded))
  halo_bytes = expected_permute_bytes(case, mesh, spec)
  for name, fn in _passes(conv).items():
    what = f"{name} {case.name} {layout} seed={seed}"
    step = jax.jit(fn)
    got = step(*args)
    # The filter gradient sums 2 * 32 * 32 products of size up to 1 in fp32, in
    # another order on each shard.
    atol = 1e-4 if name == "dw" else 1e-5
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected[name]), rtol=1e-5, atol=atol, err_msg=what)
    if name != "dw":
      assert got.sharding.is_equivalent_to(sharded, got.ndim), (what, got.sharding)
    _check_traffic(step.lower(*args).compile().as_text(), what, w.size, halo_bytes)


@pytest.mark.parametrize("layout", ["HxW", "NxH"])
def test_training_step_with_fused_prologue_exchanges_halos(layout, devices):
  """The fused forward (BN scale/shift + ReLU prologue, bias, GELU) and its gradients
  under spatial sharding: the prologue then runs before the exchange, so the edge
  shards' zero halos are padding after it, as on one device."""
  case = ConvCase("k7", 2, 32, 32, 8, 7, 7)
  mesh, spec = _mesh(devices, layout)
  rng = np.random.default_rng(fresh_seed())
  x = jnp.asarray(rng.uniform(-1, 1, case.x_shape), jnp.float32)
  w = jnp.asarray(rng.uniform(-1, 1, case.kernel_shape), jnp.float32)
  b, s, t = (jnp.asarray(rng.uniform(lo, hi, (case.c,)), jnp.float32) for lo, hi in ((-1, 1), (0.5, 1.5), (-.5, .5)))

  def loss(x, w, b, s, t):
    y = depthwise_conv2d(x, w, bias=b, activation="gelu", input_scale=s, input_shift=t, input_activation="relu",
                         implementation="flashdwc")
    return jnp.sum(jnp.tanh(y))

  step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4)))
  expected = step(*jax.device_put((x, w, b, s, t), devices[0]))
  xs = jax.device_put(x, NamedSharding(mesh, spec))
  args = (xs, *jax.device_put((w, b, s, t), NamedSharding(mesh, P())))
  value, grads = step(*args)
  np.testing.assert_allclose(value, expected[0], rtol=1e-5, atol=x.size * 2e-7)
  for g, e in zip(grads, expected[1]):
    np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-4, atol=1e-4)
  assert grads[0].sharding.is_equivalent_to(xs.sharding, 4), grads[0].sharding
  ops = collectives(step.lower(*args).compile().as_text())
  assert not [op for op, _ in ops if op in ("all-gather", "all-to-all", "reduce-scatter")], ops
  assert any(op == "collective-permute" for op, _ in ops)


@pytest.mark.parametrize("case", [ConvCase("valid_k5", 2, 32, 32, 8, 5, 5, padding="VALID"),
                                  ConvCase("s2_k3_valid", 2, 32, 32, 8, 3, 3, strides=2, padding="VALID"),
                                  ConvCase("s8_fewer_rows_than_shards", 2, 32, 32, 8, 3, 3, strides=8),
                                  ConvCase("d2_k3_subgrid", 2, 32, 32, 8, 3, 3, dilation=2)],
                         ids=lambda c: c.name)
def test_spatial_sharding_that_cannot_exchange_halos_is_gathered_and_correct(case, devices):
  """H != s * Ho ("VALID", or a stride that does not divide H), fewer output rows than
  shards, and the default sub-grid
  layout of a dilated stride-1 problem (which moves rows across shards), keep the
  gather: the result must still be the one-device one."""
  mesh, spec = _mesh(devices, "H")
  rng = np.random.default_rng(fresh_seed())
  x = jnp.asarray(rng.uniform(-1, 1, case.x_shape), jnp.float32)
  w = jnp.asarray(rng.uniform(-1, 1, case.kernel_shape), jnp.float32)
  loss = lambda x, w: jnp.sum(jnp.tanh(depthwise_conv2d(x, w, implementation="flashdwc", **case.conv_kwargs())))
  step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
  expected = step(*jax.device_put((x, w), devices[0]))
  got = step(jax.device_put(x, NamedSharding(mesh, spec)), w)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=x.size * 2e-7)


def test_halo_bytes_formula_counts_a_known_case():
  """The expectation itself: k = 7 SAME on H sharded 8 ways, 2 x 4 x 32 x 8 fp32 blocks,
  moves 3 rows up and 3 down: 2 * 6 * 32 * 8 * 4 bytes."""
  mesh = Mesh(np.array(jax.devices("cpu")[:8]), ("a",)) if len(jax.devices("cpu")) >= 8 else None
  if mesh is None:
    pytest.skip("needs 8 host devices")
  assert expected_permute_bytes(CASES[0], mesh, P(None, "a")) == 2 * 6 * 32 * 8 * 4
  # Stride 2, K = 1: the last row of each block is read by no output row; nothing moves.
  assert expected_permute_bytes(CASES[4], mesh, P(None, "a")) == 0
