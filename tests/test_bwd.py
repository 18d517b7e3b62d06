"""Backward-data and backward-filter against the fp32 oracle's vjp, CPU and GPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_flashdwc import depthwise_conv2d
from numerics import all_passes, assert_close, fresh_seed, oracle, uniform
from shapes import PHASE_RUN_CASES, TEST_CASES

DTYPES = [pytest.param(jnp.float32, id="F32"), pytest.param(jnp.float16, id="F16"),
          pytest.param(jnp.bfloat16, id="BF16")]


def _oracle_fn(case, precision=jax.lax.Precision.HIGHEST):
  return lambda x, w: oracle(x, w, case, precision=precision)


@pytest.mark.parametrize("pass_name", ["bwd_data", "bwd_filter"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", TEST_CASES, ids=lambda c: c.name)
def test_backward_matches_oracle(case, dtype, pass_name, device):
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x = uniform(rng, case.x_shape, dtype)
  w = uniform(rng, case.kernel_shape, dtype)
  y_shape = oracle(x, w, case).shape
  dy = uniform(rng, y_shape, dtype)

  fn = jax.jit(lambda x, w, dy: all_passes(
      lambda x, w: depthwise_conv2d(x, w, implementation="flashdwc", **case.conv_kwargs()), x, w, dy))
  put = lambda a: jax.device_put(jnp.asarray(a, dtype), device)
  _, dx, dw = fn(put(x), put(w), put(dy))

  cpu = jax.devices("cpu")[0]
  with jax.default_device(cpu):
    _, dx_ref, dw_ref = all_passes(_oracle_fn(case), jnp.asarray(x), jnp.asarray(w), jnp.asarray(dy))
    _, dx_mag, dw_mag = all_passes(_oracle_fn(case), jnp.abs(jnp.asarray(x)), jnp.abs(jnp.asarray(w)),
                                   jnp.abs(jnp.asarray(dy)))
    xla = None
    if dtype != jnp.float32:
      xla = all_passes(_oracle_fn(case, precision=None), jnp.asarray(x, dtype), jnp.asarray(w, dtype),
                       jnp.asarray(dy, dtype))

  if pass_name == "bwd_data":
    assert dx.dtype == jnp.dtype(dtype) and dx.shape == case.x_shape
    assert_close(dx, dx_ref, dx_mag, case.kh * case.kw, dtype, None if xla is None else xla[1],
                 what=f"bwd_data {case.name}", seed=seed)
  else:
    assert dw.dtype == jnp.dtype(dtype) and dw.shape == case.kernel_shape
    positions = y_shape[0] * y_shape[1] * y_shape[2]
    assert_close(dw, dw_ref, dw_mag, positions, dtype, None if xla is None else xla[2],
                 what=f"bwd_filter {case.name}", seed=seed)


@pytest.mark.parametrize("dtype", [DTYPES[0], DTYPES[2]])
@pytest.mark.parametrize("case", TEST_CASES, ids=lambda c: c.name)
def test_deterministic_filter_gradient_repeats_bit_for_bit(case, dtype, device):
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  put = lambda a: jax.device_put(jnp.asarray(a, dtype), device)
  x, w = put(uniform(rng, case.x_shape, dtype)), put(uniform(rng, case.kernel_shape, dtype))
  dy = put(uniform(rng, oracle(x, w, case).shape, dtype))

  def filter_grad(deterministic):
    conv = lambda w: depthwise_conv2d(x, w, implementation="flashdwc", deterministic=deterministic,
                                      **case.conv_kwargs())
    return jax.jit(lambda w, dy: jax.vjp(conv, w)[1](dy)[0])

  deterministic = filter_grad(True)
  first = np.asarray(deterministic(w, dy))
  for _ in range(3):
    np.testing.assert_array_equal(np.asarray(deterministic(w, dy)), first, err_msg=f"seed {seed}")
  positions = np.prod(dy.shape[:3])
  with jax.default_device(jax.devices("cpu")[0]):
    args = [jnp.asarray(np.asarray(a, np.float32)) for a in (x, w, dy)]
    _, _, dw_ref = all_passes(_oracle_fn(case), *args)
    _, _, dw_mag = all_passes(_oracle_fn(case), *map(jnp.abs, args))
  assert_close(first, dw_ref, dw_mag, positions, dtype, what=f"deterministic bwd_filter {case.name}", seed=seed)


@pytest.mark.parametrize("dtype", [DTYPES[0], DTYPES[2]])
@pytest.mark.parametrize("case", PHASE_RUN_CASES, ids=lambda c: c.name)
def test_strided_input_gradient_runs_of_rows(case, dtype, device):
  """The stride-2 polyphase input gradient with several phase rows a thread (GPU;
  on the CPU the same problem checks the CPU loops)."""
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x = uniform(rng, case.x_shape, dtype)
  w = uniform(rng, case.kernel_shape, dtype)
  dy = uniform(rng, oracle(x, w, case).shape, dtype)
  put = lambda a: jax.device_put(jnp.asarray(a, dtype), device)
  conv = lambda x, w: depthwise_conv2d(x, w, implementation="flashdwc", **case.conv_kwargs())
  fn = jax.jit(lambda x, w, dy: jax.vjp(conv, x, w)[1](dy)[0])
  dx = fn(put(x), put(w), put(dy))
  with jax.default_device(jax.devices("cpu")[0]):
    ref_fn = _oracle_fn(case)
    vjp = lambda x, w, dy: jax.vjp(ref_fn, x, w)[1](dy)[0]
    dx_ref = vjp(jnp.asarray(x), jnp.asarray(w), jnp.asarray(dy))
    dx_mag = vjp(jnp.abs(jnp.asarray(x)), jnp.abs(jnp.asarray(w)), jnp.abs(jnp.asarray(dy)))
    xla = None
    if dtype != jnp.float32:
      xla_fn = lambda x, w: oracle(x, w, case, precision=None)
      xla = jax.vjp(xla_fn, jnp.asarray(x, dtype), jnp.asarray(w, dtype))[1](jnp.asarray(dy, dtype))[0]
  assert dx.dtype == jnp.dtype(dtype) and dx.shape == case.x_shape
  assert_close(dx, dx_ref, dx_mag, case.kh * case.kw, dtype, xla, what=f"bwd_data {case.name}", seed=seed)
