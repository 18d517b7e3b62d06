"""NaN and Inf in the input or the kernel reach the same outputs as in the oracle.

Two documented exceptions (README, "differs from XLA"): a non-finite kernel tap over
zero padding (XLA computes 0 * Inf = NaN there; these kernels skip padding taps),
and, in the fp16/bf16 tensor-core forward kernel (GPU, stride 1, KW >= 5 as the
dispatcher picks it), a non-finite input also reaches outputs up to 15 columns away
(0 * Inf in the banded filter matrix), 15 x the dilation when a dilated problem runs
it on sub-grids. The tests avoid the first and check the second as a bound.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numerics import fresh_seed, oracle, pair, uniform
from shapes import ConvCase

from jax_flashdwc import _dilation, _ffi, depthwise_conv2d
from jax_flashdwc._geometry import make_geometry

CASES = [
    ConvCase("k3", 2, 12, 20, 16, 3, 3),
    ConvCase("k7", 1, 16, 40, 16, 7, 7),
    ConvCase("k5_w40_c64", 1, 12, 40, 64, 5, 5),  # bf16 on the GPU: the register-filter kernel, exact
    ConvCase("k13_s2", 1, 20, 30, 8, 13, 13, strides=2),
    ConvCase("k9_d2", 1, 21, 25, 8, 9, 9, dilation=2),
    ConvCase("k11", 1, 14, 40, 8, 11, 11),  # fp32 on the GPU: the lane filter gradient (TM 11)
]
DTYPES = [pytest.param(jnp.float32, id="F32"), pytest.param(jnp.bfloat16, id="BF16")]


def _tensor_core_reach(case, dtype, device):
  """How many columns beyond the oracle's a non-finite input may reach: 0 where the
  forward is exact, 15 on the fp16/bf16 tensor-core kernel, 15 x the dilation where a
  dilated stride-1 problem runs that kernel on its sub-grids (jax_flashdwc/_dilation.py,
  whose columns are `dilation` image columns apart); 0 where it runs in place (the
  CUDA-core register-filter kernel)."""
  if device.platform != "gpu" or dtype == jnp.float32:
    return 0
  sh, sw = pair(case.strides)
  dh, dw = pair(case.dilation)
  x_spec = jax.ShapeDtypeStruct(case.x_shape, dtype)
  geometry = make_geometry(x_spec, jax.ShapeDtypeStruct(case.kernel_shape, dtype), case.strides, case.padding,
                           case.dilation)
  in_place = _dilation.in_place(case.x_shape, dtype, (case.kh, case.kw), geometry)
  if _dilation.applies(geometry, prologue=False) and not in_place:
    # The undilated problem on the sub-grids _dilation.py makes, `dw` image columns apart.
    sub = jax.eval_shape(lambda x: _dilation.to_subgrids(x, geometry)[0], x_spec)
    in_w, reach, dh, dw = sub.shape[2], 15 * dw, 1, 1
  else:
    in_w, reach = case.w, 15
  problem = dict(channels=case.c, in_w=in_w, out_w=in_w, in_h=64, out_h=64, kernel_w=case.kw,
                 kernel_h=case.kh, stride_w=sw, stride_h=sh, dilation_w=dw, dilation_h=dh)
  return reach if _ffi._jax_flashdwc.plan_fwd(problem, half_precision=True) == "mma" else 0


def _check(out, ref, reach, case):
  out = np.asarray(jnp.asarray(out, jnp.float32))
  ref = np.asarray(ref, np.float32)
  bad_ref, bad_out = ~np.isfinite(ref), ~np.isfinite(out)
  assert bad_ref.any(), "the test must put a non-finite value where an output reads it"
  # Every output the oracle makes non-finite is non-finite here too.
  assert bad_out[bad_ref].all(), f"{case.name}: non-finite oracle outputs came out finite"
  np.testing.assert_array_equal(np.isposinf(out[bad_ref & np.isinf(out)]), np.isposinf(ref[bad_ref & np.isinf(out)]))
  if not reach:
    np.testing.assert_array_equal(bad_out, bad_ref, err_msg=f"{case.name}: extra non-finite outputs")
  else:
    # Extra non-finite outputs stay within `reach` columns of one the oracle has, in the same row.
    rows, cols = np.nonzero(bad_out.any(axis=-1).reshape(-1, out.shape[2]))
    ref_rows = bad_ref.any(axis=-1).reshape(-1, out.shape[2])
    for r, c in zip(rows, cols):
      lo, hi = max(0, c - reach), c + reach + 1
      assert ref_rows[r, lo:hi].any(), f"{case.name}: non-finite output at row {r} col {c} far from any in the oracle"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_nonfinite_input_propagates(case, dtype, value, device):
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x = np.array(uniform(rng, case.x_shape, dtype))
  w = np.array(uniform(rng, case.kernel_shape, dtype))
  x[0, case.h // 2, case.w // 3, 1] = value
  x[-1, 1, case.w - 2, case.c - 1] = value
  put = lambda a: jax.device_put(jnp.asarray(a, dtype), device)
  out = jax.jit(lambda x, w: depthwise_conv2d(x, w, implementation="flashdwc", **case.conv_kwargs()))(put(x), put(w))
  _check(out, oracle(x, w, case), _tensor_core_reach(case, dtype, device), case)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_nonfinite_kernel_tap_propagates(case, dtype, device):
  # VALID padding: every tap of every output reads the image, so skipping padding
  # taps cannot hide the value.
  case = ConvCase(case.name + "_valid", case.n, case.h, case.w, case.c, case.kh, case.kw, strides=case.strides,
                  padding="VALID", dilation=case.dilation)
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x = np.array(uniform(rng, case.x_shape, dtype))
  w = np.array(uniform(rng, case.kernel_shape, dtype))
  w[case.kh // 2, case.kw - 1, 0, 3] = np.nan
  w[0, 0, 0, 5] = np.inf
  put = lambda a: jax.device_put(jnp.asarray(a, dtype), device)
  out = jax.jit(lambda x, w: depthwise_conv2d(x, w, implementation="flashdwc", **case.conv_kwargs()))(put(x), put(w))
  ref = np.asarray(oracle(x, w, case))
  out = np.asarray(jnp.asarray(out, jnp.float32))
  # Channels 3 and 5 are non-finite everywhere in both; the others are finite in both.
  np.testing.assert_array_equal(~np.isfinite(out), ~np.isfinite(ref), err_msg=f"seed {seed}")
