"""Checks every kernel on this machine's default device against XLA's convolution.

  python -m jax_flashdwc.selftest

Runs the forward pass, the input gradient and the filter gradient (also in its
deterministic mode, which must repeat bit for bit), and the forward pass with its
fused prologue and epilogue (relu(x * scale + shift) in, gelu(y + bias) out), in float32,
float16 and bfloat16, on a few problems that reach every kernel (tiled and direct,
strides 1 to 3, dilation, odd channel counts), each against lax.conv_general_dilated
at HIGHEST precision in float32. Then the 1-D convolution (depthwise_conv1d: plain
causal, packed segments, an initial state, a long dilated filter; the forward, the
input gradient alone, the full gradient in x, kernel, bias and state, and the decoding
step), each against the jnp implementation in float32 on the CPU. Prints one line per
check and exits with status 1 if any fails. Takes a few seconds.
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
from .conv1d import depthwise_conv1d, depthwise_conv1d_update

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


# (name, (N, L, C), K, dilation, activation, segment ids, initial state): the 1-D kernels
# each reaches (3-D-grid plain forward and backward, the window kernels with segments or
# a state, the generic kernels at K = 6 on 13 channels, one a thread).
CONV1D_PROBLEMS = [
    ("conv1d K=4 causal silu", (2, 300, 64), 4, 1, "silu", False, False),
    ("conv1d K=3 segments silu", (2, 300, 40), 3, 1, "silu", True, False),
    ("conv1d K=4 initial state", (3, 40, 24), 4, 1, None, False, True),
    ("conv1d K=6 d=2 seg C=13", (2, 90, 13), 6, 2, "silu", True, False),
]
CONV1D_PASSES = ("fwd", "dx alone", "dx", "dkernel", "dbias", "dstate")
EPS32 = 2.0**-23


def _error_ratio(out, ref, mag, dtype, terms, slope):
  """Worst |out - ref| over the tolerance of the test suite's 1-D checks: one rounding
  to dtype plus float32 summation error over `terms` products, times the activation's
  slope (mag bounds the sum of |terms|)."""
  out, ref, mag = (np.asarray(jnp.asarray(a, jnp.float32), np.float64) for a in (out, ref, mag))
  if out.shape != ref.shape or not np.all(np.isfinite(out)):
    return float("inf")
  eps = EPS[jnp.dtype(dtype)]
  tol = (slope * (8 * EPS32 * np.sqrt(terms) * mag + 2 * eps * mag) + eps * np.abs(ref)
         + float(jnp.finfo(dtype).smallest_subnormal))
  return float(np.max(np.abs(out - ref) / tol))


def check_1d(problem, dtype, rng) -> list[tuple[str, float, bool]]:
  """[(pass, worst error / tolerance, ok)] for one 1-D problem in one dtype."""
  _, (n, length, c), k, dilation, activation, with_segments, with_state = problem
  cpu = jax.devices("cpu")[0]
  x, dy = (jnp.asarray(rng.uniform(-1, 1, (n, length, c)), dtype) for _ in range(2))
  w = jnp.asarray(rng.uniform(-1, 1, (k, 1, c)), dtype)
  b = jnp.asarray(rng.uniform(-1, 1, (c,)), dtype)
  state = jnp.asarray(rng.uniform(-1, 1, (n, dilation * (k - 1), c)), dtype)
  seg = np.cumsum(rng.uniform(size=(n, length)) < 0.02, axis=1).astype(np.int32) if with_segments else None

  def conv(implementation, seg, activation=activation):
    return lambda x, w, b, s: depthwise_conv1d(x, w, bias=b, activation=activation, kernel_dilation=dilation,
                                               segment_ids=seg, initial_state=s if with_state else None,
                                               implementation=implementation)

  ours = conv(None, None if seg is None else jnp.asarray(seg))
  y, vjp = jax.vjp(jax.jit(ours), x, w, b, state)
  grads = vjp(dy)
  (dx_alone,) = jax.vjp(jax.jit(lambda x: ours(x, w, b, state)), x)[1](dy)
  f32 = lambda a: jax.device_put(jnp.asarray(a, jnp.float32), cpu)
  seg_cpu = None if seg is None else jax.device_put(seg, cpu)
  ref = conv("xla", seg_cpu)
  y_ref, vjp_ref = jax.vjp(ref, f32(x), f32(w), f32(b), f32(state))
  grads_ref = vjp_ref(f32(dy))
  # Magnitudes: the same passes on |inputs| without the activation bound each sum.
  absf = conv("xla", seg_cpu, None)
  absolute = [f32(np.abs(np.asarray(jnp.asarray(a, jnp.float32)))) for a in (x, w, b, state, dy)]
  y_mag, vjp_mag = jax.vjp(absf, *absolute[:4])
  mags = vjp_mag(absolute[4])
  slope = 1.13 if activation else 1.0
  terms = {"fwd": k + 1, "dx alone": k, "dx": k, "dkernel": n * length, "dbias": n * length, "dstate": k}
  outs = {"fwd": (y, y_ref, np.asarray(y_mag) + np.asarray(absolute[2])), "dx alone": (dx_alone, grads_ref[0], mags[0]),
          "dx": (grads[0], grads_ref[0], mags[0]), "dkernel": (grads[1], grads_ref[1], mags[1]),
          "dbias": (grads[2], grads_ref[2], mags[2]), "dstate": (grads[3], grads_ref[3], mags[3])}
  results = []
  for name in CONV1D_PASSES:
    if name == "dstate" and not with_state:
      continue
    out, r, mag = outs[name]
    # Gradients: the forward's z is rounded before the activation's derivative, one more eps.
    ratio = _error_ratio(out, r, (1 if name == "fwd" else 2) * np.asarray(mag), dtype, terms[name], slope)
    results.append((name, ratio, ratio <= 1.0))
  return results


def check_1d_step(dtype, rng) -> tuple[str, float, bool]:
  """The decoding step (64 sequences x 136 channels, K = 4, bias + SiLU): y_t against the
  jnp step in float32 on the CPU, and the new state, which must be the old one shifted."""
  cpu = jax.devices("cpu")[0]
  x_t = jnp.asarray(rng.uniform(-1, 1, (64, 136)), dtype)
  state = jnp.asarray(rng.uniform(-1, 1, (64, 3, 136)), dtype)
  w = jnp.asarray(rng.uniform(-1, 1, (4, 1, 136)), dtype)
  b = jnp.asarray(rng.uniform(-1, 1, (136,)), dtype)
  y, new_state = jax.jit(lambda *a: depthwise_conv1d_update(*a, activation="silu"))(x_t, state, w, b)
  f32 = lambda a: jax.device_put(jnp.asarray(a, jnp.float32), cpu)
  y_ref, _ = depthwise_conv1d_update(f32(x_t), f32(state), f32(w), f32(b), activation="silu", implementation="xla")
  mag = (jnp.sum(jnp.abs(f32(state)) * jnp.abs(f32(w))[:3, 0], axis=1) + jnp.abs(f32(x_t) * f32(w)[3, 0])
         + jnp.abs(f32(b)))
  ratio = _error_ratio(y, y_ref, mag, dtype, 5, 1.13)
  shifted = np.array_equal(np.asarray(new_state[:, :2], np.float32), np.asarray(state[:, 1:], np.float32)) and \
      np.array_equal(np.asarray(new_state[:, 2], np.float32), np.asarray(x_t, np.float32))
  return "step", ratio, ratio <= 1.0 and shifted


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
  total = len(PROBLEMS) * len(DTYPES) * len(PASSES)
  for problem in CONV1D_PROBLEMS:
    for dtype in DTYPES:
      for name, ratio, ok in check_1d(problem, dtype, rng):
        failures += not ok
        total += 1
        print(f"  {'PASS' if ok else 'FAIL'}  {problem[0]:26s} {jnp.dtype(dtype).name:9s} {name:24s} "
              f"error/tolerance {ratio:.3f}")
  for dtype in DTYPES:
    name, ratio, ok = check_1d_step(dtype, rng)
    failures += not ok
    total += 1
    print(f"  {'PASS' if ok else 'FAIL'}  {'conv1d decoding step':26s} {jnp.dtype(dtype).name:9s} {name:24s} "
          f"error/tolerance {ratio:.3f}")
  _ffi.set_poison_outputs(False)
  print(f"{total - failures} passed, {failures} failed in {time.perf_counter() - start:.1f} s")
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
