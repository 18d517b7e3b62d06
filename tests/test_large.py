"""Tensors of more than 2^31 elements on the GPU (64-bit indexing in every kernel).

Opt-in, as it moves tens of gigabytes: FLASHDWC_LARGE_TESTS=1 and a GPU with at
least 40 GB. Errors are reduced on the device so that only scalars reach the host.
"""

import os

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from jax_flashdwc import depthwise_conv2d


def _gpu():
  try:
    return jax.devices("gpu")[0]
  except RuntimeError:
    return None


pytestmark = pytest.mark.skipif(os.environ.get("FLASHDWC_LARGE_TESTS") != "1" or _gpu() is None,
                                reason="set FLASHDWC_LARGE_TESTS=1 on a GPU machine")


@pytest.mark.parametrize("pass_name", ["fwd", "bwd_data", "bwd_filter"])
def test_more_than_2_31_elements(pass_name):
  shape = (64, 256, 256, 512)  # 2^31 = 2,147,483,648 elements, one past the int32 range
  assert shape[0] * shape[1] * shape[2] * shape[3] > 2**31 - 1
  dtype = jnp.bfloat16
  keys = jax.random.split(jax.random.key(int.from_bytes(os.urandom(4), "little")), 3)
  x = jax.random.uniform(keys[0], shape, dtype, -1, 1)
  w = jax.random.uniform(keys[1], (3, 3, 1, shape[3]), dtype, -1, 1)
  dy = jax.random.uniform(keys[2], shape, dtype, -1, 1)

  def oracle(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                    feature_group_count=shape[3], precision=lax.Precision.HIGHEST)

  def pick(fn, x, w, dy):
    """The pass's result of fn at (x, w) with cotangent dy."""
    y, vjp = jax.vjp(fn, x, w)
    if pass_name == "fwd":
      return y
    dx, dw = vjp(dy.astype(y.dtype))
    return dx if pass_name == "bwd_data" else dw

  f32 = lambda a: a.astype(jnp.float32)

  def reference(x, w, dy):
    """The oracle in fp32. The filter gradient sums over the batch in 8 chunks, one at a
    time: whole, its fp32 operands and their absolute values overflowed the H200's memory."""
    if pass_name != "bwd_filter":
      return pick(oracle, f32(x), f32(w), f32(dy))
    chunks = lambda a: a.reshape(8, a.shape[0] // 8, *a.shape[1:])
    return jnp.sum(lax.map(lambda xd: pick(oracle, f32(xd[0]), f32(w), f32(xd[1])), (chunks(x), chunks(dy))), 0)

  @jax.jit
  def worst_ratio(x, w, dy):
    ours = f32(pick(lambda x, w: depthwise_conv2d(x, w, implementation="flashdwc"), x, w, dy))
    ref = reference(x, w, dy)
    mag = reference(jnp.abs(x), jnp.abs(w), jnp.abs(dy))  # sum of |terms|
    k = 9 if pass_name != "bwd_filter" else shape[0] * shape[1] * shape[2]
    # One bf16 rounding of the result plus fp32 summation error, as in the other tests.
    tol = jnp.maximum(2.0**-8 * jnp.abs(ref), 1e-30) + 8 * 2.0**-23 * jnp.sqrt(float(k)) * mag
    return jnp.max(jnp.abs(ours - ref) / tol), jnp.sum(jnp.logical_not(jnp.isfinite(ours)))

  ratio, non_finite = jax.device_get(worst_ratio(x, w, dy))
  assert non_finite == 0
  assert ratio <= 1.0, f"{pass_name}: worst error/tolerance {ratio:.3f}"
