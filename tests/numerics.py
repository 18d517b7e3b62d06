"""Random inputs, the fp32 oracle and the tolerance rules of the numerical tests."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


CPU = jax.devices("cpu")[0]
EPS = {jnp.dtype(jnp.float32): 2.0**-23, jnp.dtype(jnp.float16): 2.0**-10,
       jnp.dtype(jnp.bfloat16): 2.0**-7}


def fresh_seed() -> int:
  """A new seed every call; tests print it so a failure can be replayed."""
  return int.from_bytes(os.urandom(4), "little")


def uniform(rng: np.random.Generator, shape, dtype) -> np.ndarray:
  """U(-1, 1) values, rounded to `dtype` and returned as float32."""
  a = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
  return np.asarray(jnp.asarray(a, dtype).astype(jnp.float32))


def xla_conv(x, w, case, precision=lax.Precision.HIGHEST):
  """lax.conv_general_dilated with one group per channel: the oracle.

  With the default precision this is the fp32 oracle; with precision=None and
  float16/bfloat16 inputs it is XLA's own result in that dtype.
  """
  return lax.conv_general_dilated(
      x, w, window_strides=pair(case.strides), padding=_padding(case.padding),
      rhs_dilation=pair(case.dilation), dimension_numbers=("NHWC", "HWIO", "NHWC"),
      feature_group_count=x.shape[-1], precision=precision)


def oracle(x, w, case, precision=lax.Precision.HIGHEST):
  """xla_conv computed on the CPU."""
  return xla_conv(jax.device_put(x, CPU), jax.device_put(w, CPU), case, precision)


def pair(v):
  return (v, v) if isinstance(v, int) else tuple(v)


def _padding(p):
  if isinstance(p, str):
    return p
  if isinstance(p, int):
    return ((p, p), (p, p))
  return tuple((d, d) if isinstance(d, int) else tuple(d) for d in p)


def all_passes(fn, x, w, dy):
  """(y, dx, dw) of fn at (x, w) with output cotangent dy."""
  y, vjp = jax.vjp(fn, x, w)
  dx, dw = vjp(dy.astype(y.dtype))
  return y, dx, dw


def assert_close(out, ref, mag, reduction_length, dtype, xla_out=None, what="", seed=None):
  """Checks a kernel result against the fp32 oracle.

  out: the kernel's result; ref: the oracle in fp32 on the same (rounded) inputs;
  mag: the oracle applied to |inputs|, which bounds the sum of |terms| per element;
  reduction_length: how many products each element sums. The kernel accumulates in
  fp32 and rounds once to `dtype`, so each element may be off by half an ulp of
  `dtype` plus fp32 summation error (bounded by a few eps * sqrt(K) * mag). For
  float16/bfloat16, the largest error must also be at most twice XLA's own error in
  the same dtype (`xla_out`), with a floor of one ulp at the output's magnitude.
  """
  out = np.asarray(jnp.asarray(out).astype(jnp.float32), dtype=np.float64)
  ref = np.asarray(ref, dtype=np.float64)
  mag = np.asarray(mag, dtype=np.float64)
  msg = f"{what} dtype={jnp.dtype(dtype)} seed={seed}"
  assert out.shape == ref.shape, msg
  assert np.isfinite(out).all(), f"{msg}: non-finite (unwritten?) elements at " \
                                 f"{np.argwhere(~np.isfinite(out))[:5].tolist()}"
  eps = EPS[jnp.dtype(dtype)]
  # Half an ulp of rounding to dtype is at most eps*|ref|, or one subnormal step near zero.
  rounding = np.maximum(eps * np.abs(ref), float(jnp.finfo(dtype).smallest_subnormal))
  tol = rounding + 8 * EPS[jnp.dtype(jnp.float32)] * np.sqrt(reduction_length) * mag
  err = np.abs(out - ref)
  worst = np.unravel_index(np.argmax(err / tol), err.shape)
  assert (err <= tol).all(), (f"{msg}: |out - ref| = {err[worst]:.3g} > tol {tol[worst]:.3g} "
                              f"at {tuple(int(i) for i in worst)}")
  if xla_out is not None:
    xla = np.asarray(jnp.asarray(xla_out).astype(jnp.float32), dtype=np.float64)
    xla_err = np.abs(xla - ref).max()
    floor = eps * np.abs(ref).max()
    assert err.max() <= 2 * xla_err + floor, (
        f"{msg}: max error {err.max():.3g} exceeds twice XLA's {xla_err:.3g} (+ floor {floor:.3g})")
