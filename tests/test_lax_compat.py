"""Inputs lax.conv_general_dilated takes that a drop-in must take too: negative
padding, empty results and zero-size operands, float64."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_flashdwc import depthwise_conv2d
from numerics import fresh_seed


def _lax(x, w, **kwargs):
  return jax.lax.conv_general_dilated(
      x, w, kwargs.get("strides", (1, 1)), kwargs["padding"], rhs_dilation=kwargs.get("kernel_dilation", (1, 1)),
      dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=x.shape[-1],
      precision=jax.lax.Precision.HIGHEST)


def _rand(rng, shape, dtype=jnp.float32):
  return jnp.asarray(rng.uniform(-1, 1, size=shape), dtype)


@pytest.mark.parametrize("padding, strides", [
    (((-1, 2), (0, -2)), (1, 1)),
    (((-2, -1), (-1, 3)), (2, 1)),
    (((1, -3), (-2, -2)), (1, 2)),
])
def test_negative_padding_crops_as_lax_in_every_pass(padding, strides):
  rng = np.random.default_rng(fresh_seed())
  x, w = _rand(rng, (2, 9, 10, 6)), _rand(rng, (3, 3, 1, 6))
  kwargs = dict(padding=padding, strides=strides)
  ours, ref = depthwise_conv2d(x, w, **kwargs), _lax(x, w, **kwargs)
  np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)
  ct = _rand(rng, ref.shape)
  g_ours = jax.vjp(lambda x, w: depthwise_conv2d(x, w, **kwargs), x, w)[1](ct)
  g_ref = jax.vjp(lambda x, w: _lax(x, w, **kwargs), x, w)[1](ct)
  for a, b in zip(g_ours, g_ref):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x_shape, kernel_shape, padding", [
    ((0, 8, 8, 4), (3, 3, 1, 4), "SAME"),
    ((2, 0, 8, 4), (3, 3, 1, 4), ((1, 1), (1, 1))),
    ((2, 8, 8, 4), (9, 3, 1, 4), "VALID"),
])
def test_zero_size_problems_match_lax(x_shape, kernel_shape, padding):
  rng = np.random.default_rng(fresh_seed())
  x, w = _rand(rng, x_shape), _rand(rng, kernel_shape)
  ours = jax.jit(lambda x, w: depthwise_conv2d(x, w, padding=padding, implementation="flashdwc"))(x, w)
  ref = _lax(x, w, padding=padding)
  assert ours.shape == ref.shape
  np.testing.assert_array_equal(ours, ref)
  grads = jax.grad(lambda x, w: jnp.sum(depthwise_conv2d(x, w, padding=padding)), argnums=(0, 1))(x, w)
  ref_grads = jax.grad(lambda x, w: jnp.sum(_lax(x, w, padding=padding)), argnums=(0, 1))(x, w)
  for a, b in zip(grads, ref_grads):
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_float64_runs_xla_under_none_and_is_refused_when_forced():
  rng = np.random.default_rng(fresh_seed())
  with jax.enable_x64(True):
    x, w = _rand(rng, (1, 6, 7, 3), jnp.float64), _rand(rng, (3, 3, 1, 3), jnp.float64)
    out = depthwise_conv2d(x, w)
    assert out.dtype == jnp.float64
    np.testing.assert_allclose(out, _lax(x, w, padding="SAME"), rtol=1e-12)
    with pytest.raises(TypeError, match="implementation='flashdwc' has kernels for float32.*got float64"):
      depthwise_conv2d(x, w, implementation="flashdwc")
