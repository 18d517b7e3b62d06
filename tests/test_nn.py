"""The Flax layers match flax's own Conv(feature_group_count=C): parameters and outputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("flax")
from flax import linen, nnx  # noqa: E402

from jax_flashdwc.nn import DepthwiseConv2D, NnxDepthwiseConv2D  # noqa: E402

CONFIGS = [
    dict(kernel_size=(7, 7), padding=3),
    dict(kernel_size=(3, 3), strides=2, use_bias=False),
    dict(kernel_size=(5, 3), padding="VALID", kernel_dilation=(2, 1)),
]


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["F32", "BF16"])
def test_linen_matches_flax_conv(config, dtype):
  c = 12
  x = jax.random.uniform(jax.random.key(1), (2, 3, 11, 10, c), dtype, -1, 1)  # two batch dims
  ours = DepthwiseConv2D(features=c, dtype=dtype, **config)
  theirs = linen.Conv(features=c, feature_group_count=c, dtype=dtype, **config)
  params = ours.init(jax.random.key(0), x)
  reference_params = theirs.init(jax.random.key(0), x)
  assert jax.tree.structure(params) == jax.tree.structure(reference_params)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(reference_params)):
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # same initializers, same rng
  out, ref = ours.apply(params, x), theirs.apply(params, x)  # checkpoints swap: same tree
  assert out.shape == ref.shape and out.dtype == ref.dtype
  tol = 1e-5 if dtype == jnp.float32 else 2e-2
  np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(ref, np.float32), rtol=tol, atol=tol)


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_nnx_matches_flax_conv(config):
  c = 8
  x = jax.random.uniform(jax.random.key(1), (2, 9, 10, c), jnp.float32, -1, 1)
  ours = NnxDepthwiseConv2D(c, rngs=nnx.Rngs(0), **config)
  theirs = nnx.Conv(c, c, feature_group_count=c, rngs=nnx.Rngs(0), **config)
  ours_state, theirs_state = nnx.state(ours, nnx.Param), nnx.state(theirs, nnx.Param)
  assert jax.tree.structure(ours_state) == jax.tree.structure(theirs_state)
  for a, b in zip(jax.tree.leaves(ours_state), jax.tree.leaves(theirs_state)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  np.testing.assert_allclose(np.asarray(ours(x)), np.asarray(theirs(x)), rtol=1e-5, atol=1e-5)


def test_linen_gradients_match():
  c = 6
  x = jax.random.uniform(jax.random.key(1), (2, 8, 8, c), jnp.float32, -1, 1)
  ours = DepthwiseConv2D(features=c, kernel_size=(3, 3))
  theirs = linen.Conv(features=c, kernel_size=(3, 3), feature_group_count=c)
  params = ours.init(jax.random.key(0), x)
  loss = lambda m: lambda p: jnp.sum(jnp.sin(m.apply(p, x)))
  g_ours, g_theirs = jax.grad(loss(ours))(params), jax.grad(loss(theirs))(params)
  for a, b in zip(jax.tree.leaves(g_ours), jax.tree.leaves(g_theirs)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def test_channel_mismatch_raises():
  with pytest.raises(ValueError, match="inputs have 4 channels but the layer has features=5"):
    DepthwiseConv2D(features=5, kernel_size=3).init(jax.random.key(0), jnp.ones((1, 6, 6, 4)))
