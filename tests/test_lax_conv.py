"""jax_flashdwc.lax_conv.conv_general_dilated: lax's function, depthwise calls on the kernels.

Each test compares against lax.conv_general_dilated at precision=HIGHEST on fresh
U(-1, 1) inputs, and checks which path ran (the library's primitive in the jaxpr
or not), so that a silent fall-back to lax cannot pass for the kernels.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jax_flashdwc.lax_conv import Routed, conv_general_dilated, takes
from numerics import fresh_seed

HIGHEST = lax.Precision.HIGHEST
DN = {3: ("NWC", "WIO", "NWC"), 4: ("NHWC", "HWIO", "NHWC")}
EPS = {jnp.dtype(jnp.float32): 2.0**-23, jnp.dtype(jnp.float64): 2.0**-52}


def rand(rng, shape, dtype=jnp.float32):
  return jnp.asarray(rng.uniform(-1, 1, size=shape), dtype)


def assert_close(a, b, reduction_length, dtype=jnp.float32):
  """Equal within fp summation error: a few eps * sqrt(terms summed) at the result's magnitude."""
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
    assert u.shape == v.shape
    scale = max(float(np.abs(v).max(initial=0.0)), 1.0)
    np.testing.assert_allclose(u, v, rtol=0, atol=16 * EPS[jnp.dtype(dtype)] * math.sqrt(reduction_length) * scale)


def uses_kernels(fn, *args) -> bool:
  return "flashdwc_dwconv" in str(jax.make_jaxpr(fn)(*args))


def problem(rng, rank, channels=4, multiplier=1, size=9, kernel=3, batch=2, dtype=jnp.float32):
  spatial = rank - 2
  x = rand(rng, (batch, *(size,) * spatial, channels), dtype)
  w = rand(rng, (*(kernel,) * spatial, 1, multiplier * channels), dtype)
  return x, w


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("multiplier", [1, 3])
@pytest.mark.parametrize("strides, padding, dilation", [
    (None, "SAME", None),
    (2, "VALID", 1),
    (1, "SAME_LOWER", 2),
    (2, "neg", 2),
])
def test_matches_lax_and_runs_the_kernels(rank, multiplier, strides, padding, dilation):
  rng = np.random.default_rng(seed := fresh_seed())
  x, w = problem(rng, rank, multiplier=multiplier)
  spatial = rank - 2
  # numpy integers of several widths, as configs and checkpoints hand them over
  strides = None if strides is None else (np.int32(strides),) * spatial
  dilation = None if dilation is None else (np.int64(dilation),) * spatial
  padding = [(np.int16(1), -2)] * spatial if padding == "neg" else padding
  kwargs = dict(padding=padding, rhs_dilation=dilation, dimension_numbers=DN[rank],
                feature_group_count=np.int64(x.shape[-1]))
  ours = lambda x, w: conv_general_dilated(x, w, strides, **kwargs)
  ref = lax.conv_general_dilated(x, w, strides or (1,) * spatial, precision=HIGHEST, **kwargs)
  assert_close(jax.jit(ours)(x, w), ref, 9), seed
  assert uses_kernels(ours, x, w)
  assert takes(x, w, **kwargs)


@pytest.mark.parametrize("rank", [3, 4])
def test_every_transformation_matches_lax(rank):
  rng = np.random.default_rng(fresh_seed())
  x, w = problem(rng, rank, multiplier=2, size=6, batch=2, channels=3)
  kwargs = dict(window_strides=(2,) * (rank - 2), padding="SAME", dimension_numbers=DN[rank],
                feature_group_count=3)
  ours = lambda x, w: conv_general_dilated(x, w, **kwargs)
  ref = lambda x, w: lax.conv_general_dilated(x, w, precision=HIGHEST, **kwargs)
  k = x.shape[0] * x.shape[1] ** (rank - 2)  # the longest sum: the filter gradient's
  loss = lambda conv: lambda x, w: jnp.sum(jnp.sin(conv(x, w)))
  tx, tw = rand(rng, x.shape), rand(rng, w.shape)
  checks = {
      "jit": lambda f: jax.jit(f)(x, w),
      "grad": lambda f: jax.grad(loss(f), argnums=(0, 1))(x, w),
      "vmap": lambda f: jax.vmap(f, in_axes=(0, None))(jnp.stack([x, tx]), w),
      "vmap both": lambda f: jax.vmap(f)(jnp.stack([x, tx]), jnp.stack([w, tw])),
      "checkpoint": lambda f: jax.grad(jax.checkpoint(loss(f)), argnums=(0, 1))(x, w),
      "jvp": lambda f: jax.jvp(f, (x, w), (tx, tw)),
      "jacfwd": lambda f: jax.jacfwd(f, argnums=1)(x[:1], w),
      "jacrev": lambda f: jax.jacrev(f, argnums=1)(x[:1], w),
      "hessian": lambda f: jax.hessian(lambda w: loss(f)(x[:1], w))(w),
      "linearize": lambda f: jax.linearize(f, x, w)[1](tx, tw),
      "grad of grad": lambda f: jax.grad(lambda x, w: jnp.sum(jax.grad(loss(f))(x, w) ** 2), argnums=(0, 1))(x, w),
  }
  for name, check in checks.items():
    assert_close(jax.jit(lambda: check(ours))(), check(ref), k), name
  assert uses_kernels(jax.grad(lambda x, w: jnp.sum(jax.grad(loss(ours))(x, w) ** 2)), x, w)


def test_other_calls_run_lax_unchanged():
  rng = np.random.default_rng(fresh_seed())
  x = rand(rng, (2, 8, 8, 6))
  cases = [
      (rand(rng, (3, 3, 2, 6)), dict(feature_group_count=3)),  # grouped
      (rand(rng, (3, 3, 6, 4)), dict()),  # dense
      (rand(rng, (3, 3, 1, 6)), dict(feature_group_count=6, lhs_dilation=(2, 1))),  # input dilation
      (rand(rng, (3, 3, 1, 6)), dict(feature_group_count=6, preferred_element_type=None)),
  ]
  for w, extra in cases:
    lhs = x
    if "preferred_element_type" in extra:
      # a wider result than the operands': lax's (the kernels round to x's dtype)
      lhs, w = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
      extra["preferred_element_type"] = jnp.float32
    kwargs = dict(window_strides=(1, 1), padding=((1, 1), (1, 1)), dimension_numbers=DN[4], **extra)
    ours = lambda x, w: conv_general_dilated(x, w, **kwargs)
    assert not uses_kernels(ours, lhs, w)
    np.testing.assert_array_equal(ours(lhs, w), lax.conv_general_dilated(lhs, w, **kwargs))
  # channels first: a depthwise problem, but not the kernels' layout
  xt, wt = jnp.transpose(x, (0, 3, 1, 2)), rand(rng, (6, 1, 3, 3))
  ours = lambda x, w: conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=6)
  assert not uses_kernels(ours, xt, wt)
  np.testing.assert_array_equal(ours(xt, wt), lax.conv_general_dilated(xt, wt, (1, 1), "SAME",
                                                                      feature_group_count=6))


@pytest.mark.parametrize("x_shape, w_shape, padding", [
    ((0, 8, 8, 4), (3, 3, 1, 8), "SAME"),
    ((2, 0, 8, 4), (3, 3, 1, 4), ((1, 1), (1, 1))),
    ((2, 8, 8, 4), (9, 3, 1, 4), "VALID"),
    ((0, 7, 3), (3, 1, 3), "SAME"),
])
def test_zero_size_problems(x_shape, w_shape, padding):
  rng = np.random.default_rng(fresh_seed())
  x, w = rand(rng, x_shape), rand(rng, w_shape)
  rank = len(x_shape)
  kwargs = dict(window_strides=(1,) * (rank - 2), padding=padding, dimension_numbers=DN[rank],
                feature_group_count=x_shape[-1])
  ours = jax.jit(lambda x, w: conv_general_dilated(x, w, **kwargs))(x, w)
  ref = lax.conv_general_dilated(x, w, **kwargs)
  assert ours.shape == ref.shape
  np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.int32, jnp.int8])
def test_dtypes_without_a_kernel_run_lax_or_raise_when_forced(dtype):
  rng = np.random.default_rng(fresh_seed())
  with jax.enable_x64(True):
    x = jnp.asarray(rng.uniform(-4, 4, size=(2, 7, 6, 3)), dtype)
    w = jnp.asarray(rng.uniform(-4, 4, size=(3, 3, 1, 6)), dtype)
    kwargs = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=DN[4], feature_group_count=3)
    try:
      ref = lax.conv_general_dilated(x, w, precision=HIGHEST, **kwargs)
    except jax.errors.JaxRuntimeError as lax_error:
      # XLA's GPU backend has no int32 conv (cuDNN takes int8 only): lax fails at
      # compile time, and so does this call, which runs lax's conv.
      with pytest.raises(type(lax_error)):
        conv_general_dilated(x, w, **kwargs)
    else:
      out = conv_general_dilated(x, w, **kwargs)
      assert out.dtype == ref.dtype
      if jnp.issubdtype(dtype, jnp.integer):
        np.testing.assert_array_equal(out, ref)
      else:
        assert_close(out, ref, 9, jnp.float64)
    with pytest.raises(TypeError, match=rf"implementation='flashdwc' has depthwise kernels for .*got lhs "
                                        rf"{jnp.dtype(dtype)}"):
      conv_general_dilated(x, w, implementation="flashdwc", **kwargs)


def test_bad_arguments_name_themselves():
  x, w = jnp.ones((1, 5, 5, 2)), jnp.ones((3, 3, 1, 2))
  with pytest.raises(ValueError, match=r"implementation must be None or one of \('flashdwc', 'xla'\); got 'cuda'"):
    conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=DN[4], feature_group_count=2,
                         implementation="cuda")
  with pytest.raises(ValueError, match="implementation must be None or one of"):
    Routed("fast")
  with pytest.raises(ValueError, match="padding must be one of SAME, SAME_LOWER, VALID"):
    conv_general_dilated(x, w, (1, 1), "CIRCULAR", dimension_numbers=DN[4], feature_group_count=2)


def test_implementation_xla_and_lax_only_arguments_run_lax():
  rng = np.random.default_rng(fresh_seed())
  x, w = problem(rng, 4)
  kwargs = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=DN[4], feature_group_count=4)
  assert not uses_kernels(lambda x, w: conv_general_dilated(x, w, implementation="xla", **kwargs), x, w)
  assert uses_kernels(lambda x, w: conv_general_dilated(x, w, out_sharding=None, **kwargs), x, w)
  routed = lambda x, w: Routed()(x, w, (1, 1), "SAME", dimension_numbers=DN[4], feature_group_count=4)
  assert uses_kernels(routed, x, w)
  assert Routed("xla") == Routed("xla") and hash(Routed()) == hash(Routed(None))
