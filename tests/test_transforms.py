"""jit, grad, vmap and friends on the custom calls, against the same transforms of XLA's conv."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jax_flashdwc import depthwise_conv2d
from numerics import fresh_seed, xla_conv
from shapes import GRAD_CASES, ConvCase

CASE = ConvCase("transform_s1", 2, 7, 6, 5, 3, 3)
CASE_S2 = ConvCase("transform_s2_d2", 2, 9, 8, 3, 3, 2, strides=2, dilation=(1, 2), padding=((2, 0), (1, 1)))


def _conv(case, implementation=None):
  if implementation == "xla":
    return lambda x, w: xla_conv(x, w, case)
  return lambda x, w: depthwise_conv2d(x, w, **case.conv_kwargs())


def _rand(rng, shape, device):
  return jax.device_put(jnp.asarray(rng.uniform(-1, 1, size=shape), jnp.float32), device)


def _close(a, b):
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-5)


def _subjaxprs(params):
  for value in params.values():
    for v in value if isinstance(value, (tuple, list)) else (value,):
      if hasattr(v, "eqns"):
        yield v
      elif hasattr(getattr(v, "jaxpr", None), "eqns"):
        yield v.jaxpr


def _count_eqns(jaxpr, name):
  """How many equations of primitive `name` the jaxpr holds, nested jaxprs included."""
  return sum((eqn.primitive.name == name) + sum(_count_eqns(j, name) for j in _subjaxprs(eqn.params))
             for eqn in jaxpr.eqns)


@pytest.mark.parametrize("case", [CASE, CASE_S2], ids=lambda c: c.name)
@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (0, 0), (2, None), (None, 3), (4, 1)],
                         ids=str)
def test_vmap_matches_xla_and_is_one_call(case, in_axes, device):
  rng = np.random.default_rng(fresh_seed())
  b = 3
  x_shape, w_shape = list(case.x_shape), list(case.kernel_shape)
  if in_axes[0] is not None:
    x_shape.insert(in_axes[0], b)
  if in_axes[1] is not None:
    w_shape.insert(in_axes[1], b)
  x, w = _rand(rng, x_shape, device), _rand(rng, w_shape, device)
  ours = jax.jit(jax.vmap(_conv(case), in_axes=in_axes))
  _close(ours(x, w), jax.vmap(_conv(case, "xla"), in_axes=in_axes)(x, w))
  # A real batching rule: one custom call for the whole batch, no loop.
  jaxpr = jax.make_jaxpr(jax.vmap(_conv(case), in_axes=in_axes))(x, w).jaxpr
  assert _count_eqns(jaxpr, "flashdwc_dwconv_fwd") == 1
  assert _count_eqns(jaxpr, "while") == 0


@pytest.mark.parametrize("case", [CASE, CASE_S2], ids=lambda c: c.name)
def test_grad_of_vmap(case, device):
  rng = np.random.default_rng(fresh_seed())
  xs = _rand(rng, (3, *case.x_shape), device)
  ws = _rand(rng, (3, *case.kernel_shape), device)

  def loss(conv, xs, ws):
    return jnp.sum(jnp.sin(jax.vmap(conv)(xs, ws)))

  ours = jax.jit(jax.grad(partial(loss, _conv(case)), argnums=(0, 1)))(xs, ws)
  _close(ours, jax.grad(partial(loss, _conv(case, "xla")), argnums=(0, 1))(xs, ws))


@pytest.mark.parametrize("case", [CASE, CASE_S2], ids=lambda c: c.name)
def test_vmap_of_grad_and_nested_vmap(case, device):
  rng = np.random.default_rng(fresh_seed())
  xs = _rand(rng, (2, 3, *case.x_shape), device)
  w = _rand(rng, case.kernel_shape, device)

  def grads(conv):
    g = jax.grad(lambda x, w: jnp.sum(conv(x, w) ** 2), argnums=(0, 1))
    return jax.jit(jax.vmap(jax.vmap(g, in_axes=(0, None)), in_axes=(0, None)))

  _close(grads(_conv(case))(xs, w), grads(_conv(case, "xla"))(xs, w))


def test_value_and_grad_and_checkpoint(device):
  rng = np.random.default_rng(fresh_seed())
  x, w = _rand(rng, CASE.x_shape, device), _rand(rng, CASE.kernel_shape, device)

  def loss(conv, x, w):
    h = jax.nn.gelu(conv(x, w))
    return jnp.mean(conv(h, w) ** 2)

  for wrap in (lambda f: f, jax.checkpoint):
    ours = jax.jit(jax.value_and_grad(wrap(partial(loss, _conv(CASE))), argnums=(0, 1)))(x, w)
    ref = jax.value_and_grad(partial(loss, _conv(CASE, "xla")), argnums=(0, 1))(x, w)
    _close(ours, ref)


def test_donated_input(device):
  rng = np.random.default_rng(fresh_seed())
  x, w = _rand(rng, CASE.x_shape, device), _rand(rng, CASE.kernel_shape, device)
  expected = _conv(CASE, "xla")(x, w)
  donating = jax.jit(_conv(CASE), donate_argnums=(0,))
  _close(donating(x, w), expected)


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_check_grads(case):
  rng = np.random.default_rng(fresh_seed())
  cpu = jax.devices("cpu")[0]
  x, w = _rand(rng, case.x_shape, cpu), _rand(rng, case.kernel_shape, cpu)
  check_grads(_conv(case), (x, w), order=1, modes=("rev",), atol=1e-2, rtol=1e-2)


def test_eager_call_without_jit():
  rng = np.random.default_rng(fresh_seed())
  x = np.asarray(rng.uniform(-1, 1, size=CASE.x_shape), np.float32)
  w = np.asarray(rng.uniform(-1, 1, size=CASE.kernel_shape), np.float32)
  _close(depthwise_conv2d(x, w), _conv(CASE, "xla")(x, w))


def test_xla_implementation_is_xla():
  rng = np.random.default_rng(fresh_seed())
  x = jnp.asarray(rng.uniform(-1, 1, size=CASE.x_shape), jnp.float32)
  w = jnp.asarray(rng.uniform(-1, 1, size=CASE.kernel_shape), jnp.float32)
  jaxpr = jax.make_jaxpr(lambda x, w: depthwise_conv2d(x, w, implementation="xla"))(x, w).jaxpr
  assert _count_eqns(jaxpr, "flashdwc_dwconv_fwd") == 0
  assert _count_eqns(jaxpr, "conv_general_dilated") == 1


# Forward mode and higher orders: the three passes are bilinear primitives that are
# each other's transposes (ops.py), so these run on the library's kernels.
@pytest.mark.parametrize("case", [CASE, CASE_S2], ids=lambda c: c.name)
def test_jvp_and_jacfwd_match_xla(case):
  rng = np.random.default_rng(fresh_seed())
  cpu = jax.devices("cpu")[0]
  x, w = _rand(rng, case.x_shape, cpu), _rand(rng, case.kernel_shape, cpu)
  tx, tw = _rand(rng, case.x_shape, cpu), _rand(rng, case.kernel_shape, cpu)
  ours = jax.jit(lambda *a: jax.jvp(_conv(case), a[:2], a[2:]))(x, w, tx, tw)
  _close(ours, jax.jvp(_conv(case, "xla"), (x, w), (tx, tw)))
  small = x[:1]
  _close(jax.jacfwd(_conv(case), argnums=1)(small, w), jax.jacfwd(_conv(case, "xla"), argnums=1)(small, w))
  jaxpr = jax.make_jaxpr(lambda *a: jax.jvp(_conv(case), a[:2], a[2:]))(x, w, tx, tw).jaxpr
  assert _count_eqns(jaxpr, "flashdwc_dwconv_fwd") == 3
  assert _count_eqns(jaxpr, "conv_general_dilated") == 0


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_check_grads_second_order_both_modes(case):
  rng = np.random.default_rng(fresh_seed())
  cpu = jax.devices("cpu")[0]
  x, w = _rand(rng, case.x_shape, cpu), _rand(rng, case.kernel_shape, cpu)
  check_grads(_conv(case), (x, w), order=2, modes=("fwd", "rev"), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("case", [CASE, CASE_S2], ids=lambda c: c.name)
def test_grad_of_grad_and_hessian_vector_product_match_xla(case):
  rng = np.random.default_rng(fresh_seed())
  cpu = jax.devices("cpu")[0]
  x, w = _rand(rng, case.x_shape, cpu), _rand(rng, case.kernel_shape, cpu)
  v = _rand(rng, case.kernel_shape, cpu)

  def penalty(conv):
    # A gradient penalty: the norm of the input gradient, differentiated in w.
    def inner(x, w):
      return jnp.sum(jnp.tanh(conv(x, w)))
    return lambda x, w: jnp.sum(jax.grad(inner)(x, w) ** 2)

  _close(jax.jit(jax.grad(penalty(_conv(case)), argnums=(0, 1)))(x, w),
         jax.grad(penalty(_conv(case, "xla")), argnums=(0, 1))(x, w))

  def hvp(conv):
    loss = lambda w: jnp.sum(jnp.sin(conv(x, w)))
    return jax.jvp(jax.grad(loss), (w,), (v,))[1]

  _close(jax.jit(lambda: hvp(_conv(case)))(), hvp(_conv(case, "xla")))


def test_fused_forward_mode_and_second_order():
  rng = np.random.default_rng(fresh_seed())
  cpu = jax.devices("cpu")[0]
  x, w = _rand(rng, CASE.x_shape, cpu), _rand(rng, CASE.kernel_shape, cpu)
  b, scale, shift = (_rand(rng, (CASE.c,), cpu) for _ in range(3))

  def layer(implementation):
    return lambda x, w, b, scale, shift: depthwise_conv2d(
        x, w, bias=b, activation="gelu", input_scale=scale, input_shift=shift, input_activation="silu",
        implementation=implementation)

  args = (x, w, b, scale, shift)
  tangents = tuple(_rand(rng, a.shape, cpu) for a in args)
  _close(jax.jvp(layer(None), args, tangents), jax.jvp(layer("xla"), args, tangents))
  second = lambda f: jax.grad(lambda *a: jnp.sum(jax.grad(lambda *a: jnp.sum(f(*a) ** 2), argnums=(0, 1))(*a)[0]),
                              argnums=(1, 2, 3, 4))
  _close(second(layer(None))(*args), second(layer("xla"))(*args))


def test_vmap_over_zero_elements():
  rng = np.random.default_rng(fresh_seed())
  cpu = jax.devices("cpu")[0]
  w = _rand(rng, (0, *CASE.kernel_shape), cpu)
  x = _rand(rng, (0, *CASE.x_shape), cpu)
  out = jax.vmap(_conv(CASE))(x, w)
  assert out.shape == (0, *jax.eval_shape(_conv(CASE, "xla"), jnp.zeros(CASE.x_shape),
                                            jnp.zeros(CASE.kernel_shape)).shape)
  grads = jax.grad(lambda x, w: jnp.sum(jax.vmap(_conv(CASE))(x, w)), argnums=(0, 1))(x, w)
  assert grads[0].shape == x.shape and grads[1].shape == w.shape
