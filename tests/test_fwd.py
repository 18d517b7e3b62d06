"""Forward pass against the fp32 oracle, every test shape and dtype, CPU and GPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_flashdwc import depthwise_conv2d
from numerics import assert_close, fresh_seed, oracle, uniform
from shapes import CHUNKED_TILE_CASE, MULTI_TILE_CASE, STREAM_CASE, TALL_TILE_CASE, TEST_CASES

DTYPES = [pytest.param(jnp.float32, id="F32"), pytest.param(jnp.float16, id="F16"),
          pytest.param(jnp.bfloat16, id="BF16")]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", TEST_CASES, ids=lambda c: c.name)
def test_forward_matches_oracle(case, dtype, device):
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x = uniform(rng, case.x_shape, dtype)
  w = uniform(rng, case.kernel_shape, dtype)
  fn = jax.jit(lambda x, w: depthwise_conv2d(x, w, implementation="flashdwc", **case.conv_kwargs()))
  out = fn(jax.device_put(jnp.asarray(x, dtype), device), jax.device_put(jnp.asarray(w, dtype), device))
  assert out.dtype == jnp.dtype(dtype)
  assert list(out.devices())[0] == device
  ref = oracle(x, w, case)
  mag = oracle(np.abs(x), np.abs(w), case)
  xla_out = None if dtype == jnp.float32 else oracle(jnp.asarray(x, dtype), jnp.asarray(w, dtype), case,
                                                     precision=None)
  assert_close(out, ref, mag, case.kh * case.kw, dtype, xla_out, what=f"fwd {case.name}", seed=seed)


@pytest.mark.parametrize("case", [MULTI_TILE_CASE, STREAM_CASE, TALL_TILE_CASE, CHUNKED_TILE_CASE],
                         ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", DTYPES[1:])
def test_forward_several_tiles_per_block_matches_oracle(dtype, case, device):
  if device.platform == "cpu":
    pytest.skip("sized for the GPU launcher's tile rule")
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x = uniform(rng, case.x_shape, dtype)
  w = uniform(rng, case.kernel_shape, dtype)
  out = jax.jit(lambda x, w: depthwise_conv2d(x, w, implementation="flashdwc", **case.conv_kwargs()))(
      jax.device_put(jnp.asarray(x, dtype), device), jax.device_put(jnp.asarray(w, dtype), device))
  ref = oracle(x, w, case)
  mag = oracle(np.abs(x), np.abs(w), case)
  xla_out = oracle(jnp.asarray(x, dtype), jnp.asarray(w, dtype), case, precision=None)
  assert_close(out, ref, mag, case.kh * case.kw, dtype, xla_out, what=f"fwd {case.name}", seed=seed)



def test_taps_that_touch_only_padding_are_cut_before_the_kernels():
  """VAN's 7x7 at dilation 3 on a 7x7 map reaches the input with rows and columns 1-5
  only, and a 31x31 'SAME' filter on 7x7 with 9-21: the kernels get the cut filter."""
  x = jnp.zeros((2, 7, 7, 8), jnp.float32)

  def kernel_shapes(kh, **kwargs):
    jaxpr = jax.make_jaxpr(lambda x, w: depthwise_conv2d(x, w, implementation="flashdwc", **kwargs))(
        x, jnp.zeros((kh, kh, 1, 8), jnp.float32))
    return {tuple(e.invars[1].aval.shape) for e in jaxpr.jaxpr.eqns if e.primitive.name.startswith("flashdwc_dwconv")}

  assert kernel_shapes(7, padding=9, kernel_dilation=3) == {(5, 5, 1, 8)}
  assert kernel_shapes(31, padding="SAME") == {(13, 13, 1, 8)}
  assert kernel_shapes(7, padding=3) == {(7, 7, 1, 8)}  # every tap live: left whole
