"""Tall half-precision filters (SLaK's 51x5) run as the transposed problem: the rule,
and every pass against the oracle, with asymmetric padding, fusions and vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numerics import CPU, all_passes, assert_close, fresh_seed, oracle, uniform
from shapes import ConvCase

from jax_flashdwc import conv, depthwise_conv2d
from jax_flashdwc._geometry import ConvGeometry

# Non-square maps and padding different on every side, so that a height/width mix-up
# in the transposed geometry changes the result.
TALL_CASES = [
    ConvCase("tall_51x5", 2, 20, 13, 8, 51, 5),
    ConvCase("tall_13x3_asym", 1, 17, 9, 16, 13, 3, padding=((5, 8), (0, 2))),
    ConvCase("tall_15x6_valid", 2, 19, 11, 8, 15, 6, padding="VALID"),
]
HALF_DTYPES = [pytest.param(jnp.float16, id="F16"), pytest.param(jnp.bfloat16, id="BF16")]
UNIT = ConvGeometry(strides=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1))


@pytest.mark.parametrize("dtype, kernel_hw, geometry, expected", [
    (jnp.bfloat16, (51, 5), UNIT, True),
    (jnp.float16, (13, 6), UNIT, True),
    (jnp.bfloat16, (12, 5), UNIT, False),  # not tall enough
    (jnp.bfloat16, (51, 7), UNIT, False),  # wide enough for the tensor-core forward
    (jnp.bfloat16, (5, 51), UNIT, False),
    (jnp.float32, (51, 5), UNIT, False),  # no tensor-core kernels in fp32
    (jnp.bfloat16, (51, 5), ConvGeometry((2, 1), ((0, 0), (0, 0)), (1, 1)), False),
    (jnp.bfloat16, (51, 5), ConvGeometry((1, 1), ((0, 0), (0, 0)), (1, 2)), False),
])
def test_transpose_rule(dtype, kernel_hw, geometry, expected):
  assert conv._runs_transposed(dtype, kernel_hw, geometry) is expected


def test_geometry_transposed_swaps_every_field():
  g = ConvGeometry(strides=(1, 2), padding=((1, 2), (3, 4)), dilation=(5, 6))
  t = g.transposed()
  assert t == ConvGeometry(strides=(2, 1), padding=((3, 4), (1, 2)), dilation=(6, 5))
  assert t.output_hw((30, 40), (3, 2)) == g.output_hw((40, 30), (2, 3))[::-1]


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_tall_filter_lowers_to_the_transposed_problem(dtype):
  x = jnp.zeros((1, 20, 13, 8), dtype)
  w = jnp.zeros((51, 5, 1, 8), dtype)
  # A new function each time: make_jaxpr caches traces by function.
  primitives = lambda: {e.primitive.name for e in jax.make_jaxpr(lambda x, w: depthwise_conv2d(x, w))(x, w).jaxpr.eqns}
  assert "transpose" in primitives()
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(conv, "TRANSPOSE_TALL_FILTERS", False)
    assert "transpose" not in primitives()


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("case", TALL_CASES, ids=lambda c: c.name)
def test_tall_filter_passes_match_oracle(case, dtype, device):
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x, w = uniform(rng, case.x_shape, dtype), uniform(rng, case.kernel_shape, dtype)
  dy = uniform(rng, oracle(x, w, case).shape, dtype)
  put = lambda a: jax.device_put(jnp.asarray(a, dtype), device)
  conv_fn = lambda x, w: depthwise_conv2d(x, w, implementation="flashdwc", **case.conv_kwargs())
  y, dx, dw = jax.jit(lambda x, w, dy: all_passes(conv_fn, x, w, dy))(put(x), put(w), put(dy))

  ref_fn = lambda x, w: oracle(x, w, case)
  with jax.default_device(CPU):
    args = [jnp.asarray(a) for a in (x, w, dy)]
    ref = all_passes(ref_fn, *args)
    mag = all_passes(ref_fn, *map(jnp.abs, args))
    xla = all_passes(lambda x, w: oracle(x, w, case, precision=None), *[a.astype(dtype) for a in args])
  positions = int(np.prod(dy.shape[:3]))
  lengths = (case.kh * case.kw, case.kh * case.kw, positions)
  for name, out, r, m, xo, length in zip(("fwd", "bwd_data", "bwd_filter"), (y, dx, dw), ref, mag, xla, lengths):
    assert_close(out, r, m, length, dtype, xo, what=f"{name} {case.name}", seed=seed)


@pytest.mark.parametrize("case", TALL_CASES[1:2], ids=lambda c: c.name)
def test_tall_filter_with_fusions_and_vmap(case, device):
  """Bias, activation and the input prologue are per channel, so they carry over the
  transposition; vmap adds a leading axis that the transposes must skip."""
  dtype = jnp.bfloat16
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  batch = 2
  x = uniform(rng, (batch,) + case.x_shape, dtype)
  w = uniform(rng, case.kernel_shape, dtype)
  b, scale, shift = (uniform(rng, (case.c,), dtype) for _ in range(3))
  kwargs = dict(bias=jnp.asarray(b, dtype), activation="gelu", input_scale=scale, input_shift=shift,
                input_activation="relu", **case.conv_kwargs())

  def loss(implementation, x, w):
    y = jax.vmap(lambda x: depthwise_conv2d(x, w, implementation=implementation, **kwargs))(x)
    return jnp.sum(y.astype(jnp.float32) * jnp.cos(jnp.arange(y.size).reshape(y.shape)))

  put = lambda a: jax.device_put(jnp.asarray(a, dtype), device)
  value, (dx, dw) = jax.jit(jax.value_and_grad(lambda x, w: loss(None, x, w), argnums=(0, 1)))(put(x), put(w))
  with jax.default_device(CPU):
    f32 = lambda a: jnp.asarray(a, jnp.float32)
    kwargs["bias"] = f32(b)
    ref_value, (dx_ref, dw_ref) = jax.value_and_grad(lambda x, w: loss("xla", x, w), argnums=(0, 1))(f32(x), f32(w))
  # Loose bounds: bf16 rounding of z before the activation and of every output; the
  # oracle tests above hold the tight ones. A swapped height and width fails these by
  # orders of magnitude.
  np.testing.assert_allclose(float(value), float(ref_value), rtol=2e-2, atol=1.0, err_msg=f"seed {seed}")
  for name, got, ref in (("dx", dx, dx_ref), ("dw", dw, dw_ref)):
    got = np.asarray(jnp.asarray(got, jnp.float32))
    ref = np.asarray(ref)
    scale_ref = np.abs(ref).max()
    assert np.abs(got - ref).max() <= 3e-2 * scale_ref, f"{name} seed {seed}"
