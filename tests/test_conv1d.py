"""depthwise_conv1d, depthwise_conv1d_update and the 1-D layers: values, gradients,
segments, states, errors.

Every numerical test takes the `device` fixture (conftest.py): it runs on the CPU
handlers and, where a GPU is present, again on the CUDA ones. Inputs are drawn
fresh each run; a failure prints its seed.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax import lax
from numerics import CPU, EPS, fresh_seed, uniform

from jax_flashdwc import depthwise_conv1d, depthwise_conv1d_update
from jax_flashdwc._activations import apply as activate

DTYPES = [pytest.param(jnp.float32, id="F32"), pytest.param(jnp.bfloat16, id="BF16"),
          pytest.param(jnp.float16, id="F16")]
EPS32 = EPS[jnp.dtype(jnp.float32)]


# --- references --------------------------------------------------------------


def lax_conv1d(x, w, padding, stride=1, dilation=1):
  """lax.conv_general_dilated at HIGHEST on the CPU, in float32."""
  x = jax.device_put(jnp.asarray(x, jnp.float32), CPU)
  w = jax.device_put(jnp.asarray(w, jnp.float32), CPU)
  return np.asarray(lax.conv_general_dilated(x, w, (stride,), padding, rhs_dilation=(dilation,),
                                             dimension_numbers=("NWC", "WIO", "NWC"),
                                             feature_group_count=x.shape[-1],
                                             precision=lax.Precision.HIGHEST), np.float64)


def numpy_conv1d(x, w, pads, stride=1, dilation=1, seg=None, state=None):
  """The pre-activation conv in float64 by loops over outputs and taps, in x's own
  coordinates: input i = t * stride + k * dilation - before; i < 0 reads
  initial_state[S + i] (position 0's segment) where one is given."""
  x = np.asarray(x, np.float64)
  w = np.asarray(w, np.float64)[:, 0]
  n, length, c = x.shape
  k_size = w.shape[0]
  lo, hi = pads
  out_len = (length + lo + hi - dilation * (k_size - 1) - 1) // stride + 1
  y = np.zeros((n, out_len, c))
  for t in range(out_len):
    for k in range(k_size):
      i = t * stride + k * dilation - lo
      if 0 <= i < length:
        v, src_seg = x[:, i], (None if seg is None else seg[:, i])
      elif i < 0 and state is not None:
        v, src_seg = np.asarray(state, np.float64)[:, state.shape[1] + i], (None if seg is None else seg[:, 0])
      else:
        continue
      if seg is not None:
        v = v * (src_seg == seg[:, t])[:, None]
      y[:, t] += w[k] * v
  return y


def numpy_final_state(x, size, seg=None, state=None):
  n, length, c = x.shape
  before = np.zeros((n, size, c)) if state is None else np.asarray(state, np.float64)
  ext = np.concatenate([before, np.asarray(x, np.float64)], axis=1)
  out = ext[:, length:]
  if seg is not None and size and length:
    ext_seg = np.concatenate([np.repeat(seg[:, :1], size, axis=1), seg], axis=1)[:, length:]
    out = out * (ext_seg == seg[:, -1:])[..., None]
  return out


def act_ref(activation, z):
  return np.asarray(activate(activation, jnp.asarray(z, jnp.float32)), np.float64)


def assert_close(out, ref, mag, dtype, terms, what, seed, slope=1.0):
  """|out - ref| within one rounding to dtype plus float32 summation error over
  `terms` products, times the activation's slope; mag bounds the sum of |terms|."""
  out = np.asarray(jnp.asarray(out, jnp.float32), np.float64)
  ref, mag = np.asarray(ref, np.float64), np.asarray(mag, np.float64)
  assert out.shape == ref.shape, f"{what}: shape {out.shape} != {ref.shape}"
  assert np.isfinite(out).all(), f"{what} seed={seed}: non-finite (unwritten?) elements"
  eps = EPS[jnp.dtype(dtype)]
  # Rounding to dtype near zero is off by up to one subnormal step, not eps * |ref|
  # (float16: a one-tap output of |x * w| ~ 1e-6 rounds with an error of ~3e-8).
  subnormal = float(jnp.finfo(dtype).smallest_subnormal)
  tol = slope * (8 * EPS32 * np.sqrt(terms) * mag + 2 * eps * mag) + eps * np.abs(ref) + subnormal
  err = np.abs(out - ref)
  worst = np.unravel_index(np.argmax(err / tol), err.shape)
  assert (err <= tol).all(), (f"{what} dtype={jnp.dtype(dtype)} seed={seed}: |out - ref| = {err[worst]:.3g} > "
                              f"{tol[worst]:.3g} at {tuple(int(i) for i in worst)}")


def put(a, device, dtype=None):
  return jax.device_put(jnp.asarray(a, dtype), device)


def random_segments(rng, n, length, runs=3):
  """Sorted ids with `runs` boundaries a row at random places (ids as in a packed batch)."""
  seg = np.zeros((n, length), np.int32)
  for row in range(n):
    cuts = rng.integers(0, length, size=runs)
    for cut in cuts:
      seg[row, cut:] += 1
  return seg


# --- the plain convolution against lax ---------------------------------------

PLAIN_CASES = [
    # (N, L, C, K, padding, strides, dilation)
    (2, 33, 24, 4, "CAUSAL", 1, 1),
    (3, 17, 7, 2, "CAUSAL", 1, 1),
    (2, 20, 16, 3, "SAME", 1, 1),
    (2, 21, 9, 5, "VALID", 1, 1),
    (2, 40, 8, 4, "CAUSAL", 1, 3),
    (2, 31, 12, 3, "SAME", 2, 1),
    (1, 25, 5, 4, (2, 5), 3, 2),
    (2, 30, 8, 3, (-2, 1), 1, 1),
    (2, 3, 6, 4, "CAUSAL", 1, 1),  # L < K
    (3, 1, 5, 3, "CAUSAL", 1, 1),  # L = 1
    (1, 90, 4, 65, "CAUSAL", 1, 1),  # K > 64
    (2, 12, 3, 1, "CAUSAL", 1, 1),  # K = 1
]


def _pads(padding, length, k, stride, dilation):
  span = dilation * (k - 1)
  if padding == "CAUSAL":
    return (span, 0)
  if isinstance(padding, str):
    return tuple(lax.padtype_to_pads((length,), (span + 1,), (stride,), padding)[0])
  return tuple(padding)


@pytest.fixture(params=["1d", "2d"])
def plain_route(request, monkeypatch):
  """Problems without segments or state run on the 1-D kernels ("1d") and, in a second
  run, on the 2-D kernels as H = 1 ("2d"), so that both routes stay tested whichever
  conv1d.PLAIN_ON_1D_KERNELS makes the default."""
  from jax_flashdwc import conv1d
  monkeypatch.setattr(conv1d, "PLAIN_ON_1D_KERNELS", request.param == "1d")
  return request.param


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", PLAIN_CASES, ids=str)
def test_plain_matches_lax(case, dtype, device, plain_route):
  n, length, c, k, padding, stride, dilation = case
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x, w = uniform(rng, (n, length, c), dtype), uniform(rng, (k, 1, c), dtype)
  pads = _pads(padding, length, k, stride, dilation)
  fn = jax.jit(lambda x, w: depthwise_conv1d(x, w, padding=padding, strides=stride, kernel_dilation=dilation))
  y = fn(put(x, device, dtype), put(w, device, dtype))
  assert y.dtype == jnp.dtype(dtype)
  ref = lax_conv1d(x, w, [pads], stride, dilation)
  mag = lax_conv1d(np.abs(x), np.abs(w), [pads], stride, dilation)
  assert_close(y, ref, mag, dtype, k, f"y {case}", seed)


@pytest.mark.parametrize("c", [13, 24])  # one channel a thread, and vectors of channels
@pytest.mark.parametrize("activation", [None, "silu", "relu", "gelu"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_bias_activation(dtype, activation, c, device, plain_route):
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  n, length, k = 2, 29, 4
  x, w, b = uniform(rng, (n, length, c), dtype), uniform(rng, (k, 1, c), dtype), uniform(rng, (c,), dtype)
  y = jax.jit(lambda x, w, b: depthwise_conv1d(x, w, bias=b, activation=activation))(
      put(x, device, dtype), put(w, device, dtype), put(b, device, dtype))
  z = numpy_conv1d(x, w, (k - 1, 0)) + b
  mag = numpy_conv1d(np.abs(x), np.abs(w), (k - 1, 0)) + np.abs(b)
  assert_close(y, act_ref(activation, z), mag, dtype, k + 1, "fused y", seed, slope=1.13)


# --- gradients ---------------------------------------------------------------

GRAD_CASES = [
    # (N, L, C, K, padding, strides, dilation, activation, segments, state)
    (2, 19, 10, 4, "CAUSAL", 1, 1, None, False, False),
    (2, 19, 10, 4, "CAUSAL", 1, 1, "silu", False, False),
    (2, 23, 6, 3, "SAME", 2, 1, None, False, False),
    (2, 26, 8, 3, "CAUSAL", 1, 2, "silu", True, False),
    (2, 21, 9, 4, "CAUSAL", 1, 1, "silu", True, True),
    (3, 2, 5, 4, "CAUSAL", 1, 1, None, False, True),  # L < K - 1: the state reaches past x
    (2, 24, 7, 5, "SAME", 1, 1, "silu", True, False),
    # Longer than the backward kernels' 128-position blocks: halos across blocks.
    (2, 300, 16, 4, "CAUSAL", 1, 1, "silu", True, True),
    (1, 260, 24, 3, "SAME", 1, 1, "gelu", True, False),
    (2, 270, 8, 6, "CAUSAL", 1, 2, "silu", True, True),
    (1, 129, 5, 2, "CAUSAL", 1, 1, None, False, True),
    # Channels in vectors, no segments or state (the plain forward kernel on the 1-D route).
    (2, 300, 16, 4, "CAUSAL", 1, 1, "silu", False, False),
    (2, 37, 12, 3, "SAME", 1, 1, "gelu", False, False),
]


def _grad_inputs(case, dtype, rng):
  n, length, c, k, padding, stride, dilation, activation, segments, state = case
  pads = _pads(padding, length, k, stride, dilation)
  x, w, b = uniform(rng, (n, length, c), dtype), uniform(rng, (k, 1, c), dtype), uniform(rng, (c,), dtype)
  s0 = uniform(rng, (n, dilation * (k - 1), c), dtype) if state else None
  seg = random_segments(rng, n, length) if segments else None
  kwargs = dict(padding=padding, strides=stride, kernel_dilation=dilation, activation=activation)
  out_len = (length + pads[0] + pads[1] - dilation * (k - 1) - 1) // stride + 1
  dy = uniform(rng, (n, out_len, c), dtype)
  return x, w, b, s0, seg, dy, kwargs


def _fn(kwargs, seg, implementation=None):
  def f(x, w, b, s0):
    return depthwise_conv1d(x, w, bias=b, segment_ids=seg, initial_state=s0, implementation=implementation,
                            **kwargs)
  return f


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", GRAD_CASES, ids=str)
def test_gradients(case, dtype, device, plain_route):
  """vjp in x, kernel, bias and initial_state against the float32 XLA path on the
  same rounded inputs, and jvp likewise."""
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x, w, b, s0, seg, dy, kwargs = _grad_inputs(case, dtype, rng)
  k = w.shape[0]
  primals = [x, w, b] + ([s0] if s0 is not None else [])

  def ours(*a):
    return _fn(kwargs, None if seg is None else put(seg, device))(*a, *([None] if len(a) == 3 else []))

  def ref(*a):
    return _fn(kwargs, None if seg is None else put(seg, CPU), "xla")(*a, *([None] if len(a) == 3 else []))

  args_d = [put(a, device, dtype) for a in primals]
  y, vjp = jax.vjp(jax.jit(ours), *args_d)
  grads = vjp(put(dy, device, dtype))
  args_r = [put(a, CPU, jnp.float32) for a in primals]
  y_ref, vjp_ref = jax.vjp(ref, *args_r)
  grads_ref = vjp_ref(put(dy, CPU, jnp.float32))
  # Magnitudes: the same passes on |inputs| without activation bound each sum.
  abs_kwargs = dict(kwargs, activation=None)
  absf = lambda *a: _fn(abs_kwargs, None if seg is None else put(seg, CPU), "xla")(
      *a, *([None] if len(a) == 3 else []))
  y_mag, vjp_mag = jax.vjp(absf, *[put(np.abs(a), CPU, jnp.float32) for a in primals])
  mags = vjp_mag(put(np.abs(dy), CPU, jnp.float32))
  slope = 1.13 if kwargs["activation"] else 1.0
  n, length = x.shape[:2]
  assert_close(y, y_ref, np.asarray(y_mag) + np.abs(b), dtype, k + 1, f"y {case}", seed, slope)
  terms = {"x": k, "kernel": n * length, "bias": n * length, "initial_state": k}
  for name, g, g_ref, mag in zip(["x", "kernel", "bias", "initial_state"], grads, grads_ref, mags):
    # Low-precision forwards round z before the activation's derivative: one more eps.
    assert_close(g, g_ref, 2 * np.asarray(mag), dtype, terms[name], f"d{name} {case}", seed, slope)
  # Forward mode: the tangent of y in all operands at once.
  tangents = [uniform(rng, a.shape, dtype) for a in primals]
  _, ty = jax.jvp(jax.jit(ours), args_d, [put(t, device, dtype) for t in tangents])
  _, ty_ref = jax.jvp(ref, args_r, [put(t, CPU, jnp.float32) for t in tangents])
  _, ty_mag = jax.jvp(absf, [put(np.abs(a), CPU, jnp.float32) for a in primals],
                      [put(np.abs(t), CPU, jnp.float32) for t in tangents])
  assert_close(ty, ty_ref, 2 * np.asarray(ty_mag) + 2 * np.abs(y_mag), dtype, 2 * k + 2, f"jvp {case}", seed,
               slope)


def test_second_order_gradient(device):
  """grad of grad (a Hessian-vector product) agrees with the XLA path."""
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x, w, b = uniform(rng, (2, 15, 6), jnp.float32), uniform(rng, (4, 1, 6), jnp.float32), uniform(rng, (6,),
                                                                                                  jnp.float32)
  seg = random_segments(rng, 2, 15)

  def loss(impl, seg_d):
    return lambda x, w: jnp.sum(depthwise_conv1d(x, w, bias=b, activation="silu", segment_ids=seg_d,
                                                 implementation=impl) ** 2)

  def hvp(impl, device):
    f = loss(impl, put(seg, device))
    g = lambda x, w: jax.grad(f, argnums=(0, 1))(x, w)
    return jax.jvp(g, (put(x, device), put(w, device)), (put(x, device), put(w, device)))[1]

  for a, r in zip(jax.tree.leaves(hvp(None, device)), jax.tree.leaves(hvp("xla", CPU))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(r), rtol=1e-4, atol=1e-4, err_msg=f"seed {seed}")


# --- segments ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k,padding,dilation", [(4, "CAUSAL", 1), (2, "CAUSAL", 1), (7, "CAUSAL", 1),
                                                 (3, "CAUSAL", 3), (5, "SAME", 1), (4, (1, 2), 1), (1, "CAUSAL", 1)])
def test_segments_match_numpy(k, padding, dilation, dtype, device):
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  n, length, c = 3, 37, 11
  x, w, b = uniform(rng, (n, length, c), dtype), uniform(rng, (k, 1, c), dtype), uniform(rng, (c,), dtype)
  seg = random_segments(rng, n, length, runs=4)
  seg[0] = rng.integers(0, 3, size=length)  # unsorted ids: a row of many short runs
  y = jax.jit(lambda x, w, b, s: depthwise_conv1d(x, w, bias=b, activation="silu", padding=padding,
                                                  kernel_dilation=dilation, segment_ids=s))(
      put(x, device, dtype), put(w, device, dtype), put(b, device, dtype), put(seg, device))
  pads = _pads(padding, length, k, 1, dilation)
  z = numpy_conv1d(x, w, pads, 1, dilation, seg=seg) + b
  mag = numpy_conv1d(np.abs(x), np.abs(w), pads, 1, dilation, seg=seg) + np.abs(b)
  assert_close(y, act_ref("silu", z), mag, dtype, k + 1, "segmented y", seed, 1.13)


@pytest.mark.parametrize("padding", ["CAUSAL", "SAME"])
def test_segments_do_not_leak(padding, device):
  """Changing one segment's inputs (and output cotangents) changes nothing of
  another segment: its outputs and its input gradient are bit-identical."""
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  n, length, c, k = 2, 40, 8, 4
  x, w, b = uniform(rng, (n, length, c), jnp.float32), uniform(rng, (k, 1, c), jnp.float32), uniform(
      rng, (c,), jnp.float32)
  seg = np.repeat(np.array([[0, 1, 2, 3]]), length // 4, axis=1).repeat(n, axis=0).astype(np.int32)
  dy = uniform(rng, (n, length, c), jnp.float32)
  target = seg == 2
  x2, dy2 = x.copy(), dy.copy()
  x2[target] = uniform(rng, x2[target].shape, jnp.float32) * 100
  dy2[target] = uniform(rng, dy2[target].shape, jnp.float32) * 100

  @jax.jit
  def run(x, dy, s):
    f = lambda x, w, b: depthwise_conv1d(x, w, bias=b, activation="silu", padding=padding, segment_ids=s)
    y, vjp = jax.vjp(f, x, put(w, device), put(b, device))
    return y, vjp(dy)[0]

  y1, dx1 = run(put(x, device), put(dy, device), put(seg, device))
  y2, dx2 = run(put(x2, device), put(dy2, device), put(seg, device))
  keep = ~target
  np.testing.assert_array_equal(np.asarray(y1)[keep], np.asarray(y2)[keep], err_msg=f"seed {seed}")
  np.testing.assert_array_equal(np.asarray(dx1)[keep], np.asarray(dx2)[keep], err_msg=f"seed {seed}")
  assert not np.array_equal(np.asarray(y1)[target], np.asarray(y2)[target])


# --- states ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k,dilation", [(4, 1), (2, 1), (3, 2), (1, 1)])
def test_state_and_final_state_match_numpy(k, dilation, dtype, device):
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  c = 9
  size = dilation * (k - 1)
  for length in (1, max(size - 1, 1), 23):
    x, w = uniform(rng, (2, length, c), dtype), uniform(rng, (k, 1, c), dtype)
    s0 = uniform(rng, (2, size, c), dtype)
    seg = random_segments(rng, 2, length, runs=2)
    for segments in (None, seg):
      y, fs = jax.jit(lambda x, w, s0, s: depthwise_conv1d(x, w, kernel_dilation=dilation, initial_state=s0,
                                                           segment_ids=s, return_final_state=True))(
          put(x, device, dtype), put(w, device, dtype), put(s0, device, dtype),
          None if segments is None else put(segments, device))
      ref = numpy_conv1d(x, w, (size, 0), 1, dilation, seg=segments, state=s0)
      mag = numpy_conv1d(np.abs(x), np.abs(w), (size, 0), 1, dilation, seg=segments, state=np.abs(s0))
      assert_close(y, ref, mag, dtype, k, f"y L={length}", seed)
      np.testing.assert_array_equal(np.asarray(jnp.asarray(fs, jnp.float32)),
                                    numpy_final_state(x, size, segments, s0).astype(np.float32),
                                    err_msg=f"final state L={length} seed={seed}")


@pytest.mark.parametrize("segments", [False, True])
@pytest.mark.parametrize("k", [2, 4, 6])
def test_chunked_prefill_matches_whole(k, segments, device):
  """Chunks run one after another, each given the previous one's final state, give
  the whole sequence's outputs and final state; chunks shorter than the state too."""
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  n, length, c = 2, 50, 12
  x, w, b = (uniform(rng, (n, length, c), jnp.float32), uniform(rng, (k, 1, c), jnp.float32),
             uniform(rng, (c,), jnp.float32))
  # Segments change inside chunks, never exactly at a chunk start (there the caller
  # would pass a zero state); checked below separately.
  cuts = [0, 1, 3, 4, 17, 30, 31, length]
  seg = np.zeros((n, length), np.int32)
  if segments:
    for start in (10, 22, 33, 45):
      seg[:, start:] += 1
  seg_arg = lambda a, b_: put(seg[:, a:b_], device) if segments else None
  fn = jax.jit(lambda x, s0, s: depthwise_conv1d(x, put(w, device), bias=put(b, device), activation="silu",
                                                 segment_ids=s, initial_state=s0, return_final_state=True))
  y_whole, s_whole = fn(put(x, device), put(np.zeros((n, k - 1, c), np.float32), device), seg_arg(0, length))
  state = put(np.zeros((n, k - 1, c), np.float32), device)
  pieces = []
  for a, b_ in zip(cuts[:-1], cuts[1:]):
    y, state = fn(put(x[:, a:b_], device), state, seg_arg(a, b_))
    pieces.append(np.asarray(y))
  np.testing.assert_allclose(np.concatenate(pieces, axis=1), np.asarray(y_whole), rtol=1e-6, atol=1e-6,
                             err_msg=f"seed {seed}")
  np.testing.assert_array_equal(np.asarray(state), np.asarray(s_whole), err_msg=f"seed {seed}")


def test_chunk_starting_a_segment_takes_a_zero_state(device):
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  n, length, c, k = 1, 20, 4, 4
  x, w = uniform(rng, (n, length, c), jnp.float32), uniform(rng, (k, 1, c), jnp.float32)
  seg = np.zeros((n, length), np.int32)
  seg[:, 10:] = 1
  fn = lambda x, s0, s: depthwise_conv1d(put(x, device), put(w, device), segment_ids=put(s, device),
                                         initial_state=s0, return_final_state=True)
  y_whole, _ = fn(x, None, seg)
  y1, _ = fn(x[:, :10], None, seg[:, :10])
  y2, _ = fn(x[:, 10:], put(np.zeros((n, k - 1, c), np.float32), device), seg[:, 10:])
  np.testing.assert_allclose(np.concatenate([y1, y2], axis=1), y_whole, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("implementation", [None, "flashdwc"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", [None, "silu"])
def test_update_matches_causal_conv(activation, dtype, implementation, device):
  """Prefill half a sequence, then decode the rest one step at a time under jit with
  the state donated: every step's output equals the whole causal conv's."""
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  n, length, c, k = 3, 16, 10, 4
  x, w, b = uniform(rng, (n, length, c), dtype), uniform(rng, (k, 1, c), dtype), uniform(rng, (c,), dtype)
  wd, bd = put(w, device, dtype), put(b, device, dtype)
  y_whole = depthwise_conv1d(put(x, device, dtype), wd, bias=bd, activation=activation)
  _, state = depthwise_conv1d(put(x[:, :7], device, dtype), wd, bias=bd, activation=activation,
                              return_final_state=True)
  step = jax.jit(lambda x_t, s: depthwise_conv1d_update(x_t, s, wd, bd, activation, implementation),
                 donate_argnums=1)
  z = numpy_conv1d(x, w, (k - 1, 0)) + b
  mag = numpy_conv1d(np.abs(x), np.abs(w), (k - 1, 0)) + np.abs(b)
  for t in range(7, length):
    y_t, state = step(put(x[:, t], device, dtype), state)
    assert_close(y_t, act_ref(activation, z[:, t]), mag[:, t], dtype, k + 1, f"step {t}", seed, 1.13)
  np.testing.assert_array_equal(np.asarray(jnp.asarray(state, jnp.float32)),
                                np.asarray(jnp.asarray(x[:, -(k - 1):], jnp.float32)))
  assert y_whole.shape == (n, length, c)


@pytest.mark.parametrize("implementation", [None, "flashdwc"])
def test_update_with_k1_and_jit(implementation, device):
  x_t = put(np.ones((2, 3), np.float32), device)
  w = put(np.full((1, 1, 3), 2.0, np.float32), device)
  step = jax.jit(lambda x_t, s, w: depthwise_conv1d_update(x_t, s, w, implementation=implementation))
  y, s = step(x_t, put(np.zeros((2, 0, 3), np.float32), device), w)
  np.testing.assert_array_equal(np.asarray(y), 2.0)
  assert s.shape == (2, 0, 3)


def test_update_on_the_kernels_is_one_step_call_writing_the_state_in_place(device):
  """implementation='flashdwc' is one step custom call whose new state aliases the
  state operand; the default runs the same call, implementation='xla' none."""
  x_t, s = put(np.ones((2, 8), np.float32), device), put(np.ones((2, 3, 8), np.float32), device)
  w = put(np.ones((4, 1, 8), np.float32), device)
  ours = lambda x_t, s, w: depthwise_conv1d_update(x_t, s, w, activation="silu", implementation="flashdwc")
  assert _custom_calls(ours, x_t, s, w) == {"flashdwc_conv1d_step": 1}
  text = jax.jit(ours, donate_argnums=1).lower(x_t, s, w).compile().as_text()
  assert re.search(r"output_to_operand_aliasing=\{\{1\}: \(1, \{\}\)\}", text), text
  assert _custom_calls(lambda x_t, s, w: depthwise_conv1d_update(x_t, s, w), x_t, s, w) == {
      "flashdwc_conv1d_step": 1}
  assert not _custom_calls(lambda x_t, s, w: depthwise_conv1d_update(x_t, s, w, implementation="xla"), x_t, s, w)


def test_update_default_takes_the_jnp_step_for_float64(device):
  """The kernel has no float64: the default runs the jnp step there, exactly."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(fresh_seed())
    x_t, s, w = (put(rng.uniform(-1.0, 1.0, shape), device, jnp.float64)
                 for shape in ((2, 8), (2, 3, 8), (4, 1, 8)))
    step = lambda x_t, s, w: depthwise_conv1d_update(x_t, s, w)
    assert not _custom_calls(step, x_t, s, w)
    y, new_state = jax.jit(step)(x_t, s, w)
    assert y.dtype == jnp.float64
    window = np.concatenate([np.asarray(s), np.asarray(x_t)[:, None]], axis=1)
    np.testing.assert_allclose(np.asarray(y), np.einsum("nkc,kc->nc", window, np.asarray(w)[:, 0]), rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(new_state), window[:, 1:])


@pytest.mark.parametrize("c", [8, 13])
def test_update_on_the_kernels_leaves_an_undonated_state_alone(c, device):
  """Without donation XLA hands the step a copy: the caller's state keeps its values,
  and the step's outputs equal the jnp step's, at a vector-friendly and an odd C."""
  rng = np.random.default_rng(fresh_seed())
  x_t, s = uniform(rng, (3, c), np.float32), uniform(rng, (3, 3, c), np.float32)
  w, b = uniform(rng, (4, 1, c), np.float32), uniform(rng, (c,), np.float32)
  sd = put(s, device)
  y, new = jax.jit(lambda *a: depthwise_conv1d_update(*a, "silu", "flashdwc"))(put(x_t, device), sd,
                                                                              put(w, device), put(b, device))
  y_ref, new_ref = depthwise_conv1d_update(jnp.asarray(x_t), jnp.asarray(s), jnp.asarray(w), jnp.asarray(b),
                                           "silu", "xla")
  np.testing.assert_array_equal(np.asarray(sd), s)
  np.testing.assert_array_equal(np.asarray(new), np.asarray(new_ref))
  np.testing.assert_allclose(np.asarray(y), np.asarray(y_ref), rtol=1e-6, atol=1e-6)


def test_update_on_the_kernels_vmaps_and_differentiates_like_the_jnp_step(device):
  rng = np.random.default_rng(fresh_seed())
  x_t, s = uniform(rng, (5, 2, 8), np.float32), uniform(rng, (5, 2, 3, 8), np.float32)
  w, b = uniform(rng, (4, 1, 8), np.float32), uniform(rng, (8,), np.float32)
  args = [put(a, device) for a in (x_t, s, w, b)]
  for in_axes in [(0, 0, None, None), (0, 0, None, 0)]:  # shared filter and bias, then a vmapped bias
    step = lambda impl: jax.vmap(lambda x, s, w, b: depthwise_conv1d_update(x, s, w, b, "silu", impl),
                                 in_axes=in_axes)
    ours = step("flashdwc")(*args[:3], args[3] if in_axes[3] is None else jnp.stack([args[3]] * 5))
    ref = step("xla")(*args[:3], args[3] if in_axes[3] is None else jnp.stack([args[3]] * 5))
    for a, r in zip(ours, ref):
      np.testing.assert_allclose(np.asarray(a), np.asarray(r), rtol=1e-6, atol=1e-6)
  loss = lambda impl: lambda *a: jnp.sum(jnp.sin(depthwise_conv1d_update(*a, "silu", impl)[0]))
  one = [a[0] for a in args[:2]] + args[2:]
  g = jax.grad(loss("flashdwc"), argnums=(0, 1, 2, 3))(*one)
  g_ref = jax.grad(loss("xla"), argnums=(0, 1, 2, 3))(*one)
  for a, r in zip(g, g_ref):
    np.testing.assert_allclose(np.asarray(a), np.asarray(r), rtol=1e-5, atol=1e-6)


# --- properties over random shapes (CPU) -------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 3), length=st.integers(1, 40), c=st.integers(1, 19), k=st.integers(1, 9),
       dilation=st.integers(1, 3), causal=st.booleans(), use_seg=st.booleans(), use_state=st.booleans(),
       seed=st.integers(0, 2**31 - 1))
def test_property_random_shapes(n, length, c, k, dilation, causal, use_seg, use_state, seed):
  rng = np.random.default_rng(seed)
  use_state = use_state and causal
  padding = "CAUSAL" if causal else "SAME"
  pads = _pads(padding, length, k, 1, dilation)
  x, w = uniform(rng, (n, length, c), jnp.float32), uniform(rng, (k, 1, c), jnp.float32)
  seg = random_segments(rng, n, length) if use_seg else None
  s0 = uniform(rng, (n, dilation * (k - 1), c), jnp.float32) if use_state else None
  y = depthwise_conv1d(put(x, CPU), put(w, CPU), padding=padding, kernel_dilation=dilation,
                       segment_ids=None if seg is None else put(seg, CPU),
                       initial_state=None if s0 is None else put(s0, CPU))
  ref = numpy_conv1d(x, w, pads, 1, dilation, seg=seg, state=s0)
  mag = numpy_conv1d(np.abs(x), np.abs(w), pads, 1, dilation, seg=seg, state=None if s0 is None else np.abs(s0))
  assert_close(y, ref, mag, jnp.float32, k, "property y", seed)


# --- layers ------------------------------------------------------------------


def test_linen_layer_matches_flax_conv():
  from flax import linen as nn

  from jax_flashdwc.nn_conv1d import CausalConv1D
  x = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (2, 2, 13, 6)), jnp.float32)
  ours = CausalConv1D(features=6, kernel_size=(4,))
  theirs = nn.Conv(features=6, kernel_size=(4,), feature_group_count=6, padding="CAUSAL")
  params = theirs.init(jax.random.key(1), x)
  assert jax.tree.map(jnp.shape, ours.init(jax.random.key(1), x)) == jax.tree.map(jnp.shape, params)
  params = jax.tree.map(lambda p: p + 0.1, params)
  np.testing.assert_allclose(ours.apply(params, x), theirs.apply(params, x), rtol=1e-5, atol=1e-5)
  y, state = ours.apply(params, x[0], return_final_state=True)
  y_t, _ = ours.apply(params, x[0, :, -1], ours.apply(params, x[0, :, :-1], return_final_state=True)[1],
                      method="step")
  np.testing.assert_allclose(y_t, y[:, -1], rtol=1e-5, atol=1e-5)
  assert state.shape == (2, 3, 6)


def test_nnx_layer_matches_flax_conv():
  from flax import nnx

  from jax_flashdwc.nn_conv1d import NnxCausalConv1D
  x = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (3, 11, 5)), jnp.float32)
  ours = NnxCausalConv1D(5, 3, activation=None, rngs=nnx.Rngs(0))
  theirs = nnx.Conv(5, 5, kernel_size=(3,), feature_group_count=5, padding="CAUSAL", rngs=nnx.Rngs(0))
  assert jax.tree.map(jnp.shape, nnx.state(ours, nnx.Param)) == jax.tree.map(jnp.shape, nnx.state(theirs, nnx.Param))
  theirs.bias[...] = jnp.arange(5.0)
  ours.kernel[...], ours.bias[...] = theirs.kernel[...], theirs.bias[...]
  np.testing.assert_allclose(ours(x), theirs(x), rtol=1e-5, atol=1e-5)
  seg = jnp.asarray(random_segments(np.random.default_rng(1), 3, 11))
  assert ours(x, segment_ids=seg).shape == x.shape


# --- argument errors ---------------------------------------------------------

X = jnp.zeros((2, 8, 4), jnp.float32)
W = jnp.zeros((3, 1, 4), jnp.float32)

ERROR_CASES = [
    (dict(x=jnp.zeros((8, 4))), ValueError, "x must have rank 3"),
    (dict(kernel=jnp.zeros((3, 4))), ValueError, "kernel must have shape (K, 1, C)"),
    (dict(kernel=jnp.zeros((3, 1, 5))), ValueError, "kernel has 5 channels but x has 4"),
    (dict(kernel=jnp.zeros((3, 1, 4), jnp.bfloat16)), TypeError, "same dtype"),
    (dict(x=jnp.zeros((2, 8, 4), jnp.int32), kernel=jnp.zeros((3, 1, 4), jnp.int32)), TypeError, "x dtype"),
    (dict(padding="FULL"), ValueError, "padding must be one of CAUSAL"),
    (dict(padding=(1, 2, 3)), TypeError, "padding must be"),
    (dict(strides=0), ValueError, "strides must be >= 1"),
    (dict(strides=1.5), TypeError, "strides must be an int"),
    (dict(kernel_dilation=0), ValueError, "kernel_dilation must be >= 1"),
    (dict(bias=jnp.zeros((5,))), ValueError, "bias must have shape (C,)"),
    (dict(bias=jnp.zeros((4,), jnp.float16)), TypeError, "bias must have x's dtype"),
    (dict(activation="tanh"), ValueError, "activation must be None or one of"),
    (dict(segment_ids=jnp.zeros((2, 7), jnp.int32)), ValueError, "segment_ids must have shape (N, L)"),
    (dict(segment_ids=jnp.zeros((2, 8), jnp.float32)), TypeError, "segment_ids must be an integer"),
    (dict(segment_ids=jnp.zeros((2, 8), jnp.int32), padding="VALID"), ValueError, "one output per input"),
    (dict(segment_ids=jnp.zeros((2, 8), jnp.int32), strides=2), ValueError, "one output per input"),
    (dict(initial_state=jnp.zeros((2, 2, 4)), padding="SAME"), ValueError, "needs a causal convolution"),
    (dict(return_final_state=True, strides=2), ValueError, "needs a causal convolution"),
    (dict(initial_state=jnp.zeros((2, 3, 4))), ValueError, "initial_state must have shape"),
    (dict(initial_state=jnp.zeros((2, 2, 4), jnp.float16)), TypeError, "initial_state must have x's dtype"),
    (dict(return_final_state=1), TypeError, "return_final_state must be a bool"),
    (dict(implementation="cudnn"), ValueError, "implementation must be None or one of"),
    (dict(x=jnp.zeros((2, 8, 4), jnp.float64) if jax.config.jax_enable_x64 else np.zeros((2, 8, 4), np.float64),
          kernel=np.zeros((3, 1, 4), np.float64), implementation="flashdwc"), TypeError, "x dtype"),
    (dict(padding="VALID", x=jnp.zeros((2, 1, 4))), ValueError, "the output would be empty"),
    (dict(x=[[1.0]]), TypeError, "x must be an array"),
]


@pytest.mark.parametrize("overrides,error,message", ERROR_CASES, ids=[c[2] for c in ERROR_CASES])
def test_argument_errors(overrides, error, message):
  kwargs = dict(x=X, kernel=W)
  kwargs.update(overrides)
  x, kernel = kwargs.pop("x"), kwargs.pop("kernel")
  with pytest.raises(error, match=__import__("re").escape(message)):
    depthwise_conv1d(x, kernel, **kwargs)


UPDATE_ERRORS = [
    (dict(x_t=jnp.zeros((2, 1, 4))), ValueError, "x_t must have rank 2"),
    (dict(state=jnp.zeros((2, 3, 4))), ValueError, "state must have shape (N, K - 1, C)"),
    (dict(state=jnp.zeros((2, 2, 4), jnp.bfloat16)), TypeError, "state must have x_t's dtype"),
    (dict(kernel=jnp.zeros((3, 1, 5))), ValueError, "kernel has 5 channels"),
    (dict(bias=jnp.zeros((3,))), ValueError, "bias must have shape (C,)"),
    (dict(activation="swish"), ValueError, "activation must be None or one of"),
    (dict(implementation="cudnn"), ValueError, "implementation must be None or one of"),
]


@pytest.mark.parametrize("overrides,error,message", UPDATE_ERRORS, ids=[c[2] for c in UPDATE_ERRORS])
def test_update_argument_errors(overrides, error, message):
  kwargs = dict(x_t=jnp.zeros((2, 4)), state=jnp.zeros((2, 2, 4)), kernel=W, bias=None, activation=None)
  kwargs.update(overrides)
  with pytest.raises(error, match=__import__("re").escape(message)):
    depthwise_conv1d_update(**kwargs)


# --- routing, vmap, determinism ---------------------------------------------


def _custom_calls(fn, *args):
  """The library's custom calls in fn's compiled executable, with their counts."""
  import collections
  import re
  text = jax.jit(fn).lower(*args).compile().as_text()
  return dict(collections.Counter(re.findall(r'custom_call_target="(flashdwc_[a-z0-9_]+)"', text)))


@pytest.mark.parametrize("segments", [False, True])
def test_runs_the_1d_kernels(segments, device, plain_route):
  """A training step (value and gradient) of a stride-1 one-output-per-input problem
  runs one forward and one backward 1-D kernel; implementation='xla' none."""
  from jax_flashdwc import conv1d
  x, w, b = (put(np.ones((2, 9, 8), np.float32), device), put(np.ones((4, 1, 8), np.float32), device),
             put(np.ones((8,), np.float32), device))
  seg = put(np.zeros((2, 9), np.int32), device) if segments else None
  fwd = lambda x, w, b: depthwise_conv1d(x, w, bias=b, activation="silu", segment_ids=seg)
  if segments or conv1d.PLAIN_ON_1D_KERNELS:
    assert _custom_calls(fwd, x, w, b) == {"flashdwc_conv1d_fwd": 1}
    step = jax.value_and_grad(lambda x, w, b: jnp.sum(fwd(x, w, b) ** 2), argnums=(0, 1, 2))
    assert _custom_calls(step, x, w, b) == {"flashdwc_conv1d_fwd": 1, "flashdwc_conv1d_bwd": 1}
  xla = lambda x, w, b: depthwise_conv1d(x, w, bias=b, segment_ids=seg, implementation="xla")
  assert not _custom_calls(xla, x, w, b)


@pytest.mark.parametrize("k,dilation,segments,state", [(4, 1, False, False), (3, 1, True, False), (4, 1, False, True),
                                                   (2, 3, True, False)])
def test_input_gradient_alone_skips_the_filter_sums(k, dilation, segments, state, device):
  """The gradient in x alone (and in x and the initial state) runs the backward call
  with no filter or bias partials, and its dx and dstate are bit for bit those of the
  full gradient's call, which writes the partials."""
  from jax_flashdwc import conv1d
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  n, length, c = 2, 300, 24
  x, w, b = (put(uniform(rng, s, np.float32), device, jnp.bfloat16) for s in ((n, length, c), (k, 1, c), (c,)))
  dy = put(uniform(rng, (n, length, c), np.float32), device, jnp.bfloat16)
  seg = put(random_segments(rng, n, length), device) if segments else None
  s0 = put(uniform(rng, (n, dilation * (k - 1), c), np.float32), device, jnp.bfloat16) if state else None
  f = lambda x, w, b, s0: depthwise_conv1d(x, w, bias=b, activation="silu", kernel_dilation=dilation,
                                           segment_ids=seg, initial_state=s0)
  full = jax.jit(lambda *a: jax.vjp(f, *a)[1](dy))
  alone = jax.jit(lambda x, w, b, s0: jax.vjp(lambda x, s0: f(x, w, b, s0), x, s0)[1](dy))
  old = conv1d.PLAIN_ON_1D_KERNELS
  conv1d.PLAIN_ON_1D_KERNELS = True
  try:
    args = (x, w, b, s0)
    texts = {name: fn.lower(*args).compile().as_text() for name, fn in (("full", full), ("alone", alone))}
    dx_full, _, _, ds_full = full(*args)
    dx_alone, ds_alone = alone(*args)
  finally:
    conv1d.PLAIN_ON_1D_KERNELS = old
  calls = {name: re.findall(r"\n.*custom_call_target=\"flashdwc_conv1d_bwd\".*", t) for name, t in texts.items()}
  assert len(calls["full"]) == 1 and len(calls["alone"]) == 1, calls
  parts = (n * -(-length // 128), k, c)
  assert "f32[%d,%d,%d]" % parts in calls["full"][0], calls["full"][0]
  assert "f32[0,%d,%d]" % (k, c) in calls["alone"][0] and "f32[0,%d]" % c in calls["alone"][0], calls["alone"][0]
  np.testing.assert_array_equal(np.asarray(dx_alone, np.float32), np.asarray(dx_full, np.float32),
                                err_msg=f"seed {seed}")
  if state:
    np.testing.assert_array_equal(np.asarray(ds_alone, np.float32), np.asarray(ds_full, np.float32),
                                  err_msg=f"seed {seed}")


@pytest.mark.parametrize("k, dilation", [(6, 1), (4, 2)])
def test_plain_long_or_dilated_filters_stay_on_the_2d_kernels(k, dilation, device, monkeypatch):
  """Without segments or state, only K = 2-4 at dilation 1 (the timed window kernels)
  takes the 1-D kernels under PLAIN_ON_1D_KERNELS; other filters run the 2-D kernels."""
  from jax_flashdwc import conv1d
  monkeypatch.setattr(conv1d, "PLAIN_ON_1D_KERNELS", True)
  x, w = put(np.ones((2, 20, 8), np.float32), device), put(np.ones((k, 1, 8), np.float32), device)
  calls = _custom_calls(lambda x, w: depthwise_conv1d(x, w, kernel_dilation=dilation), x, w)
  assert calls and not any(name.startswith("flashdwc_conv1d") for name in calls), calls


def test_vmap_matches_loop(device):
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x = put(uniform(rng, (3, 2, 17, 6), jnp.float32), device)
  w = put(uniform(rng, (3, 4, 1, 6), jnp.float32), device)
  seg = put(random_segments(rng, 2, 17), device)
  f = lambda x, w: depthwise_conv1d(x, w, activation="silu", segment_ids=seg)
  for in_axes, ws in (((0, None), w[0]), ((0, 0), w)):
    out = jax.vmap(f, in_axes=in_axes)(x, ws)
    loop = np.stack([f(x[i], ws if in_axes[1] is None else ws[i]) for i in range(3)])
    np.testing.assert_allclose(out, loop, rtol=1e-6, atol=1e-6, err_msg=f"seed {seed}")
    g = jax.vmap(jax.grad(lambda x, w: jnp.sum(f(x, w) ** 2), argnums=(0, 1)), in_axes=in_axes)(x, ws)
    assert g[0].shape == x.shape


def test_filter_gradient_is_deterministic(device):
  """The partial sums are reduced in a fixed order: two runs agree bit for bit."""
  rng = np.random.default_rng(fresh_seed())
  x = put(uniform(rng, (4, 1000, 64), jnp.bfloat16), device, jnp.bfloat16)
  w = put(uniform(rng, (4, 1, 64), jnp.bfloat16), device, jnp.bfloat16)
  g = jax.jit(jax.grad(lambda x, w: jnp.sum(depthwise_conv1d(x, w, activation="silu").astype(jnp.float32) ** 2),
                       argnums=1))
  np.testing.assert_array_equal(np.asarray(g(x, w), np.float32), np.asarray(g(x, w), np.float32))


def test_window_kernel_loop_model():
  """The CUDA window kernels' loops, modelled on the CPU (tests/cuda/conv1d_window_model.py)."""
  import importlib.util
  import os
  path = os.path.join(os.path.dirname(__file__), "cuda", "conv1d_window_model.py")
  spec = importlib.util.spec_from_file_location("conv1d_window_model", path)
  model = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(model)
  model.main()


def test_benchmark_keeps_and_resumes_its_csv(tmp_path, monkeypatch):
  """benchmarks/bench_conv1d.py rewrites its CSV after every (shape, pass) and, with
  --resume, measures only the pairs the CSV lacks (so runs cut at a time limit add up)."""
  import csv
  import importlib.util
  import os

  benchmarks = os.path.join(os.path.dirname(__file__), "..", "benchmarks")
  monkeypatch.syspath_prepend(benchmarks)  # the script's own imports (provenance)
  spec = importlib.util.spec_from_file_location("bench_conv1d", os.path.join(benchmarks, "bench_conv1d.py"))
  bench = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(bench)
  args = ["--out", str(tmp_path), "--smoke", "--modes", "fwd", "--impls", "flashdwc-1d", "xla"]
  bench.main(args)
  out = tmp_path / "conv1d.csv"
  key = lambda r: (r["tokens"], r["C"], r["K"], r["mode"], r["impl"])
  with open(out) as f:
    first = list(csv.DictReader(f))
  measured = [r for r in first if r["mode"] == "fwd"]
  assert {r["impl"] for r in measured} == {"flashdwc-1d", "xla"} and len(measured) >= 4
  assert {r["impl"] for r in first if r["mode"] == "update"} == {"xla", "flashdwc-1d"}  # the decoding step, both ways
  copies = [r for r in first if r["mode"] == "copy"]  # XLA's copy of each shape's bytes, the in-executable roof
  assert {r["impl"] for r in copies} == {"xla"} and len(copies) == len(measured) // 2
  assert all(float(r["ms"]) > 0 for r in copies)
  dropped = {key(r) for r in measured[:2]}  # both implementations of the first shape
  with open(out, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(first[0]))
    writer.writeheader()
    writer.writerows(r for r in first if key(r) not in dropped)
  bench.main(args + ["--resume"])
  with open(out) as f:
    again = {key(r): r for r in csv.DictReader(f)}
  assert set(again) == {key(r) for r in first}
  for r in first:
    if key(r) not in dropped:
      assert again[key(r)]["ms"] == r["ms"], key(r)  # kept, not measured again


def test_update_profile_sums_ncu_kernel_times(tmp_path, capsys):
  """benchmarks/profile_conv1d_update.py adds Nsight Compute's kernel times over their
  units (ncu writes ns or us, with thousands separators) and divides by the chain's steps."""
  import importlib.util
  import os

  path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "profile_conv1d_update.py")
  spec = importlib.util.spec_from_file_location("profile_conv1d_update", path)
  profile = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(profile)
  header = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
            '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
  row = '"{i}","1","python3","h","{name}","1","7","(128,1,1)","(80,1,1)","0","9.0","m","gpu__time_duration.sum","{u}","{v}"'
  lines = ["==PROF== Connected to process 1", header,
           row.format(i=0, name="step_kernel", u="nsecond", v="2,500"),
           row.format(i=1, name="step_kernel", u="usecond", v="1.5"),
           row.format(i=2, name="copy_fusion", u="nsecond", v="800")]
  csv_path = tmp_path / "ncu.csv"
  csv_path.write_text("\n".join(lines) + "\n")
  profile.main(["--summarize", str(csv_path)])
  out = capsys.readouterr().out
  steps = profile.STEPS * profile.CALLS
  assert "2 launches       4.00 us" in out and "1 launches       0.80 us" in out
  assert f"total 4.80 us over {steps} steps: {4.8 / steps:.3f} us a step" in out
