"""The 1-D custom calls partition across devices (8 simulated CPU devices, conftest.py).

N and C sharding must run with no all-gather of the activations and keep the input's
sharding; L sharding gathers L. Every sharded result, forward and gradients in x,
kernel, bias and initial_state, must equal the single-device one.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jax_flashdwc import depthwise_conv1d, depthwise_conv1d_update
from numerics import fresh_seed

CPUS = jax.devices("cpu")
N, L, C, K = 8, 24, 16, 4
# (name, mesh shape, mesh axes, spec of x): N over all 8 devices, C over all 8, N over
# 4 and C over 2, and L over all 8.
LAYOUTS = [("batch", (8,), ("a",), P("a", None, None)), ("channels", (8,), ("a",), P(None, None, "a")),
           ("batch_channels", (4, 2), ("a", "b"), P("a", None, "b")), ("length", (8,), ("a",), P(None, "a", None))]
# Which optional operands each problem has: (segment_ids, initial_state).
PROBLEMS = {"segments": (True, False), "state": (False, True), "segments_state": (True, True)}


@pytest.fixture
def devices():
  if len(CPUS) < 8:
    pytest.skip("needs 8 host devices (XLA_FLAGS set in conftest)")
  return CPUS[:8]


def _inputs(rng, dtype=jnp.float32, dilation=1):
  x = jnp.asarray(rng.uniform(-1, 1, (N, L, C)), dtype)
  w = jnp.asarray(rng.uniform(-1, 1, (K, 1, C)), dtype)
  b = jnp.asarray(rng.uniform(-1, 1, (C,)), dtype)
  state = jnp.asarray(rng.uniform(-1, 1, (N, dilation * (K - 1), C)), dtype)
  # Sorted ids with random boundaries: every row packs a few sequences.
  seg = jnp.asarray(np.cumsum(rng.uniform(size=(N, L)) < 0.2, axis=1), jnp.int32)
  return x, w, b, state, seg


def _conv(use_seg, use_state, dilation=1):
  def conv(x, w, b, state, seg):
    return depthwise_conv1d(x, w, bias=b, activation="silu", kernel_dilation=dilation,
                            segment_ids=seg if use_seg else None, initial_state=state if use_state else None)
  return conv


def _step(conv):
  """value_and_grad in x, kernel, bias and initial_state of a loss that weighs every output."""
  def loss(x, w, b, state, seg):
    return jnp.sum(jnp.tanh(conv(x, w, b, state, seg).astype(jnp.float32)))
  return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))


def _put(mesh, spec, x, w, b, state, seg):
  n, length, c = spec
  return (jax.device_put(x, NamedSharding(mesh, spec)), jax.device_put(w, NamedSharding(mesh, P(None, None, c))),
          jax.device_put(b, NamedSharding(mesh, P(c))), jax.device_put(state, NamedSharding(mesh, P(n, None, c))),
          jax.device_put(seg, NamedSharding(mesh, P(n, length))))


def _gathers(fn, *args):
  """The all-gathers of the compiled program, as (element count, line)."""
  hlo = fn.lower(*args).compile().as_text()
  out = []
  for line in hlo.splitlines():
    m = re.search(r"= \(?(\w+)\[([\d,]*)\][^=]*? all-gather(?:-start)?\(", line)
    if m:
      out.append((int(np.prod([int(d) for d in m.group(2).split(",") if d])), line.strip()[:160]))
  return out, hlo


def _sum_atol(terms):
  # A float32 sum over `terms` values of size about 1 whose order sharding changes.
  return terms * 2e-7


@pytest.mark.parametrize("problem", list(PROBLEMS))
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: l[0])
def test_sharded_conv1d_matches_single_device(layout, problem, devices):
  name, mesh_shape, axes, spec = layout
  mesh = Mesh(np.array(devices).reshape(mesh_shape), axes)
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  dilation = 2 if problem == "state" else 1
  inputs = _inputs(rng, dilation=dilation)
  conv = _conv(*PROBLEMS[problem], dilation=dilation)
  fwd, step = jax.jit(conv), _step(conv)
  one = jax.device_put(inputs, devices[0])
  fwd_ref, (value_ref, grads_ref) = fwd(*one), step(*one)

  args = _put(mesh, spec, *inputs)
  what = f"{name} {problem} seed {seed}"
  y = fwd(*args)
  np.testing.assert_allclose(np.asarray(y), np.asarray(fwd_ref), rtol=1e-6, atol=1e-6, err_msg=what)
  value, grads = step(*args)
  np.testing.assert_allclose(value, value_ref, rtol=1e-5, atol=_sum_atol(y.size), err_msg=what)
  for arg, g, r in zip(("x", "kernel", "bias", "initial_state"), grads, grads_ref):
    # The kernel and bias gradients sum over N * L positions, in an order sharding changes.
    np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-5, atol=_sum_atol(N * L),
                               err_msg=f"{what}: d {arg}")
  if name == "length":
    return
  # Equivalence, not spec equality: a mesh axis of size 1 drops out of a spec.
  assert y.sharding.is_equivalent_to(args[0].sharding, y.ndim), (what, y.sharding)
  assert grads[0].sharding.is_equivalent_to(args[0].sharding, 3), (what, grads[0].sharding)
  if PROBLEMS[problem][1]:
    assert grads[3].sharding.is_equivalent_to(args[3].sharding, 3), (what, grads[3].sharding)
  for fn in (fwd, step):
    gathers, _ = _gathers(fn, *args)
    x_shard = N * L * C // len(devices)
    assert not [g for g in gathers if g[0] >= x_shard], f"{what}: the program gathers x-sized operands: {gathers}"


@pytest.mark.parametrize("layout", LAYOUTS[:3], ids=lambda l: l[0])
def test_sharded_decoding_step_runs_per_shard(layout, devices):
  """implementation='flashdwc' decoding step with x_t and the state sharded on N and/or
  C: no all-gather, results sharded like the inputs and equal to one device's."""
  name, mesh_shape, axes, spec = layout
  n, _, c = spec
  mesh = Mesh(np.array(devices).reshape(mesh_shape), axes)
  rng = np.random.default_rng(fresh_seed())
  x, w, b, state, _ = _inputs(rng)
  x_t = x[:, 0]
  step = jax.jit(lambda *a: depthwise_conv1d_update(*a, "silu", "flashdwc"))
  ref = step(*jax.device_put((x_t, state, w, b), devices[0]))
  args = (jax.device_put(x_t, NamedSharding(mesh, P(n, c))), jax.device_put(state, NamedSharding(mesh, P(n, None, c))),
          jax.device_put(w, NamedSharding(mesh, P(None, None, c))), jax.device_put(b, NamedSharding(mesh, P(c))))
  y, new_state = step(*args)
  np.testing.assert_allclose(np.asarray(y), np.asarray(ref[0]), rtol=1e-6, atol=1e-6, err_msg=name)
  np.testing.assert_array_equal(np.asarray(new_state), np.asarray(ref[1]), err_msg=name)
  assert y.sharding.is_equivalent_to(args[0].sharding, 2), (name, y.sharding)
  assert new_state.sharding.is_equivalent_to(args[1].sharding, 3), (name, new_state.sharding)
  gathers, _ = _gathers(step, *args)
  assert not gathers, f"{name}: {gathers}"


def test_length_sharding_is_gathered(devices):
  """L is gathered before the call (no halo exchange): the gather shows in the program."""
  mesh = Mesh(np.array(devices), ("a",))
  args = _put(mesh, P(None, "a", None), *_inputs(np.random.default_rng(fresh_seed())))
  gathers, _ = _gathers(jax.jit(_conv(True, True)), *args)
  assert any(size == N * L * C for size, _ in gathers), gathers


def test_filter_gradient_is_summed_over_the_batch_in_float32(devices):
  """bf16 inputs sharded on N: the kernel and bias partials are all-reduced as float32,
  once, and the result is the one-device one to bf16 rounding."""
  mesh = Mesh(np.array(devices), ("a",))
  seed = fresh_seed()
  inputs = _inputs(np.random.default_rng(seed), jnp.bfloat16)
  step = _step(_conv(True, True))
  args = _put(mesh, P("a", None, None), *inputs)
  hlo = step.lower(*args).compile().as_text()
  reduces = [line for line in hlo.splitlines() if re.search(r"= \(?[^=]*all-reduce(-start)?\(", line)]
  assert any(f"f32[{K},1,{C}]" in line and f"f32[{C}]" in line for line in reduces), reduces
  assert not any(f"bf16[{K},1,{C}]" in line for line in reduces), reduces
  _, grads = step(*args)
  _, ref = step(*jax.device_put(inputs, devices[0]))
  for g, r in zip(grads[1:3], ref[1:3]):
    g, r = np.asarray(g, np.float32), np.asarray(r, np.float32)
    # Summed in float32 on both sides, then rounded once: at most a bf16 ulp apart.
    np.testing.assert_allclose(g, r, rtol=2 ** -7, atol=2 ** -7 * np.abs(r).max() / 8, err_msg=f"seed {seed}")


def test_input_gradient_alone_is_not_all_reduced(devices):
  """Sharded on N, the gradient in x and the initial state alone (no filter or bias
  cotangent) runs the backward call without partials, the program all-reduces nothing,
  and the gradient equals the one-device one."""
  mesh = Mesh(np.array(devices), ("a",))
  seed = fresh_seed()
  inputs = _inputs(np.random.default_rng(seed))
  conv = _conv(True, True)
  grad = jax.jit(jax.grad(lambda x, w, b, state, seg: jnp.sum(jnp.tanh(conv(x, w, b, state, seg))),
                          argnums=(0, 3)))
  args = _put(mesh, P("a", None, None), *inputs)
  hlo = grad.lower(*args).compile().as_text()
  assert not [line for line in hlo.splitlines() if re.search(r"= \(?[^=]*all-reduce(-start)?\(", line)], hlo
  assert re.search(rf"f32\[0,{K},{C}\][^\n]*custom_call_target=\"flashdwc_conv1d_bwd\"", hlo), hlo
  got, ref = grad(*args), grad(*jax.device_put(inputs, devices[0]))
  for name, g, r in zip(("x", "initial_state"), got, ref):
    np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-6, atol=1e-6, err_msg=f"d {name} seed {seed}")


def test_shard_map_runs_the_kernels_per_shard(devices):
  """Inside shard_map (every axis manual) the calls run on the local shards as they are.
  The primitives do not track varying manual axes, so differentiation inside
  shard_map needs check_vma=False."""
  mesh = Mesh(np.array(devices), ("a",))
  seed = fresh_seed()
  inputs = _inputs(np.random.default_rng(seed))
  conv = _conv(True, True)
  shard_map = getattr(jax, "shard_map", None)
  if shard_map is None:
    from jax.experimental.shard_map import shard_map
  loss = lambda *a: jnp.sum(jnp.tanh(conv(*a)))
  per_shard = shard_map(jax.grad(loss, argnums=(0, 3)), mesh=mesh,
                        in_specs=(P("a"), P(), P(), P("a"), P("a")), out_specs=(P("a"), P("a")), check_vma=False)
  got = jax.jit(per_shard)(*inputs)
  ref = jax.jit(jax.grad(loss, argnums=(0, 3)))(*jax.device_put(inputs, devices[0]))
  for g, r in zip(got, ref):
    np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-5, atol=1e-6, err_msg=f"seed {seed}")


@pytest.mark.parametrize("shared_filter", [False, True])
def test_vmap_of_the_derivatives_runs_the_kernels(shared_filter):
  """vmap of grad and of jvp runs the backward and tangent primitives on the library's
  kernels (the vmapped axis folded into C or N), and equals a loop over the batch."""
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  b_count = 3
  x = jnp.asarray(rng.uniform(-1, 1, (b_count, 2, L, C)), jnp.float32)
  w = jnp.asarray(rng.uniform(-1, 1, (b_count, K, 1, C)), jnp.float32)
  state = jnp.asarray(rng.uniform(-1, 1, (b_count, 2, K - 1, C)), jnp.float32)
  bias = jnp.asarray(rng.uniform(-1, 1, (C,)), jnp.float32)
  seg = jnp.asarray(np.cumsum(rng.uniform(size=(2, L)) < 0.2, axis=1), jnp.int32)
  w_axis = None if shared_filter else 0
  ws = w[0] if shared_filter else w

  def f(x, w, state, bias):
    return depthwise_conv1d(x, w, bias=bias, activation="silu", segment_ids=seg, initial_state=state)

  grad = jax.grad(lambda *a: jnp.sum(jnp.sin(f(*a))), argnums=(0, 1, 2, 3))
  in_axes = (0, w_axis, 0, None)
  jaxpr = str(jax.make_jaxpr(jax.vmap(grad, in_axes=in_axes))(x, ws, state, bias))
  assert "flashdwc_conv1d_bwd" in jaxpr, "vmap of the backward primitive fell back to jnp"
  got = jax.vmap(grad, in_axes=in_axes)(x, ws, state, bias)
  pick = lambda a, i: a if a is ws and shared_filter else a[i]
  loop = [grad(x[i], pick(ws, i), state[i], bias) for i in range(b_count)]
  for j, g in enumerate(got):
    np.testing.assert_allclose(np.asarray(g), np.stack([np.asarray(l[j]) for l in loop]), rtol=1e-5, atol=1e-5,
                               err_msg=f"seed {seed}: gradient {j}")

  jvp = lambda x, w, state, bias: jax.jvp(f, (x, w, state, bias), (jnp.cos(x), jnp.cos(w), jnp.cos(state),
                                                                    jnp.cos(bias)))[1]
  jaxpr = str(jax.make_jaxpr(jax.vmap(jvp, in_axes=in_axes))(x, ws, state, bias))
  assert "flashdwc_conv1d_tangent" in jaxpr, "vmap of the tangent primitive fell back to jnp"
  got = jax.vmap(jvp, in_axes=in_axes)(x, ws, state, bias)
  loop = np.stack([np.asarray(jvp(x[i], pick(ws, i), state[i], bias)) for i in range(b_count)])
  np.testing.assert_allclose(np.asarray(got), loop, rtol=1e-5, atol=1e-5, err_msg=f"seed {seed}")
