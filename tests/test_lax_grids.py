"""The depthwise cases of JAX's own convolution test grids, against lax.

Re-created from the parameters of three of JAX's test grids (tests/lax_test.py,
lax_autodiff_test.py, lax_vmap_test.py), keeping the cases that are depthwise
(feature_group_count equal to the input channels, so the grids' i = 1 rows; any
channel multiplier j), and run through `jax_flashdwc.lax_conv.conv_general_dilated`:

- testConvWithGeneralPadding: lhs (b, 9, 10, 1), rhs (4, 5, 1, j), b, j in 1..3;
  strides (1,1), (1,2), (2,1); padding ((0,0),(0,0)), ((1,2),(2,0)); lhs and rhs
  dilation (1,1), (1,2), (2,2); bfloat16, float16, float32, float64. Forward
  against lax at HIGHEST on the same inputs.
- testConvGeneralDilatedGrad: feature_group_count 1 or 2 (C = 1 or 2), lhs
  (b, 6, 7, C) and the zero-size (b, 0, 4, C), rhs (1, 2, 1, j * C), b, j in 1..2;
  strides as above; padding ((0,0),(0,0)), ((1,0),(0,1)), and the negative
  ((0,-1),(0,0)) where H > 0; lhs dilation (1,1), (2,1); rhs dilation (1,1),
  (2,2); float32, float64, bfloat16 (JAX skips float16 there). `check_grads`
  order 2 in fwd and rev modes with JAX's tolerances and eps=1 (the op is
  bilinear), and the jvp and vjp against lax's.
- testConvGeneralDilatedBatching: the same shapes (H > 0), paddings and
  dilations, lhs and rhs batch dimensions None or 0..4 (not both None), batch
  sizes 0..4; float32; vmap against one lax call per batch element.

JAX runs each grid in several layouts; the kernels take the channels-last one
(NHWC, HWIO), flax's, so every case is re-created there (other layouts run lax
unchanged, tested in test_lax_conv.py). Cases with input dilation (lhs_dilation
!= 1) or float64 run XLA's conv by design: those check the routing and lax's
result; all others check that the library's kernels ran. Each 2-D case of the
gradient grid also runs as its 1-D (W-only) counterpart on rank-3 operands.

The full products (1944, 1440 and 50400 cases) take too long on a small CPU, so
each grid is sampled deterministically (random.Random with a fixed seed; every
parameter value is represented), mostly among the cases the kernels run: 230
forward cases (170 on the kernels), 90 gradient cases (60), each in rank 4 and
rank 3, and 120 batching cases (90), two to three minutes on two cores. Set
FLASHDWC_FULL_GRIDS=1 to run the full products.
"""

from __future__ import annotations

import itertools
import os
import random
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.test_util import check_grads

from jax_flashdwc.lax_conv import conv_general_dilated, takes
from numerics import assert_close, fresh_seed

FULL = os.environ.get("FLASHDWC_FULL_GRIDS") == "1"
HIGHEST = lax.Precision.HIGHEST
DN = {3: ("NWC", "WIO", "NWC"), 4: ("NHWC", "HWIO", "NHWC")}
KERNEL_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))


def _sample(cases, n, seed):
  """n cases, always the same ones (all of them under FLASHDWC_FULL_GRIDS=1)."""
  cases = list(cases)
  return cases if FULL or n >= len(cases) else random.Random(seed).sample(cases, n)


def _sample_kernel_cases(cases, n_kernel, n_other, seed):
  """Mostly cases the kernels run (the others run lax's conv and only check routing)."""
  on = [c for c in cases if _expect_kernels(c.get("dtype", "float32"), c["lhs_dil"])]
  off = [c for c in cases if not _expect_kernels(c.get("dtype", "float32"), c["lhs_dil"])]
  return _sample(on, n_kernel, seed) + _sample(off, n_other, seed + 100)


def _id(case):
  return "-".join(str(v).replace(" ", "") for v in case.values())


def _rand(rng, shape, dtype):
  return jnp.asarray(rng.uniform(-1, 1, size=shape).astype(np.float32)).astype(dtype)


def _runs_kernels(fn, *args):
  return "flashdwc_dwconv" in str(jax.make_jaxpr(fn)(*args))


def _expect_kernels(dtype, lhs_dil):
  return jnp.dtype(dtype) in KERNEL_DTYPES and all(d == 1 for d in lhs_dil)


def _check_forward(conv, ref_conv, x, w, reduction_length, dtype):
  """Our result against lax's at HIGHEST, on the same inputs, in float32 (or float64)."""
  out = conv(x, w)
  if jnp.dtype(dtype) == jnp.float64:
    ref = ref_conv(x, w)
    np.testing.assert_allclose(out, ref, rtol=0, atol=16 * 2.0**-52 * np.sqrt(reduction_length)
                               * max(float(jnp.abs(ref).max(initial=0)), 1.0))
    return
  x32, w32 = x.astype(jnp.float32), w.astype(jnp.float32)
  ref, mag = ref_conv(x32, w32), ref_conv(jnp.abs(x32), jnp.abs(w32))
  assert out.dtype == x.dtype
  assert_close(out, ref, mag, reduction_length, dtype)


# lax_test.py: testConvWithGeneralPadding

FORWARD_GRID = [
    dict(b=b, j=j, strides=s, padding=p, lhs_dil=ld, rhs_dil=rd, dtype=dt)
    for b, j in itertools.product([1, 2, 3], repeat=2)
    for s in [(1, 1), (1, 2), (2, 1)]
    for p in [((0, 0), (0, 0)), ((1, 2), (2, 0))]
    for ld in [(1, 1), (1, 2), (2, 2)]
    for rd in [(1, 1), (1, 2), (2, 2)]
    for dt in ["bfloat16", "float16", "float32", "float64"]
]


@pytest.mark.parametrize("case", _sample_kernel_cases(FORWARD_GRID, 170, 60, 1), ids=_id)
def test_lax_test_conv_with_general_padding(case):
  rng = np.random.default_rng(seed := fresh_seed())
  dtype = jnp.dtype(case["dtype"])
  kwargs = dict(window_strides=case["strides"], padding=case["padding"], lhs_dilation=case["lhs_dil"],
                rhs_dilation=case["rhs_dil"], dimension_numbers=DN[4], feature_group_count=1)
  with jax.enable_x64(dtype == jnp.float64):
    x, w = _rand(rng, (case["b"], 9, 10, 1), dtype), _rand(rng, (4, 5, 1, case["j"]), dtype)
    conv = partial(conv_general_dilated, **kwargs)
    assert _runs_kernels(conv, x, w) == _expect_kernels(dtype, case["lhs_dil"]), seed
    _check_forward(conv, partial(lax.conv_general_dilated, precision=HIGHEST, **kwargs), x, w, 20, dtype)


# lax_autodiff_test.py: testConvGeneralDilatedGrad

GRAD_GRID = [
    dict(c=c, b=b, j=j, h=h, w=w, strides=s, padding=p, lhs_dil=ld, rhs_dil=rd, dtype=dt)
    for c in [1, 2]
    for b, j in itertools.product([1, 2], repeat=2)
    for h, w in [(6, 7), (0, 4)]
    for s in [(1, 1), (1, 2), (2, 1)]
    for rd in [(1, 1), (2, 2)]
    for ld in [(1, 1), (2, 1)]
    for p in [((0, 0), (0, 0)), ((1, 0), (0, 1))] + ([((0, -1), (0, 0))] if h else [])
    for dt in ["float32", "float64", "bfloat16"]
]
# JAX's tolerances for this grid (float64: check_grads' default).
GRAD_TOL = {"bfloat16": 1.0, "float32": 1e-3, "float64": None}


def _one_d(case):
  """The W-only counterpart of a 2-D case: (strides, padding, lhs_dil, rhs_dil) of rank 3."""
  return tuple((v[1],) for v in (case["strides"], case["lhs_dil"], case["rhs_dil"])), (case["padding"][1],)


@pytest.mark.parametrize("case", _sample_kernel_cases(GRAD_GRID, 60, 30, 2), ids=_id)
@pytest.mark.parametrize("rank", [4, 3])
def test_lax_autodiff_test_conv_general_dilated_grad(case, rank):
  rng = np.random.default_rng(seed := fresh_seed())
  dtype = jnp.dtype(case["dtype"])
  c = case["c"]
  if rank == 4:
    x_shape, w_shape = (case["b"], case["h"], case["w"], c), (1, 2, 1, case["j"] * c)
    strides, lhs_dil, rhs_dil, padding = case["strides"], case["lhs_dil"], case["rhs_dil"], case["padding"]
  else:
    x_shape, w_shape = (case["b"], case["w"], c), (2, 1, case["j"] * c)
    (strides, lhs_dil, rhs_dil), padding = _one_d(case)
  kwargs = dict(window_strides=strides, padding=padding, lhs_dilation=lhs_dil, rhs_dilation=rhs_dil,
                dimension_numbers=DN[rank], feature_group_count=c, precision=HIGHEST)
  with jax.enable_x64(dtype == jnp.float64):
    x, w = _rand(rng, x_shape, dtype), _rand(rng, w_shape, dtype)
    conv = partial(conv_general_dilated, **kwargs)
    ref_conv = partial(lax.conv_general_dilated, **kwargs)
    assert _runs_kernels(conv, x, w) == _expect_kernels(dtype, lhs_dil), seed
    tol = GRAD_TOL[case["dtype"]]
    # check_grads_bilinear of JAX's test: one operand at a time, eps=1
    check_grads(lambda x: conv(x, w), (x,), 2, modes=["fwd", "rev"], atol=tol, rtol=tol, eps=1.)
    check_grads(lambda w: conv(x, w), (w,), 2, modes=["fwd", "rev"], atol=tol, rtol=tol, eps=1.)
    if dtype == jnp.bfloat16:
      return  # bfloat16 derivatives: check_grads at JAX's tolerance only
    # and the derivatives themselves against lax's
    tx, tw = _rand(rng, x_shape, dtype), _rand(rng, w_shape, dtype)
    out, tangent = jax.jvp(conv, (x, w), (tx, tw))
    ref_out, ref_tangent = jax.jvp(ref_conv, (x, w), (tx, tw))
    ct = _rand(rng, out.shape, dtype)
    grads, ref_grads = jax.vjp(conv, x, w)[1](ct), jax.vjp(ref_conv, x, w)[1](ct)
    eps = 2.0**-52 if dtype == jnp.float64 else 2.0**-23
    # the longest sum is the filter gradient's, over N * Ho * Wo
    k = max(out.size // max(out.shape[-1], 1), 2)
    for a, r in zip((out, tangent, *grads), (ref_out, ref_tangent, *ref_grads)):
      assert a.shape == r.shape and a.dtype == r.dtype
      scale = max(float(jnp.abs(r).max(initial=0)), 1.0)
      np.testing.assert_allclose(a, r, rtol=0, atol=16 * eps * np.sqrt(k) * scale, err_msg=f"seed={seed}")


# lax_vmap_test.py: testConvGeneralDilatedBatching

BATCH_GRID = [
    dict(c=c, b=b, j=j, lhs_bdim=lb, rhs_bdim=rb, strides=s, padding=p, lhs_dil=ld, rhs_dil=rd, size=n)
    for c in [1, 2]
    for b, j in itertools.product([1, 2], repeat=2)
    for lb in [None, 0, 1, 2, 3, 4]
    for rb in [None, 0, 1, 2, 3, 4]
    if (lb, rb) != (None, None)
    for s in [(1, 1), (1, 2), (2, 1)]
    for p in [((0, 0), (0, 0)), ((1, 0), (0, 1)), ((0, -1), (0, 0))]
    for ld in [(1, 1), (2, 1)]
    for rd in [(1, 1), (2, 2)]
    for n in range(5)
]


def _batched(rng, shape, bdim, size):
  if bdim is None:
    return _rand(rng, shape, jnp.float32)
  return _rand(rng, (*shape[:bdim], size, *shape[bdim:]), jnp.float32)


def _take(a, bdim, i):
  return a if bdim is None else jnp.take(a, i, axis=bdim)


@pytest.mark.parametrize("case", _sample_kernel_cases(BATCH_GRID, 90, 30, 3), ids=_id)
def test_lax_vmap_test_conv_general_dilated_batching(case):
  rng = np.random.default_rng(seed := fresh_seed())
  c, size, lb, rb = case["c"], case["size"], case["lhs_bdim"], case["rhs_bdim"]
  x = _batched(rng, (case["b"], 6, 7, c), lb, size)
  w = _batched(rng, (1, 2, 1, case["j"] * c), rb, size)
  kwargs = dict(window_strides=case["strides"], padding=case["padding"], lhs_dilation=case["lhs_dil"],
                rhs_dilation=case["rhs_dil"], dimension_numbers=DN[4], feature_group_count=c,
                precision=HIGHEST)
  conv = jax.vmap(partial(conv_general_dilated, **kwargs), in_axes=(lb, rb))
  ref_conv = partial(lax.conv_general_dilated, **kwargs)
  # a vmap over zero elements has nothing to compute: no call at all
  assert _runs_kernels(conv, x, w) == (size > 0 and _expect_kernels(jnp.float32, case["lhs_dil"])), seed
  out = jax.jit(conv)(x, w)
  if size == 0:
    unbatched = lambda a, d: jax.ShapeDtypeStruct(a.shape if d is None else (*a.shape[:d], *a.shape[d + 1:]),
                                                  a.dtype)
    assert out.shape == (0, *jax.eval_shape(ref_conv, unbatched(x, lb), unbatched(w, rb)).shape)
    return
  for i in range(size):
    xi, wi = _take(x, lb, i), _take(w, rb, i)
    ref, mag = ref_conv(xi, wi), ref_conv(jnp.abs(xi), jnp.abs(wi))
    assert_close(out[i], ref, mag, 2, jnp.float32, what=f"batch element {i}", seed=seed)
