"""Several jitted functions calling the kernels at once, from several host threads,
each get the result they would get alone; and the kernels inside XLA's command
buffers (CUDA graphs) give what they give outside them."""

from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numerics import fresh_seed
from shapes import TEST_CASES

from jax_flashdwc import depthwise_conv2d

CASES = [c for c in TEST_CASES if c.name in ("convnext_k7_pad3", "mobilenet_s2_k3", "tiles_k9_c72", "d2_k3")]


def test_concurrent_calls_do_not_interfere(device):
  rng = np.random.default_rng(fresh_seed())
  jobs = []
  for case in CASES:
    x = jax.device_put(jnp.asarray(rng.uniform(-1, 1, case.x_shape), jnp.float32), device)
    w = jax.device_put(jnp.asarray(rng.uniform(-1, 1, case.kernel_shape), jnp.float32), device)
    def loss(x, w, case=case):
      return jnp.sum(jnp.tanh(depthwise_conv2d(x, w, implementation="flashdwc", deterministic=True,
                                               **case.conv_kwargs())))

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    jobs.append((step, x, w, jax.device_get(step(x, w))))  # alone, first

  def run(job):
    step, x, w, _ = job
    return [jax.device_get(step(x, w)) for _ in range(5)]

  with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
    results = list(pool.map(run, jobs * 2))
  for job, repeats in zip(jobs * 2, results):
    for got in repeats:
      for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(job[3])):
        # deterministic=True: the default filter gradient merges with float atomics, whose
        # order (and so the last bits) changes from run to run, interference or not.
        # XLA's own reductions around our kernels need not be bit-exact either.
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_kernels_replay_inside_command_buffers(device):
  """Every handler recorded into an XLA command buffer (a CUDA graph) and replayed on
  new inputs gives what it gives outside one."""
  if device.platform != "gpu":
    pytest.skip("command buffers are a GPU feature")
  rng = np.random.default_rng(fresh_seed())
  case = next(c for c in TEST_CASES if c.name == "convnext_k7_pad3")
  c = case.c

  def loss(x, w, b, s, t):
    plain = depthwise_conv2d(x, w, implementation="flashdwc", deterministic=True, **case.conv_kwargs())
    fused = depthwise_conv2d(x, w, implementation="flashdwc", bias=b, activation="gelu", input_scale=s,
                             input_shift=t, input_activation="relu",
                             deterministic=True, **case.conv_kwargs())
    return jnp.sum(jnp.tanh(plain)) + jnp.sum(fused * fused)

  step = jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4))
  recorded = jax.jit(step, compiler_options={"xla_gpu_enable_command_buffer": "FUSION,CUSTOM_CALL",
                                             "xla_gpu_graph_min_graph_size": 1})
  direct = jax.jit(step, compiler_options={"xla_gpu_enable_command_buffer": ""})
  for _ in range(3):  # the first call records, the others replay on new buffers
    args = [jax.device_put(jnp.asarray(a, jnp.float32), device) for a in (
        rng.uniform(-1, 1, case.x_shape), rng.uniform(-1, 1, case.kernel_shape), rng.uniform(-1, 1, c),
        rng.uniform(0.5, 1.5, c), rng.uniform(-0.5, 0.5, c))]
    for a, b in zip(jax.tree.leaves(recorded(*args)), jax.tree.leaves(direct(*args))):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
