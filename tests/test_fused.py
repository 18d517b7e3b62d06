"""The fused bias + activation epilogue: values, gradients, vmap, errors, layers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numerics import CPU, EPS, fresh_seed, oracle, uniform
from shapes import FUSION_CASES

from jax_flashdwc import depthwise_conv2d
from jax_flashdwc import _activations
from jax_flashdwc._activations import apply as activate

# Every activation the library fuses, so that a new one is tested too.
ACTIVATIONS = list(_activations.ACTIVATIONS)
CASES = FUSION_CASES
DTYPES = [pytest.param(jnp.float32, id="F32"), pytest.param(jnp.bfloat16, id="BF16")]


def _inputs(case, dtype, rng):
  x = uniform(rng, case.x_shape, dtype)
  w = uniform(rng, case.kernel_shape, dtype)
  b = uniform(rng, (case.c,), dtype)
  return x, w, b


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_fused_forward_matches_oracle(case, dtype, activation, device):
  seed = fresh_seed()
  x, w, b = _inputs(case, dtype, np.random.default_rng(seed))
  put = lambda a: jax.device_put(jnp.asarray(a, dtype), device)
  out = jax.jit(lambda x, w, b: depthwise_conv2d(x, w, implementation="flashdwc", bias=b, activation=activation,
                                                 **case.conv_kwargs()))(
      put(x), put(w), put(b))
  assert out.dtype == jnp.dtype(dtype)
  out = np.asarray(jnp.asarray(out, jnp.float32), np.float64)
  z = np.asarray(oracle(x, w, case), np.float64) + b
  ref = np.asarray(activate(activation, jnp.asarray(z, jnp.float32)), np.float64)
  mag = np.asarray(oracle(np.abs(x), np.abs(w), case), np.float64) + np.abs(b)
  # The activations have slope at most 1.13 (gelu), so the conv's error bound carries
  # over, plus one rounding of the pre-activation (the tensor-core kernel rounds z
  # to dtype before the activation) and one of the output.
  eps = EPS[jnp.dtype(dtype)]
  tol = 1.13 * (8 * EPS[jnp.dtype(jnp.float32)] * np.sqrt(case.kh * case.kw) * mag + eps * mag) + eps * np.abs(ref)
  tol = np.maximum(tol, float(jnp.finfo(dtype).smallest_subnormal))
  err = np.abs(out - ref)
  worst = np.unravel_index(np.argmax(err / tol), err.shape)
  assert (err <= tol).all(), f"seed {seed}: |out - ref| {err[worst]:.3g} > {tol[worst]:.3g} at {worst}"


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=str)
@pytest.mark.parametrize("case", CASES[:3], ids=lambda c: c.name)
def test_fused_gradients_match_xla(case, activation, device):
  seed = fresh_seed()
  x, w, b = _inputs(case, jnp.float32, np.random.default_rng(seed))
  put = lambda a: jax.device_put(jnp.asarray(a), device)
  x, w, b = put(x), put(w), put(b)
  dy = put(np.random.default_rng(seed + 1).uniform(-1, 1, oracle(x, w, case).shape).astype(np.float32))

  def grads(implementation):
    f = lambda x, w, b: jnp.sum(dy * depthwise_conv2d(x, w, bias=b, activation=activation,
                                                      implementation=implementation,
                                                      precision=jax.lax.Precision.HIGHEST, **case.conv_kwargs()))
    return jax.jit(jax.grad(f, argnums=(0, 1, 2)))(x, w, b)

  for name, ours, ref in zip(("dx", "dw", "dbias"), grads("flashdwc"), grads("xla")):
    ours, ref = np.asarray(ours), np.asarray(ref)
    scale = np.abs(ref).max()
    np.testing.assert_allclose(ours, ref, rtol=0, atol=2e-5 * scale * np.sqrt(x.size / case.c),
                               err_msg=f"{name} seed {seed}")


def test_fused_vmap_over_every_operand():
  rng = np.random.default_rng(fresh_seed())
  case = CASES[0]
  xs = jnp.asarray(rng.uniform(-1, 1, (3, *case.x_shape)), jnp.float32)
  ws = jnp.asarray(rng.uniform(-1, 1, (3, *case.kernel_shape)), jnp.float32)
  bs = jnp.asarray(rng.uniform(-1, 1, (3, case.c)), jnp.float32)
  conv = lambda impl: lambda x, w, b: depthwise_conv2d(x, w, bias=b, activation="gelu", implementation=impl,
                                                       precision=jax.lax.Precision.HIGHEST)
  with jax.default_device(CPU):
    for in_axes in [(0, None, None), (0, 0, 0), (None, 0, None), (None, None, 0)]:
      args = [a if ax == 0 else a[0] for a, ax in zip((xs, ws, bs), in_axes)]
      ours = jax.vmap(conv("flashdwc"), in_axes=in_axes)(*args)
      ref = jax.vmap(conv("xla"), in_axes=in_axes)(*args)
      np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), atol=2e-5, err_msg=str(in_axes))


@pytest.mark.parametrize("kwargs, error, match", [
    ({"activation": "tanh"}, ValueError, r"activation must be None or one of \('relu', 'gelu', 'gelu_tanh', "
                                         r"'silu'\); got 'tanh'"),
    ({"bias": jnp.ones((5,))}, ValueError, r"bias must have shape \(C,\) = \(4,\).*got \(5,\)"),
    ({"bias": jnp.ones((1, 4))}, ValueError, r"bias must have shape \(C,\) = \(4,\).*got \(1, 4\)"),
    ({"bias": jnp.ones((4,), jnp.bfloat16)}, TypeError, r"bias must have x's dtype float32; got bfloat16"),
])
def test_fused_bad_input_raises(kwargs, error, match):
  with pytest.raises(error, match=match):
    depthwise_conv2d(jnp.ones((1, 6, 6, 4)), jnp.ones((3, 3, 1, 4)), **kwargs)


def test_layer_with_activation_equals_conv_then_activation():
  from flax import linen as nn

  from jax_flashdwc.nn import DepthwiseConv2D

  x = jax.random.normal(jax.random.key(0), (2, 9, 10, 12))
  layer = DepthwiseConv2D(features=12, kernel_size=(5, 5), activation="silu")
  params = layer.init(jax.random.key(1), x)
  conv = nn.Conv(features=12, kernel_size=(5, 5), feature_group_count=12, precision=jax.lax.Precision.HIGHEST)
  ref = jax.nn.silu(conv.apply(params, x))
  np.testing.assert_allclose(np.asarray(layer.apply(params, x)), np.asarray(ref), atol=2e-5)
