"""Forward pass against the fp32 oracle, every test shape and dtype, CPU and GPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_flashdwc import depthwise_conv2d
from numerics import assert_close, fresh_seed, oracle, uniform
from shapes import TEST_CASES, ConvCase

DTYPES = [pytest.param(jnp.float32, id="F32"), pytest.param(jnp.float16, id="F16"),
          pytest.param(jnp.bfloat16, id="BF16")]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", TEST_CASES, ids=lambda c: c.name)
def test_forward_matches_oracle(case, dtype, device):
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x = uniform(rng, case.x_shape, dtype)
  w = uniform(rng, case.kernel_shape, dtype)
  fn = jax.jit(lambda x, w: depthwise_conv2d(x, w, **case.conv_kwargs()))
  out = fn(jax.device_put(jnp.asarray(x, dtype), device), jax.device_put(jnp.asarray(w, dtype), device))
  assert out.dtype == jnp.dtype(dtype)
  assert list(out.devices())[0] == device
  ref = oracle(x, w, case)
  mag = oracle(np.abs(x), np.abs(w), case)
  xla_out = None if dtype == jnp.float32 else oracle(jnp.asarray(x, dtype), jnp.asarray(w, dtype), case,
                                                     precision=None)
  assert_close(out, ref, mag, case.kh * case.kw, dtype, xla_out, what=f"fwd {case.name}", seed=seed)


# The tensor-core launcher gives a block several 8-row output tiles only where that
# leaves at least 4 waves of blocks (choose_mma_fwd_grid, fwd_mma.cu), which the small
# TEST_CASES never reach. On an H200 this shape takes 4 tiles a block over 5 tile
# rows (a last tile block of one tile), with 4 images in each 128-column strip and
# the 9-row filter as one chunk; tests/cuda/check_fwd_mma.cu forces every tile count
# on small shapes.
MULTI_TILE_CASE = ConvCase("mma_tiles_k9_h40_w32", 64, 40, 32, 1024, 9, 9)


@pytest.mark.parametrize("dtype", DTYPES[1:])
def test_forward_several_tiles_per_block_matches_oracle(dtype, device):
  if device.platform == "cpu":
    pytest.skip("sized for the GPU launcher's tile rule")
  case = MULTI_TILE_CASE
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x = uniform(rng, case.x_shape, dtype)
  w = uniform(rng, case.kernel_shape, dtype)
  out = jax.jit(lambda x, w: depthwise_conv2d(x, w, **case.conv_kwargs()))(
      jax.device_put(jnp.asarray(x, dtype), device), jax.device_put(jnp.asarray(w, dtype), device))
  ref = oracle(x, w, case)
  mag = oracle(np.abs(x), np.abs(w), case)
  xla_out = oracle(jnp.asarray(x, dtype), jnp.asarray(w, dtype), case, precision=None)
  assert_close(out, ref, mag, case.kh * case.kw, dtype, xla_out, what=f"fwd {case.name}", seed=seed)

