"""The flax drop-in: jax_flashdwc.nn.Conv / intercept() (linen) and jax_flashdwc.nnx.Conv / swap / intercept.

Models are written against plain flax.linen.Conv and flax.nnx.Conv, with
depthwise (one with a channel multiplier), grouped and dense convolutions, as
code from another project would be. Under the drop-in: the parameter trees are
flax's, outputs and every transformation match flax's own layers (lax's conv at
HIGHEST precision), and the compiled program holds this library's custom calls
for the depthwise convolutions and XLA convolutions for the others, no more.
"""

import dataclasses
import os
import inspect
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("flax")
from flax import linen, nnx  # noqa: E402

import jax_flashdwc.nn as fnn  # noqa: E402
import jax_flashdwc.nnx as fnnx  # noqa: E402
from numerics import fresh_seed  # noqa: E402

EPS32 = 2.0**-23
# The oracle: lax's conv at full float32 precision (on a GPU the default may be TF32).
HIGHEST = "highest"


def assert_close(a, b, reduction_length, eps=EPS32):
  """Equal within fp summation error: a few eps * sqrt(terms summed) at the result's magnitude."""
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  assert len(la) == len(lb)
  for u, v in zip(la, lb):
    u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
    assert u.shape == v.shape
    scale = max(float(np.abs(v).max(initial=0.0)), 1.0)
    np.testing.assert_allclose(u, v, rtol=0, atol=32 * eps * math.sqrt(reduction_length) * scale)


def assert_as_close_as_flax(ours, flax32, ref64, reduction_length, seed):
  """ours (float32) within twice flax's own float32 error of a float64 reference, plus
  assert_close's bound: a whole model's gradients and second derivatives cancel
  (LayerNorm, sums of products) and can lose far more than eps at their own
  magnitude, for flax's layers as for ours, so the error of the float32 flax layers on
  the same inputs is the yardstick."""
  lo, lf, lr = jax.tree.leaves(ours), jax.tree.leaves(flax32), jax.tree.leaves(ref64)
  assert len(lo) == len(lf) == len(lr)
  for u, f, r in zip(lo, lf, lr):
    u, f, r = (np.asarray(a, np.float64) for a in (u, f, r))
    assert u.shape == r.shape
    scale = max(float(np.abs(r).max(initial=0.0)), 1.0)
    floor = 32 * EPS32 * math.sqrt(reduction_length) * scale
    err, flax_err = float(np.abs(u - r).max(initial=0.0)), float(np.abs(f - r).max(initial=0.0))
    assert err <= 2 * flax_err + floor, (f"seed {seed}: |ours - f64| = {err:.3g}, flax float32's {flax_err:.3g}, "
                                         f"bound {floor:.3g}")


def _in_float64(make_checks):
  """The results of the checks (name -> thunk) that make_checks() builds, both with
  x64 on, so that operands and tangents are float64."""
  with jax.enable_x64(True):
    return {name: jax.tree.map(np.asarray, check()) for name, check in make_checks().items()}


def _to64(tree):
  return jax.tree.map(lambda a: np.asarray(a, np.float64), tree)


def assert_same_tree(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    assert u.shape == v.shape and u.dtype == v.dtype
    np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


# A ConvNeXt-style block and a 1-D causal stack, as another codebase writes them:
# plain flax.linen.Conv throughout (`conv` is there only for the subclass test).
class Block(linen.Module):
  dim: int
  conv: type = linen.Conv

  @linen.compact
  def __call__(self, x):
    y = self.conv(self.dim, (7, 7), padding=3, feature_group_count=self.dim)(x)  # depthwise
    y = linen.LayerNorm()(y)
    y = self.conv(4 * self.dim, (1, 1))(y)  # dense
    y = self.conv(self.dim, (1, 1))(jax.nn.gelu(y))  # dense
    x = x + y
    x = self.conv(self.dim, (3, 3), feature_group_count=2)(x)  # grouped
    # depthwise with a channel multiplier of 2, strided, circular padding
    return self.conv(2 * self.dim, (3, 3), strides=2, padding="CIRCULAR", feature_group_count=self.dim)(x)


class Causal1D(linen.Module):
  dim: int
  conv: type = linen.Conv

  @linen.compact
  def __call__(self, x):
    y = self.conv(self.dim, (4,), padding="CAUSAL", kernel_dilation=2, feature_group_count=self.dim)(x)
    return self.conv(self.dim, (1,))(jax.nn.silu(y))


LINEN_DEPTHWISE, LINEN_OTHER = 2, 3  # in Block


class NnxBlock(nnx.Module):
  def __init__(self, dim, rngs, conv=nnx.Conv):
    self.dw = conv(dim, dim, (7, 7), padding=3, feature_group_count=dim, rngs=rngs)
    self.norm = nnx.LayerNorm(dim, rngs=rngs)
    self.up = conv(dim, 4 * dim, (1, 1), rngs=rngs)
    self.down = conv(4 * dim, dim, (1, 1), rngs=rngs)
    self.grouped = conv(dim, dim, (3, 3), feature_group_count=2, rngs=rngs)
    self.dw_mult = conv(dim, 2 * dim, (3, 3), strides=2, padding="CIRCULAR", feature_group_count=dim, rngs=rngs)

  def __call__(self, x):
    x = x + self.down(jax.nn.gelu(self.up(self.norm(self.dw(x)))))
    return self.dw_mult(self.grouped(x))


def _counts(fn, *args):
  """(library custom calls in the compiled forward program, XLA convolutions traced)."""
  lowered = jax.jit(fn).lower(*args)
  compiled = lowered.compile().as_text()
  ours = len(re.findall(r'custom_call_target="flashdwc_fwd"', compiled))
  return ours, lowered.as_text().count("stablehlo.convolution")


def _rand(rng, shape, dtype=jnp.float32):
  """U(-1, 1) float32 values (the same for a float64 reference run), as `dtype`."""
  return jnp.asarray(rng.uniform(-1, 1, size=shape).astype(np.float32), dtype)


# Linen


def test_conv_is_flax_conv_with_one_more_field():
  ours = [f.name for f in dataclasses.fields(fnn.Conv)]
  theirs = [f.name for f in dataclasses.fields(linen.Conv)]
  assert [n for n in ours if n != "implementation"] == theirs
  for f, g in zip((f for f in dataclasses.fields(fnn.Conv) if f.name != "implementation"),
                  dataclasses.fields(linen.Conv)):
    assert f.default == g.default or f.default is g.default, f.name
  assert issubclass(fnn.Conv, linen.Conv) and fnn.Conv.__name__ == "Conv"


@pytest.mark.parametrize("model, shape", [(Block(8), (2, 12, 12, 8)), (Causal1D(6), (3, 2, 16, 6))],
                         ids=["block2d", "causal1d_two_batch_dims"])
def test_linen_intercept_and_conv_class_keep_flax_params_and_outputs(model, shape):
  rng = np.random.default_rng(fresh_seed())
  x = _rand(rng, shape)
  params = model.init(jax.random.key(0), x)
  ours_class = model.clone(conv=fnn.Conv)
  assert_same_tree(ours_class.init(jax.random.key(0), x), params)  # checkpoints load both ways
  # Both sides at HIGHEST: on the GPU the dense convs and matmuls that flax runs
  # otherwise take TF32 (about 1e-3), which would swamp the depthwise convs' difference.
  with jax.default_matmul_precision(HIGHEST):
    with fnn.intercept():
      assert_same_tree(model.init(jax.random.key(0), x), params)
      ours = jax.jit(model.apply)(params, x)
    ref = model.apply(params, x)
    assert_close(ours, ref, 1000)
    assert_close(jax.jit(ours_class.apply)(params, x), ref, 1000)
  # the intercept applies to calls traced inside the block only
  assert _counts(model.apply, params, x)[0] == 0


def test_linen_compiled_program_has_custom_calls_for_the_depthwise_convs_only():
  rng = np.random.default_rng(fresh_seed())
  model, x = Block(8), _rand(rng, (2, 12, 12, 8))
  params = model.init(jax.random.key(0), x)
  assert _counts(model.apply, params, x) == (0, LINEN_DEPTHWISE + LINEN_OTHER)
  with fnn.intercept():
    assert _counts(model.apply, params, x) == (LINEN_DEPTHWISE, LINEN_OTHER)
  assert _counts(model.clone(conv=fnn.Conv).apply, params, x) == (LINEN_DEPTHWISE, LINEN_OTHER)
  with fnn.intercept(implementation="xla"):
    assert _counts(model.apply, params, x) == (0, LINEN_DEPTHWISE + LINEN_OTHER)


def _transformations(apply, params, x, rng):
  """name -> f(apply): each transformation of a model function apply(params, x)."""
  loss = lambda p, x: jnp.sum(jnp.sin(apply(p, x)))
  tp = jax.tree.map(lambda a: _rand(rng, a.shape, a.dtype), params)
  tx = _rand(rng, x.shape, x.dtype)
  small = x[:1, :6, :6]
  return {
      "jit": lambda: jax.jit(apply)(params, x),
      "grad": lambda: jax.grad(loss, argnums=(0, 1))(params, x),
      "vmap": lambda: jax.vmap(apply, in_axes=(None, 0))(params, jnp.stack([x, tx])),
      "checkpoint": lambda: jax.grad(jax.checkpoint(loss), argnums=(0, 1))(params, x),
      "jvp": lambda: jax.jvp(apply, (params, x), (tp, tx)),
      "jacfwd": lambda: jax.jacfwd(apply, argnums=1)(params, small),
      "jacrev": lambda: jax.jacrev(apply, argnums=1)(params, small),
      "hessian": lambda: jax.hessian(lambda x: loss(params, x))(small),
      "linearize": lambda: jax.linearize(apply, params, x)[1](tp, tx),
      "grad of grad": lambda: jax.grad(lambda p: sum(jnp.sum(g**2) for g in jax.tree.leaves(
          jax.grad(loss, argnums=1)(p, x))))(params),
  }


def test_linen_every_transformation_matches_flax():
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  model, x = Block(4), _rand(rng, (2, 8, 8, 4))
  params = model.init(jax.random.key(0), x)
  with jax.default_matmul_precision(HIGHEST):
    checks = _transformations(model.apply, params, x, np.random.default_rng(seed + 1))
    refs = {name: check() for name, check in checks.items()}
    refs64 = _in_float64(lambda: _transformations(model.apply, _to64(params), _to64(x),
                                                  np.random.default_rng(seed + 1)))
    with fnn.intercept():
      for name, check in checks.items():
        assert_as_close_as_flax(jax.jit(check)(), refs[name], refs64[name], 1000, f"{seed} {name}")
      ours_grad = jax.grad(lambda p: jnp.sum(model.apply(p, x)))
      compiled = jax.jit(ours_grad).lower(params).compile().as_text()
  for target in ("flashdwc_fwd", "flashdwc_bwd_filter"):
    assert f'custom_call_target="{target}"' in compiled


@pytest.mark.parametrize("config, shape", [
    (dict(features=6, kernel_size=(3,), strides=None, kernel_dilation=None, feature_group_count=6), (2, 11, 6)),
    (dict(features=12, kernel_size=(np.int64(3), np.int32(5)), strides=(np.int32(2), 1), padding="CIRCULAR",
          feature_group_count=np.int16(4)), (2, 9, 10, 4)),
    (dict(features=4, kernel_size=(3, 3), padding=((np.int8(-1), 2), (0, -1)), feature_group_count=4),
     (2, 9, 10, 4)),
    (dict(features=4, kernel_size=(5,), padding="CAUSAL", kernel_dilation=3, feature_group_count=4), (13, 4)),
    (dict(features=4, kernel_size=(3, 3), feature_group_count=4), (0, 5, 5, 4)),
])
def test_conv_arguments_as_flax(config, shape):
  rng = np.random.default_rng(fresh_seed())
  x = _rand(rng, shape)
  ours, theirs = fnn.Conv(**config), linen.Conv(**config)
  params = theirs.init(jax.random.key(0), x)
  assert_same_tree(ours.init(jax.random.key(0), x), params)
  with jax.default_matmul_precision(HIGHEST):
    ref = theirs.apply(params, x)
  out = jax.jit(ours.apply)(params, x)
  assert out.shape == ref.shape
  assert_close(out, ref, 100)
  if math.prod(shape):
    assert "flashdwc_dwconv_fwd" in str(jax.make_jaxpr(ours.apply)(params, x))


def test_float64_runs_xla_and_is_refused_when_forced():
  rng = np.random.default_rng(fresh_seed())
  with jax.enable_x64(True):
    x = _rand(rng, (2, 7, 7, 3), jnp.float64)
    config = dict(features=3, kernel_size=(3, 3), feature_group_count=3, param_dtype=jnp.float64)
    params = linen.Conv(**config).init(jax.random.key(0), x)
    out = fnn.Conv(**config).apply(params, x)
    assert out.dtype == jnp.float64
    assert_close(out, linen.Conv(**config, precision="highest").apply(params, x), 9, eps=2.0**-52)
    with pytest.raises(TypeError, match="implementation='flashdwc' has .*kernels for float32.*got lhs float64"):
      fnn.Conv(**config, implementation="flashdwc").apply(params, x)


def test_bfloat16_layer_is_within_bfloat16_rounding():
  rng = np.random.default_rng(fresh_seed())
  x = _rand(rng, (2, 9, 9, 8), jnp.bfloat16)
  config = dict(features=8, kernel_size=(3, 3), feature_group_count=8, dtype=jnp.bfloat16)
  params = linen.Conv(**config).init(jax.random.key(0), x)
  out = jax.jit(fnn.Conv(**config).apply)(params, x)
  ref = linen.Conv(features=8, kernel_size=(3, 3), feature_group_count=8, precision="highest").apply(
      params, x.astype(jnp.float32))
  assert out.dtype == jnp.bfloat16
  # x's and the result's rounding to bfloat16 (the kernel rounds the kernel and bias too)
  assert_close(out, ref, 9, eps=2.0**-7)


# nnx


def _nnx_apply(model):
  graphdef, state = nnx.split(model)
  return (lambda state, x: nnx.merge(graphdef, state)(x)), state


def test_nnx_conv_signature_and_params_are_flax():
  ours, theirs = inspect.signature(fnnx.Conv.__init__), inspect.signature(nnx.Conv.__init__)
  assert [p for p in ours.parameters if p != "implementation"] == list(theirs.parameters)
  for name, p in theirs.parameters.items():
    if name != "conv_general_dilated":
      assert ours.parameters[name].default is p.default or ours.parameters[name].default == p.default, name
  a = fnnx.Conv(4, 8, (3,), feature_group_count=4, padding="CAUSAL", rngs=nnx.Rngs(0))
  b = nnx.Conv(4, 8, (3,), feature_group_count=4, padding="CAUSAL", rngs=nnx.Rngs(0))
  assert_same_tree(nnx.state(a, nnx.Param), nnx.state(b, nnx.Param))
  x = _rand(np.random.default_rng(fresh_seed()), (2, 10, 4))
  with jax.default_matmul_precision(HIGHEST):
    assert_close(a(x), b(x), 10)
  with pytest.raises(ValueError, match="give either implementation or conv_general_dilated"):
    fnnx.Conv(4, 4, (3,), implementation="xla", conv_general_dilated=jax.lax.conv_general_dilated,
              rngs=nnx.Rngs(0))


def test_nnx_swap_keeps_state_and_routes_depthwise_convs_only():
  rng = np.random.default_rng(fresh_seed())
  x = _rand(rng, (2, 12, 12, 8))
  plain = NnxBlock(8, nnx.Rngs(0))
  classy = NnxBlock(8, nnx.Rngs(0), conv=fnnx.Conv)
  swapped = fnnx.swap(NnxBlock(8, nnx.Rngs(0)))
  state = nnx.state(plain)
  assert_same_tree(nnx.state(swapped), state)
  assert_same_tree(nnx.state(classy), state)
  with jax.default_matmul_precision(HIGHEST):  # both sides: see the linen test above
    ref = plain(x)
    for model in (swapped, classy):
      apply, st = _nnx_apply(model)
      assert_close(jax.jit(apply)(st, x), ref, 1000)
      assert _counts(apply, st, x) == (2, 3)
    apply, st = _nnx_apply(plain)
    assert _counts(apply, st, x) == (0, 5)
    with fnnx.intercept(plain):
      apply, st = _nnx_apply(plain)
      assert _counts(apply, st, x) == (2, 3)
      assert_close(nnx.jit(lambda m, x: m(x))(plain, x), ref, 1000)
  apply, st = _nnx_apply(plain)
  assert _counts(apply, st, x) == (0, 5)  # restored on exit


def test_nnx_every_transformation_matches_flax():
  rng = np.random.default_rng(fresh_seed())
  x = _rand(rng, (2, 8, 8, 4))
  ref_apply, state = _nnx_apply(NnxBlock(4, nnx.Rngs(0)))
  ours_apply, ours_state = _nnx_apply(fnnx.swap(NnxBlock(4, nnx.Rngs(0))))
  assert_same_tree(ours_state, state)
  with jax.default_matmul_precision(HIGHEST):
    seed = fresh_seed()
    refs = {n: c() for n, c in _transformations(ref_apply, state, x, np.random.default_rng(seed)).items()}
    refs64 = _in_float64(lambda: _transformations(ref_apply, _to64(state), _to64(x), np.random.default_rng(seed)))
    for name, check in _transformations(ours_apply, state, x, np.random.default_rng(seed)).items():
      assert_as_close_as_flax(jax.jit(check)(), refs[name], refs64[name], 1000, f"{seed} {name}")


def test_docs_drop_in_examples_run_and_route_the_depthwise_convs():
  """docs/drop-in.md's code blocks run as written (at a smaller size), with the kernels."""
  path = os.path.join(os.path.dirname(__file__), "..", "docs", "drop-in.md")
  with open(path) as f:
    blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
  assert len(blocks) == 4
  namespace = {"__name__": "drop_in_doc"}
  with jax.default_matmul_precision(HIGHEST):  # both sides: see the linen test above
    for block in blocks:
      # 64 channels on 28x28 maps in the doc; 8 on 10x10 here
      exec(block.replace("64", "8").replace("(8, 28, 28, 8)", "(2, 10, 10, 8)"), namespace)
    model, variables, x = namespace["model"], namespace["variables"], namespace["x"]
    assert_close(namespace["y"], namespace["block"].__class__(8, nnx.Rngs(0))(x), 1000)
  with fnn.intercept():
    assert _counts(model.apply, variables, x) == (1, 2)
  assert namespace["grads"].keys() == variables.keys()
