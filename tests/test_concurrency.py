"""Several jitted functions calling the kernels at once, from several host threads,
each get the result they would get alone."""

from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from jax_flashdwc import depthwise_conv2d
from numerics import fresh_seed
from shapes import TEST_CASES

CASES = [c for c in TEST_CASES if c.name in ("convnext_k7_pad3", "mobilenet_s2_k3", "tiles_k9_c72", "d2_k3")]


def test_concurrent_calls_do_not_interfere(device):
  rng = np.random.default_rng(fresh_seed())
  jobs = []
  for case in CASES:
    x = jax.device_put(jnp.asarray(rng.uniform(-1, 1, case.x_shape), jnp.float32), device)
    w = jax.device_put(jnp.asarray(rng.uniform(-1, 1, case.kernel_shape), jnp.float32), device)
    def loss(x, w, case=case):
      return jnp.sum(jnp.tanh(depthwise_conv2d(x, w, deterministic=True, **case.conv_kwargs())))

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
