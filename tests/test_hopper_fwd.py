"""The Hopper forward (csrc/fwd/wgmma.cuh) against the fp32 oracle: the forward, its
fused bias and activation, and the input gradient that runs as the same kernel on the
rotated filter. GPU only; on a GPU where the plan does not pick that kernel (not
compute capability 9.0, or a build without sm_90) the tests say so and skip."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_flashdwc import _ffi, depthwise_conv2d
from numerics import CPU, assert_close, fresh_seed, oracle, uniform, xla_conv
from shapes import ConvCase

# Sizes that are not whole tiles anywhere: widths over and under the 64-column strips,
# heights not a multiple of the 16-row tiles, batches that leave a block's 8 units
# partly empty, channels not a multiple of the transposes' 64, padding on one side.
CASES = [
    ConvCase("k31_37x70_c24", 2, 37, 70, 24, 31, 31),
    ConvCase("k51_64x64_c64", 3, 64, 64, 64, 51, 51),
    ConvCase("k33x31_one_sided", 9, 20, 66, 16, 33, 31, padding=((0, 32), (30, 0))),
    ConvCase("k31_40x130_c8", 1, 40, 130, 8, 31, 31),
    ConvCase("k57_24x17_c72", 5, 24, 17, 72, 57, 57),
]
HALF = [pytest.param(jnp.float16, id="F16"), pytest.param(jnp.bfloat16, id="BF16")]


def _forward_problem(case):
  (top, _), (left, _) = case.padding if not isinstance(case.padding, str) else ((case.kh // 2, 0),
                                                                                (case.kw // 2, 0))
  return dict(batch=case.n, in_h=case.h, in_w=case.w, out_h=case.h, out_w=case.w, channels=case.c,
              kernel_h=case.kh, kernel_w=case.kw, pad_top=top, pad_left=left)


@pytest.fixture
def gpu():
  try:
    gpus = jax.devices("gpu")
  except RuntimeError:
    gpus = []
  if not gpus:
    pytest.skip("no GPU present")
  return gpus[0]


def _require_hopper_kernel(case):
  kernel = _ffi._jax_flashdwc.plan_fwd(_forward_problem(case), half_precision=True)
  if kernel != "wgmma":
    pytest.skip(f"the plan picks {kernel!r} on this GPU: not compute capability 9.0, or a build without sm_90")


def _inputs(case, dtype, seed):
  rng = np.random.default_rng(seed)
  x = uniform(rng, case.x_shape, dtype)
  w = uniform(rng, case.kernel_shape, dtype)
  return x, w, rng


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_hopper_forward_matches_oracle(case, dtype, gpu):
  _require_hopper_kernel(case)
  seed = fresh_seed()
  x, w, _ = _inputs(case, dtype, seed)
  fn = jax.jit(lambda x, w: depthwise_conv2d(x, w, implementation="flashdwc", **case.conv_kwargs()))
  hlo = fn.lower(jnp.asarray(x, dtype), jnp.asarray(w, dtype)).compile().as_text()
  assert "flashdwc_fwd" in hlo and "convolution(" not in hlo
  out = fn(jax.device_put(jnp.asarray(x, dtype), gpu), jax.device_put(jnp.asarray(w, dtype), gpu))
  ref = oracle(x, w, case)
  mag = oracle(np.abs(x), np.abs(w), case)
  xla_out = oracle(jnp.asarray(x, dtype), jnp.asarray(w, dtype), case, precision=None)
  assert_close(out, ref, mag, case.kh * case.kw, dtype, xla_out, what=f"fwd {case.name}", seed=seed)


@pytest.mark.parametrize("activation", ["silu", "gelu"])
@pytest.mark.parametrize("case", CASES[:2], ids=lambda c: c.name)
def test_hopper_forward_fused_bias_and_activation(case, activation, gpu):
  _require_hopper_kernel(case)
  dtype = jnp.bfloat16
  seed = fresh_seed()
  x, w, rng = _inputs(case, dtype, seed)
  bias = uniform(rng, (case.c,), dtype)
  fn = jax.jit(lambda x, w, b: depthwise_conv2d(x, w, bias=b, activation=activation, implementation="flashdwc",
                                                **case.conv_kwargs()))
  out = fn(*(jax.device_put(jnp.asarray(a, dtype), gpu) for a in (x, w, bias)))
  act = getattr(jax.nn, activation)
  ref = np.asarray(act(jnp.asarray(oracle(x, w, case) + np.asarray(bias, np.float32), jnp.float32)))
  # Bound the activation's slope by 1.1 (silu and gelu): the pre-activation's tolerance carries over.
  mag = 1.1 * (oracle(np.abs(x), np.abs(w), case) + np.abs(np.asarray(bias, np.float32)))
  assert_close(out, ref, mag, case.kh * case.kw + 1, dtype, what=f"fwd+{activation} {case.name}", seed=seed)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_hopper_input_gradient_matches_oracle(case, dtype, gpu):
  _require_hopper_kernel(case)
  seed = fresh_seed()
  x, w, rng = _inputs(case, dtype, seed)
  dy = uniform(rng, case.x_shape, dtype)  # the output is as large as the input

  def dx_of(conv, x, w, dy):
    return jax.vjp(lambda x: conv(x, w), x)[1](dy)[0]

  ours = jax.jit(lambda x, w, dy: dx_of(
      lambda x, w: depthwise_conv2d(x, w, implementation="flashdwc", **case.conv_kwargs()), x, w, dy))
  out = ours(*(jax.device_put(jnp.asarray(a, dtype), gpu) for a in (x, w, dy)))
  ref_fn = lambda a, b, c, precision=jax.lax.Precision.HIGHEST: dx_of(
      lambda x, w: xla_conv(x, w, case, precision=precision), a, b, c)
  f32 = lambda a: jax.device_put(np.asarray(a, np.float32), CPU)
  ref = np.asarray(ref_fn(f32(x), f32(w), f32(dy)))
  mag = np.asarray(ref_fn(f32(np.abs(x)), f32(np.abs(w)), f32(np.abs(dy))))
  xla_out = ref_fn(*(jax.device_put(jnp.asarray(a, dtype), CPU) for a in (x, w, dy)), precision=None)
  assert_close(out, ref, mag, case.kh * case.kw, dtype, xla_out, what=f"dx {case.name}", seed=seed)
