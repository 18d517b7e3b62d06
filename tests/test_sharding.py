"""The custom calls partition across devices: on 8 simulated CPU devices, and on
every local GPU where a machine has two or more.

Batch and channel sharding must run with no all-gather of the activations, and
every sharded result must equal the single-device one.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jax_flashdwc import depthwise_conv2d
from numerics import fresh_seed
from shapes import ConvCase

CPUS = jax.devices("cpu")
CASES = [ConvCase("k5", 8, 10, 9, 16, 5, 5), ConvCase("s2_k3x4", 8, 11, 12, 16, 3, 4, strides=2, padding=((1, 2), (0, 1)))]
# The mesh over all n devices of a platform: one axis, then n/2 x 2 and 2 x n/2.
MESHES = [pytest.param("flat", id="flat"), pytest.param("rows", id="rows"), pytest.param("cols", id="cols")]


def _gpus():
  try:
    return jax.devices("gpu")
  except RuntimeError:
    return []


@pytest.fixture(params=["cpu", "gpu"])
def devices(request):
  """The 8 simulated host devices, or every local GPU (at least two)."""
  if request.param == "cpu":
    if len(CPUS) < 8:
      pytest.skip("needs 8 host devices (XLA_FLAGS set in conftest)")
    return CPUS[:8]
  gpus = _gpus()
  if len(gpus) < 2:
    pytest.skip(f"needs 2 or more GPUs, found {len(gpus)}")
  return gpus


def _sum_atol(terms):
  """Absolute tolerance of a loss summed over `terms` fp32 values of size about 1, whose
  order of summation sharding changes: a few eps per term. The sum of tanh can cancel
  to a small value, where a relative tolerance alone fails (tall_51x5 in bf16: -16.09874
  against -16.09903 on one device, relative 1.8e-5, over 30720 terms)."""
  return terms * 2e-7


def _mesh(devices, layout):
  n = len(devices)
  if layout == "flat":
    return Mesh(np.array(devices), ("a",))
  if n % 2:
    pytest.skip(f"a 2-D mesh needs an even device count, have {n}")
  shape = (n // 2, 2) if layout == "rows" else (2, n // 2)
  return Mesh(np.array(devices).reshape(shape), ("a", "b"))


def _shardings(axes):
  """(name, spec of x/y, spec of w) for sharding over N, over C, and over both."""
  out = [("batch", P(axes, None, None, None), P()), ("channels", P(None, None, None, axes), P(None, None, None, axes))]
  if len(axes) == 2:
    out.append(("both", P(axes[0], None, None, axes[1]), P(None, None, None, axes[1])))
  return out


def _loss(case):
  def loss(x, w):
    return jnp.sum(jnp.tanh(depthwise_conv2d(x, w, **case.conv_kwargs())))
  return loss


def _padded(spec, rank=4):
  return tuple(spec) + (None,) * (rank - len(spec))


def _hlo(fn, *args):
  return fn.lower(*args).compile().as_text()


def _assert_no_activation_gather(hlo, what):
  gathers = re.findall(r"all-gather[^\n]*", hlo)
  assert not gathers, f"{what}: the compiled program gathers: {gathers[:2]}"


@pytest.mark.parametrize("layout", MESHES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_batch_and_channel_sharding_match_single_device(case, layout, devices):
  mesh = _mesh(devices, layout)
  axis_names = mesh.axis_names
  rng = np.random.default_rng(fresh_seed())
  x = jnp.asarray(rng.uniform(-1, 1, case.x_shape), jnp.float32)
  w = jnp.asarray(rng.uniform(-1, 1, case.kernel_shape), jnp.float32)
  one = devices[0]
  fwd_ref = jax.jit(lambda x, w: depthwise_conv2d(x, w, **case.conv_kwargs()))(
      jax.device_put(x, one), jax.device_put(w, one))
  grad_ref = jax.jit(jax.value_and_grad(_loss(case), argnums=(0, 1)))(jax.device_put(x, one),
                                                                       jax.device_put(w, one))
  axes = axis_names if len(axis_names) > 1 else axis_names[0]
  for name, x_spec, w_spec in _shardings(axes):
    xs = jax.device_put(x, NamedSharding(mesh, x_spec))
    ws = jax.device_put(w, NamedSharding(mesh, w_spec))
    fwd = jax.jit(lambda x, w: depthwise_conv2d(x, w, **case.conv_kwargs()))
    out = fwd(xs, ws)
    np.testing.assert_allclose(np.asarray(out), np.asarray(fwd_ref), rtol=1e-6, atol=1e-6, err_msg=name)
    # Equivalence, not spec equality: a mesh axis of size 1 drops out of the result's spec.
    assert out.sharding.is_equivalent_to(NamedSharding(mesh, x_spec), out.ndim), (name, out.sharding)
    _assert_no_activation_gather(_hlo(fwd, xs, ws), f"fwd {name}")

    step = jax.jit(jax.value_and_grad(_loss(case), argnums=(0, 1)))
    value, (dx, dw) = step(xs, ws)
    # Sharding also changes the order of the filter gradient's fp32 sums over N*Ho*Wo.
    np.testing.assert_allclose(value, grad_ref[0], rtol=1e-5, atol=_sum_atol(out.size), err_msg=name)
    np.testing.assert_allclose(np.asarray(dx), np.asarray(grad_ref[1][0]), rtol=1e-5, atol=1e-5, err_msg=name)
    np.testing.assert_allclose(np.asarray(dw), np.asarray(grad_ref[1][1]), rtol=1e-5,
                               atol=_sum_atol(out.size // case.c), err_msg=name)
    _assert_no_activation_gather(_hlo(step, xs, ws), f"value_and_grad {name}")


def test_spatial_sharding_is_correct(devices):
  """H and W sharded together: the result is the one-device one (the halo traffic is
  checked in test_spatial_sharding.py)."""
  case = CASES[0]
  mesh = _mesh(devices, "rows")
  rng = np.random.default_rng(fresh_seed())
  x = jnp.asarray(rng.uniform(-1, 1, (8, 16, 8, 16)), jnp.float32)
  w = jnp.asarray(rng.uniform(-1, 1, case.kernel_shape), jnp.float32)
  ref = jax.jit(jax.value_and_grad(_loss(case), argnums=(0, 1)))(jax.device_put(x, devices[0]),
                                                                  jax.device_put(w, devices[0]))
  xs = jax.device_put(x, NamedSharding(mesh, P(None, "a", "b", None)))
  got = jax.jit(jax.value_and_grad(_loss(case), argnums=(0, 1)))(xs, w)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=x.size * 2e-7)


def test_shard_map_runs_the_kernel_per_shard(devices):
  case = CASES[0]
  mesh = _mesh(devices, "flat")
  rng = np.random.default_rng(fresh_seed())
  x = jnp.asarray(rng.uniform(-1, 1, case.x_shape), jnp.float32)
  w = jnp.asarray(rng.uniform(-1, 1, case.kernel_shape), jnp.float32)
  shard_map = getattr(jax, "shard_map", None)
  if shard_map is None:
    from jax.experimental.shard_map import shard_map
  per_shard = shard_map(lambda x, w: depthwise_conv2d(x, w, **case.conv_kwargs()), mesh=mesh,
                        in_specs=(P("a"), P()), out_specs=P("a"))
  out = jax.jit(per_shard)(x, w)
  ref = depthwise_conv2d(jax.device_put(x, devices[0]), jax.device_put(w, devices[0]), **case.conv_kwargs())
  np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("layout", MESHES[:2])
def test_fused_epilogue_and_prologue_shard_with_their_channels(layout, devices):
  mesh = _mesh(devices, layout)
  axis_names = mesh.axis_names
  case = CASES[0]
  rng = np.random.default_rng(fresh_seed())
  x = jnp.asarray(rng.uniform(-1, 1, case.x_shape), jnp.float32)
  w = jnp.asarray(rng.uniform(-1, 1, case.kernel_shape), jnp.float32)
  b = jnp.asarray(rng.uniform(-1, 1, (case.c,)), jnp.float32)
  s = jnp.asarray(rng.uniform(0.5, 1.5, (case.c,)), jnp.float32)
  t = jnp.asarray(rng.uniform(-0.5, 0.5, (case.c,)), jnp.float32)

  def loss(x, w, b, s, t):
    y = depthwise_conv2d(x, w, bias=b, activation="gelu", input_scale=s, input_shift=t, input_activation="relu",
                         **case.conv_kwargs())
    return jnp.sum(jnp.tanh(y))

  fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4)))
  expected = fn(*jax.device_put((x, w, b, s, t), devices[0]))
  for what, x_spec, w_spec in _shardings(axis_names):
    c_axes = _padded(w_spec)[3]
    args = (jax.device_put(x, NamedSharding(mesh, x_spec)), jax.device_put(w, NamedSharding(mesh, w_spec)),
            *(jax.device_put(a, NamedSharding(mesh, P(c_axes))) for a in (b, s, t)))
    _assert_no_activation_gather(_hlo(fn, *args), what)
    value, grads = fn(*args)
    np.testing.assert_allclose(value, expected[0], rtol=1e-5, atol=_sum_atol(x.size), err_msg=what)
    for g, e in zip(grads, expected[1]):
      np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-4, atol=1e-5, err_msg=what)


def test_tall_half_filter_shards_through_its_transposes(devices):
  """A tall bf16 filter runs on swapped H and W (conv._runs_transposed): the swaps keep
  N and C sharded, so nothing is gathered and each shard computes what one device does."""
  case = ConvCase("tall_51x5", 8, 20, 12, 16, 51, 5)
  mesh = _mesh(devices, "flat")
  rng = np.random.default_rng(fresh_seed())
  x = jnp.asarray(rng.uniform(-1, 1, case.x_shape), jnp.bfloat16)
  w = jnp.asarray(rng.uniform(-1, 1, case.kernel_shape), jnp.bfloat16)
  loss = lambda x, w: jnp.sum(jnp.tanh(depthwise_conv2d(x, w).astype(jnp.float32)))
  fwd = jax.jit(lambda x, w: depthwise_conv2d(x, w))
  step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
  fwd_ref = fwd(*jax.device_put((x, w), devices[0]))
  grad_ref = step(*jax.device_put((x, w), devices[0]))
  for name, x_spec, w_spec in _shardings("a"):
    xs, ws = jax.device_put(x, NamedSharding(mesh, x_spec)), jax.device_put(w, NamedSharding(mesh, w_spec))
    _assert_no_activation_gather(_hlo(fwd, xs, ws), f"fwd {name}")
    _assert_no_activation_gather(_hlo(step, xs, ws), f"value_and_grad {name}")
    # Every output element is summed by the same kernel in the same order on one shard.
    np.testing.assert_array_equal(np.asarray(fwd(xs, ws), np.float32), np.asarray(fwd_ref, np.float32),
                                  err_msg=name)
    value, (dx, dw) = step(xs, ws)
    np.testing.assert_allclose(value, grad_ref[0], rtol=1e-5, atol=_sum_atol(fwd_ref.size), err_msg=name)
    np.testing.assert_array_equal(np.asarray(dx, np.float32), np.asarray(grad_ref[1][0], np.float32),
                                  err_msg=name)
    # Over the batch the filter gradient's shard sums meet in a different order, and
    # each is rounded to bf16 before they are added: a few bf16 ulps.
    np.testing.assert_allclose(np.asarray(dw, np.float32), np.asarray(grad_ref[1][1], np.float32),
                               rtol=3e-2, atol=3e-2 * float(np.abs(np.asarray(grad_ref[1][1], np.float32)).max()),
                               err_msg=name)
