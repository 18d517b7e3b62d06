"""Checks every kernel on this machine's default device against XLA's convolution.

  python -m jax_flashdwc.selftest

Runs the forward pass, the input gradient and the filter gradient (also in its
deterministic mode, which must repeat bit for bit), and the forward pass with its
fused prologue and epilogue (relu(x * scale + shift) in, gelu(y + bias) out), in float32,
float16 and bfloat16, on a few problems that reach every kernel (tiled and direct,
strides 1 to 3, dilation, odd channel counts), each against lax.conv_general_dilated
at HIGHEST precision in float32. Prints one line per check and exits with status 1
if any fails. Takes a few seconds.
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _ffi
from .conv import depthwise_conv2d

# (name, x shape, kernel (KH, KW), strides, padding, dilation)
PROBLEMS = [
    ("k3 stride 1", (2, 40, 70, 64), (3, 3), 1, "SAME", 1),
    ("k7 stride 1", (2, 20, 23, 64), (7, 7), 1, "SAME", 1),
    ("k31 stride 1, C=33", (1, 35, 33, 33), (31, 31), 1, "SAME", 1),
    ("k3 stride 2", (2, 17, 16, 48), (3, 3), 2, "SAME", 1),
    ("51x5 stride 1", (1, 30, 12, 8), (51, 5), 1, "SAME", 1),
    ("k5 stride 3, dilation 2", (1, 19, 21, 6), (5, 5), 3, ((2, 1), (0, 3)), 2),
]
DTYPES = (jnp.float32, jnp.float16, jnp.bfloat16)
# The deterministic filter gradient must also repeat bit for bit.
PASSES = ("fwd", "bwd_data", "bwd_filter", "bwd_filter deterministic", "fwd fused")
EPS = {jnp.dtype(jnp.float32): 2.0**-23, jnp.dtype(jnp.float16): 2.0**-10, jnp.dtype(jnp.bfloat16): 2.0**-7}


def _conv(x, w, strides, padding, dilation, precision):
  return lax.conv_general_dilated(x, w, (strides,) * 2, padding, rhs_dilation=(dilation,) * 2,
                                  dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                  feature_group_count=x.shape[-1], precision=precision)


def _passes(fn, x, w, dy):
  y, vjp = jax.vjp(fn, x, w)
  return (y, *vjp(dy.astype(y.dtype)))


def check(problem, dtype, rng) -> list[tuple[str, float, bool]]:
  """[(pass, worst error / tolerance, ok)] for one problem in one dtype."""
  _, x_shape, (kh, kw), strides, padding, dilation = problem
  c = x_shape[-1]
  x = jnp.asarray(rng.uniform(-1, 1, x_shape), dtype)
  w = jnp.asarray(rng.uniform(-1, 1, (kh, kw, 1, c)), dtype)
  ref_fn = lambda x, w: _conv(x, w, strides, padding, dilation, lax.Precision.HIGHEST)
  y_shape = jax.eval_shape(ref_fn, x.astype(jnp.float32), w.astype(jnp.float32)).shape
  dy = jnp.asarray(rng.uniform(-1, 1, y_shape), dtype)
  def ours_fn(deterministic):
    return jax.jit(lambda x, w, dy: _passes(
        lambda x, w: depthwise_conv2d(x, w, strides=strides, padding=padding, kernel_dilation=dilation,
                                      deterministic=deterministic), x, w, dy))

  ours = ours_fn(False)(x, w, dy)
  deterministic_dw = [ours_fn(True)(x, w, dy)[2] for _ in range(2)]
  scale = jnp.asarray(rng.uniform(0.5, 1.5, c), jnp.float32)
  shift = jnp.asarray(rng.uniform(-0.5, 0.5, c), jnp.float32)
  bias = jnp.asarray(rng.uniform(-1, 1, c), dtype)
  fused = jax.jit(lambda x, w: depthwise_conv2d(
      x, w, strides=strides, padding=padding, kernel_dilation=dilation, bias=bias, activation="gelu",
      input_scale=scale, input_shift=shift, input_activation="relu"))(x, w)
  ours = (*ours, deterministic_dw[0], fused)
  f32 = lambda a: a.astype(jnp.float32)
  refs = _passes(ref_fn, f32(x), f32(w), f32(dy))
  mags = _passes(ref_fn, jnp.abs(f32(x)), jnp.abs(f32(w)), jnp.abs(f32(dy)))
  x_prime = jax.nn.relu(f32(x) * scale + shift)
  fused_ref = jax.nn.gelu(ref_fn(x_prime, f32(w)) + f32(bias), approximate=False)
  # gelu's slope is at most 1.13.
  fused_mag = 1.13 * (ref_fn(x_prime, jnp.abs(f32(w))) + jnp.abs(f32(bias)))
  refs, mags = (*refs, refs[2], fused_ref), (*mags, mags[2], fused_mag)
  lengths = (kh * kw, kh * kw, y_shape[0] * y_shape[1] * y_shape[2], y_shape[0] * y_shape[1] * y_shape[2],
             kh * kw)
  # The tensor-core kernel rounds x' to dtype: one more rounding of each product.
  extra_rounding = (0, 0, 0, 0, EPS[jnp.dtype(dtype)])
  results = []
  for name, out, ref, mag, k, extra in zip(PASSES, ours, refs, mags, lengths, extra_rounding):
    out, ref, mag = (np.asarray(f32(a), np.float64) for a in (out, ref, mag))
    # One rounding to dtype plus fp32 summation error, as in the test suite.
    tol = np.maximum(EPS[jnp.dtype(dtype)] * np.abs(ref), 1e-7) + (8 * 2.0**-23 * np.sqrt(k) + extra) * mag
    ratio = float(np.max(np.abs(out - ref) / tol)) if np.all(np.isfinite(out)) else float("inf")
    ok = ratio <= 1.0
    if name == "bwd_filter deterministic":
      ok = ok and bool(np.array_equal(np.asarray(deterministic_dw[0]), np.asarray(deterministic_dw[1])))
    results.append((name, ratio, ok))
  return results


def main() -> int:
  device = jax.devices()[0]
  print(f"jax_flashdwc self-test on {device.device_kind} ({device.platform}), jax {jax.__version__}, "
        f"CUDA kernels built: {_ffi.cuda_available()}")
  _ffi.set_poison_outputs(True)  # an element a kernel fails to write reads as NaN
  rng = np.random.default_rng()
  failures = 0
  start = time.perf_counter()
  for problem in PROBLEMS:
    for dtype in DTYPES:
      for name, ratio, ok in check(problem, dtype, rng):
        failures += not ok
        print(f"  {'PASS' if ok else 'FAIL'}  {problem[0]:26s} {jnp.dtype(dtype).name:9s} {name:24s} "
              f"error/tolerance {ratio:.3f}")
  _ffi.set_poison_outputs(False)
  total = len(PROBLEMS) * len(DTYPES) * len(PASSES)
  print(f"{total - failures} passed, {failures} failed in {time.perf_counter() - start:.1f} s")
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
