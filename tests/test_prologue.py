"""The fused input prologue, x' = act(x * scale + shift): values, gradients, vmap,
errors, layers. Sharding is in test_sharding.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numerics import CPU, EPS, fresh_seed, oracle, uniform
from shapes import FUSION_CASES, STREAM_CASE

from jax_flashdwc import depthwise_conv2d
from jax_flashdwc import _activations
from jax_flashdwc._activations import apply as activate

# Every activation the library fuses, so that a new one is tested too.
ACTIVATIONS = list(_activations.ACTIVATIONS)
# Every forward kernel family. All pad: a shift moves act(0 * scale + shift) away
# from zero, so a kernel that transformed the padding would fail.
CASES = FUSION_CASES
DTYPES = [pytest.param(jnp.float32, id="F32"), pytest.param(jnp.bfloat16, id="BF16")]


def _inputs(case, dtype, rng):
  x = uniform(rng, case.x_shape, dtype)
  w = uniform(rng, case.kernel_shape, dtype)
  scale = rng.uniform(0.5, 1.5, case.c).astype(np.float32)
  shift = rng.uniform(-0.5, 0.5, case.c).astype(np.float32)
  return x, w, scale, shift


@pytest.mark.parametrize("input_activation", ACTIVATIONS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_prologue_forward_matches_oracle(case, dtype, input_activation, device):
  _check_prologue_forward(case, dtype, input_activation, device)


# The streaming tensor-core kernel (several output tiles a block, fwd_mma_stream.cuh)
# applies the prologue as it moves its look-ahead rows from shared memory into the
# planes; only the GPU launcher's tile rule reaches it.
@pytest.mark.parametrize("input_activation", ["relu", "gelu"], ids=str)
def test_prologue_forward_several_tiles_per_block(input_activation, device):
  if device.platform == "cpu":
    pytest.skip("sized for the GPU launcher's tile rule")
  _check_prologue_forward(STREAM_CASE, jnp.bfloat16, input_activation, device)


def _check_prologue_forward(case, dtype, input_activation, device):
  seed = fresh_seed()
  x, w, scale, shift = _inputs(case, dtype, np.random.default_rng(seed))
  put = lambda a, dt=dtype: jax.device_put(jnp.asarray(a, dt), device)
  fn = jax.jit(lambda x, w, s, t: depthwise_conv2d(x, w, implementation="flashdwc", input_scale=s, input_shift=t,
                                                   input_activation=input_activation, **case.conv_kwargs()))
  out = fn(put(x), put(w), put(scale, jnp.float32), put(shift, jnp.float32))
  assert out.dtype == jnp.dtype(dtype)
  out = np.asarray(jnp.asarray(out, jnp.float32), np.float64)
  x_prime = np.asarray(activate(input_activation, jnp.asarray(x * scale + shift, jnp.float32)), np.float32)
  ref = np.asarray(oracle(x_prime, w, case), np.float64)
  mag = np.asarray(oracle(np.abs(x_prime) + 1e-3, np.abs(w), case), np.float64)
  # The conv's bound on x', plus one rounding of x' to dtype (the tensor-core
  # kernel feeds x' to the tensor cores in dtype) and one of the output.
  # And the prologue's own rounding in fp32, on both sides: x * scale + shift is two
  # roundings of up to eps32 * |x * scale| each way (one if the kernel fuses it),
  # which is not bounded by |x'| where the shift cancels x * scale (fp32 relu failed
  # by 10% of the tolerance without this term, in 2 of 925 GPU tests).
  pre = np.asarray(oracle(np.abs(x * scale) + np.abs(shift), np.abs(w), case), np.float64)
  eps = EPS[jnp.dtype(dtype)]
  eps32 = EPS[jnp.dtype(jnp.float32)]
  tol = 8 * eps32 * np.sqrt(case.kh * case.kw) * mag + 2 * eps * mag + eps * np.abs(ref) + 2 * eps32 * pre
  err = np.abs(out - ref)
  worst = np.unravel_index(np.argmax(err / tol), err.shape)
  assert (err <= tol).all(), f"seed {seed}: |out - ref| {err[worst]:.3g} > {tol[worst]:.3g} at {worst}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_prologue_and_epilogue_together(case, device):
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x, w, scale, shift = _inputs(case, jnp.float32, rng)
  b = uniform(rng, (case.c,), jnp.float32)
  put = lambda a: jax.device_put(jnp.asarray(a), device)
  kwargs = dict(bias=put(b), activation="gelu", input_scale=put(scale), input_shift=put(shift),
                input_activation="relu", precision=jax.lax.Precision.HIGHEST, **case.conv_kwargs())
  ours = jax.jit(lambda x, w: depthwise_conv2d(x, w, implementation="flashdwc", **kwargs))(put(x), put(w))
  ref = jax.jit(lambda x, w: depthwise_conv2d(x, w, implementation="xla", **kwargs))(put(x), put(w))
  np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=1e-5, atol=1e-5 * np.sqrt(case.kh * case.kw),
                             err_msg=f"seed {seed}")


@pytest.mark.parametrize("input_activation", [None, "relu", "gelu", "silu"], ids=str)
@pytest.mark.parametrize("case", CASES[:3], ids=lambda c: c.name)
def test_prologue_gradients_match_xla(case, input_activation, device):
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x, w, scale, shift = _inputs(case, jnp.float32, rng)
  b = uniform(rng, (case.c,), jnp.float32)
  put = lambda a: jax.device_put(jnp.asarray(a), device)
  args = tuple(put(a) for a in (x, w, b, scale, shift))
  dy = put(rng.uniform(-1, 1, oracle(x, w, case).shape).astype(np.float32))

  def grads(implementation):
    def f(x, w, b, s, t):
      y = depthwise_conv2d(x, w, bias=b, activation="silu", input_scale=s, input_shift=t,
                           input_activation=input_activation, implementation=implementation,
                           precision=jax.lax.Precision.HIGHEST, **case.conv_kwargs())
      return jnp.sum(dy * y)

    return jax.jit(jax.grad(f, argnums=(0, 1, 2, 3, 4)))(*args)

  for name, ours, ref in zip(("dx", "dw", "dbias", "dscale", "dshift"), grads("flashdwc"), grads("xla")):
    ours, ref = np.asarray(ours), np.asarray(ref)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=2e-5 * np.abs(ref).max() * np.sqrt(x.size / case.c),
                               err_msg=f"{name} seed {seed}")


def test_prologue_vmap_over_every_operand():
  rng = np.random.default_rng(fresh_seed())
  case = CASES[0]
  xs = jnp.asarray(rng.uniform(-1, 1, (3, *case.x_shape)), jnp.float32)
  ws = jnp.asarray(rng.uniform(-1, 1, (3, *case.kernel_shape)), jnp.float32)
  ss = jnp.asarray(rng.uniform(0.5, 1.5, (3, case.c)), jnp.float32)
  ts = jnp.asarray(rng.uniform(-0.5, 0.5, (3, case.c)), jnp.float32)
  conv = lambda impl: lambda x, w, s, t: depthwise_conv2d(x, w, input_scale=s, input_shift=t, input_activation="relu",
                                                          implementation=impl, precision=jax.lax.Precision.HIGHEST)
  with jax.default_device(CPU):
    for in_axes in [(0, None, None, None), (0, 0, 0, 0), (None, None, 0, None), (None, None, None, 0)]:
      args = [a if ax == 0 else a[0] for a, ax in zip((xs, ws, ss, ts), in_axes)]
      ours = jax.vmap(conv("flashdwc"), in_axes=in_axes)(*args)
      ref = jax.vmap(conv("xla"), in_axes=in_axes)(*args)
      np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), atol=2e-5, err_msg=str(in_axes))


@pytest.mark.parametrize("kwargs, error, match", [
    ({"input_activation": "tanh"}, ValueError,
     r"input_activation must be None or one of \('relu', 'gelu', 'gelu_tanh', 'silu'\); got 'tanh'"),
    ({"input_scale": jnp.ones((5,))}, ValueError, r"input_scale must have shape \(C,\) = \(4,\).*got \(5,\)"),
    ({"input_shift": jnp.ones((4, 1))}, ValueError, r"input_shift must have shape \(C,\) = \(4,\).*got \(4, 1\)"),
    ({"input_scale": jnp.ones((4,), jnp.int32)}, TypeError,
     r"input_scale must be a floating-point array; got int32"),
])
def test_prologue_bad_input_raises(kwargs, error, match):
  with pytest.raises(error, match=match):
    depthwise_conv2d(jnp.ones((1, 6, 6, 4)), jnp.ones((3, 3, 1, 4)), **kwargs)


def test_layers_take_a_prologue():
  from flax import linen as nn
  from flax import nnx

  from jax_flashdwc.nn import DepthwiseConv2D, NnxDepthwiseConv2D

  rng = np.random.default_rng(fresh_seed())
  x = jnp.asarray(rng.normal(size=(2, 9, 10, 12)), jnp.float32)
  scale = jnp.asarray(rng.uniform(0.5, 1.5, 12), jnp.float32)
  shift = jnp.asarray(rng.uniform(-0.5, 0.5, 12), jnp.float32)
  layer = DepthwiseConv2D(features=12, kernel_size=(5, 5), input_activation="relu")
  params = layer.init(jax.random.key(1), x)
  conv = nn.Conv(features=12, kernel_size=(5, 5), feature_group_count=12, precision=jax.lax.Precision.HIGHEST)
  ref = conv.apply(params, jax.nn.relu(x * scale + shift))
  got = layer.apply(params, x, input_scale=scale, input_shift=shift)
  np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=2e-5)

  nnx_layer = NnxDepthwiseConv2D(12, (5, 5), input_activation="relu", rngs=nnx.Rngs(0))
  nnx_layer.kernel[...] = params["params"]["kernel"]
  nnx_layer.bias[...] = params["params"]["bias"]
  got = nnx_layer(x, input_scale=scale, input_shift=shift)
  np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=2e-5)


def test_folded_batch_norm_equals_batch_norm_then_layer():
  from flax import linen as nn

  from jax_flashdwc.nn import DepthwiseConv2D, fold_batch_norm

  rng = np.random.default_rng(fresh_seed())
  x = jnp.asarray(rng.normal(size=(2, 9, 10, 12)), jnp.float32)
  bn = nn.BatchNorm(use_running_average=True, epsilon=1e-3)
  stats = {"mean": jnp.asarray(rng.normal(size=12), jnp.float32),
           "var": jnp.asarray(rng.uniform(0.5, 2.0, 12), jnp.float32)}
  bn_params = {"scale": jnp.asarray(rng.uniform(0.5, 1.5, 12), jnp.float32),
               "bias": jnp.asarray(rng.normal(size=12), jnp.float32)}
  bn_vars = {"params": bn_params, "batch_stats": stats}
  layer = DepthwiseConv2D(features=12, kernel_size=(3, 3), input_activation="relu")
  params = layer.init(jax.random.key(1), x)
  unfused = layer.clone(input_activation=None, implementation="xla", precision=jax.lax.Precision.HIGHEST)
  ref = unfused.apply(params, jax.nn.relu(bn.apply(bn_vars, x)))
  got = layer.apply(params, x, *fold_batch_norm(**stats, **bn_params, epsilon=1e-3))
  np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-5, atol=1e-5)
