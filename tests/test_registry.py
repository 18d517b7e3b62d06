"""The model-layer registry: every layer's three passes against the oracle, and the
routing rule of implementation=None against the committed layer benchmark.

The numerical test runs each distinct problem of tests/shapes.py's MODEL_LAYERS on a
reduced copy that keeps what picks a kernel (filter size, stride, dilation, padding,
the channel count modulo 64) and shrinks what only makes it long (batch 2, at most
96 channels, maps just large enough for the dilated filter to slide).
"""

import csv
import glob
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_flashdwc import _dilation, conv as conv_module, depthwise_conv2d, routing
from jax_flashdwc._geometry import make_geometry
from numerics import all_passes, assert_close, fresh_seed, oracle, pair, uniform
from shapes import MODEL_LAYERS, ConvCase

RESULTS = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results")


def _reduced(case: ConvCase) -> ConvCase:
  (dh, dw), (sh, sw) = pair(case.dilation), pair(case.strides)
  span_h, span_w = dh * (case.kh - 1) + 1, dw * (case.kw - 1) + 1
  h = min(case.h, span_h + 2 * sh + 3)
  w = min(case.w, span_w + 2 * sw + 5)
  c = case.c if case.c <= 96 else 64 + case.c % 64
  return ConvCase(case.name, 2, h, w, c, case.kh, case.kw, case.strides, case.padding, case.dilation)


def _distinct_problems():
  seen, cases = set(), []
  for layer in MODEL_LAYERS:
    r = _reduced(layer.case)
    key = (r.h, r.w, r.c, r.kh, r.kw, pair(r.strides), pair(r.dilation), str(r.padding))
    if key not in seen:
      seen.add(key)
      cases.append(r)
  return cases


REDUCED = _distinct_problems()


@pytest.mark.parametrize("dtype", [pytest.param(jnp.float32, id="F32"), pytest.param(jnp.bfloat16, id="BF16")])
@pytest.mark.parametrize("case", REDUCED, ids=lambda c: c.name.replace("/", "."))
def test_registry_layer_matches_oracle(case, dtype, device):
  seed = fresh_seed()
  rng = np.random.default_rng(seed)
  x, w = uniform(rng, case.x_shape, dtype), uniform(rng, case.kernel_shape, dtype)
  y_shape = oracle(x, w, case).shape
  dy = uniform(rng, y_shape, dtype)
  fn = jax.jit(lambda x, w, dy: all_passes(
      lambda x, w: depthwise_conv2d(x, w, implementation="flashdwc", **case.conv_kwargs()), x, w, dy))
  put = lambda a: jax.device_put(jnp.asarray(a, dtype), device)
  got = fn(put(x), put(w), put(dy))
  with jax.default_device(jax.devices("cpu")[0]):
    ref_fn = lambda x, w: oracle(x, w, case)
    ref = all_passes(ref_fn, jnp.asarray(x), jnp.asarray(w), jnp.asarray(dy))
    mag = all_passes(ref_fn, jnp.abs(jnp.asarray(x)), jnp.abs(jnp.asarray(w)), jnp.abs(jnp.asarray(dy)))
    xla = None
    if dtype != jnp.float32:
      xla = all_passes(lambda x, w: oracle(x, w, case, precision=None), jnp.asarray(x, dtype),
                       jnp.asarray(w, dtype), jnp.asarray(dy, dtype))
  positions = y_shape[0] * y_shape[1] * y_shape[2]
  for i, (name, length) in enumerate((("fwd", case.kh * case.kw), ("bwd_data", case.kh * case.kw),
                                      ("bwd_filter", positions))):
    assert got[i].shape == ref[i].shape and got[i].dtype == jnp.dtype(dtype)
    assert_close(got[i], ref[i], mag[i], length, dtype, None if xla is None else xla[i],
                 what=f"{name} {case.name}", seed=seed)


def _geometry(case, dtype):
  return make_geometry(jax.ShapeDtypeStruct(case.x_shape, dtype), jax.ShapeDtypeStruct(case.kernel_shape, dtype),
                       case.strides, case.padding, case.dilation)


def _layer_rows():
  """The rows of the newest committed layer benchmark (benchmarks/bench_layers.py)."""
  paths = sorted(glob.glob(os.path.join(RESULTS, "layers_*.csv")), key=os.path.getmtime)
  if not paths:
    return []
  with open(paths[-1]) as f:
    return list(csv.DictReader(f))




def _route(pass_name, case, dtype):
  """What implementation=None runs for a registry pass on the GPU."""
  return conv_module.route_under_none(pass_name, jax.ShapeDtypeStruct(case.x_shape, dtype), (case.kh, case.kw),
                                      _geometry(case, dtype))


def test_routing_rule_agrees_with_the_layer_benchmark():
  """Under the current rule, implementation=None never takes the slower side by more
  than the benchmark's noise, on any registry layer the committed benchmark measured."""
  rows = _layer_rows()
  if not rows:
    pytest.skip("no layer benchmark committed under benchmarks/results")
  layers = {(l.model, l.layer): l.case for l in MODEL_LAYERS}
  checked = 0
  wrong = []
  for row in rows:
    case = layers.get((row["model"], row["layer"]))
    if case is None:
      continue
    dtype = jnp.dtype(row["dtype"])
    route = _route(row["pass"], case, dtype)
    speedup = float(row["speedup"])
    # The spread between repeated runs of one layer: 5% (H200), and up to 10% where
    # the faster side takes under 0.05 ms (H100: XLA's 112x112x96 stride-2 forward took
    # 0.102 ms in one run and 0.114 in another).
    noise = 0.10 if min(float(row["ours_ms"]), float(row["xla_ms"])) < 0.05 else 0.05
    if (route == "flashdwc" and speedup < 1 - noise) or (route == "xla" and speedup > 1 + noise):
      wrong.append(f"{row['dtype']} {row['pass']} {case.name}: x{speedup} routed to {route}")
    checked += 1
  assert checked > 0
  assert not wrong, "\n".join(wrong)


def _lowered_pass(pass_name, case, dtype, implementation):
  """The StableHLO text of one pass of `case` under `implementation`, lowered for the CPU."""
  conv = lambda x, w: depthwise_conv2d(x, w, implementation=implementation, **case.conv_kwargs())
  x = jax.ShapeDtypeStruct(case.x_shape, dtype)
  w = jax.ShapeDtypeStruct(case.kernel_shape, dtype)
  y = jax.eval_shape(conv, x, w)
  if pass_name == "fwd":
    f, args = conv, (x, w)
  elif pass_name == "dx":
    f, args = (lambda dy, w: jax.linear_transpose(lambda x_: conv(x_, w), x)(dy)[0]), (y, w)
  else:
    f, args = (lambda x_, dy: jax.linear_transpose(lambda w_: conv(x_, w_), w)(dy)[0]), (x, y)
  with jax.default_device(jax.devices("cpu")[0]):
    return jax.jit(f).lower(*args).as_text()


@pytest.mark.parametrize("pass_name", routing.PASSES)
def test_flashdwc_never_routes_and_cpu_never_routes(pass_name):
  """implementation="flashdwc" lowers to this library's custom calls only, and on the
  CPU implementation=None does too, for every registry layer's pass (lowering only)."""
  for case in REDUCED[::3]:
    for implementation in ("flashdwc", None):
      text = _lowered_pass(pass_name, case, jnp.float32, implementation)
      assert "flashdwc_" in text and "convolution" not in text, (pass_name, case.name, implementation)


@pytest.mark.parametrize("pass_name", routing.PASSES)
def test_dilated_in_place_lowers_to_custom_calls_only(pass_name):
  """A dilated 3x3, 5x5 or 7x7 bf16 problem whose forward and input gradient read the
  residue classes in place (and whose filter gradient rearranges into sub-grids) lowers,
  under implementation="flashdwc" and None, to this library's custom calls and no XLA conv."""
  cases = [ConvCase("d3_k3", 2, 28, 28, 160, 3, 3, dilation=3),
           ConvCase("d2x3_k5_onesided", 1, 13, 29, 56, 5, 5, padding=((0, 8), (12, 0)), dilation=(2, 3)),
           ConvCase("van_d3_k7", 2, 28, 28, 64, 7, 7, dilation=3),
           ConvCase("d2_k7_on_7x7", 2, 7, 7, 160, 7, 7, dilation=2)]
  for case in cases:
    x = jax.ShapeDtypeStruct(case.x_shape, jnp.bfloat16)
    w = jax.ShapeDtypeStruct(case.kernel_shape, jnp.bfloat16)
    geometry = make_geometry(x, w, case.strides, case.padding, case.dilation)
    assert _dilation.in_place(case.x_shape, x.dtype, (case.kh, case.kw), geometry), case.name
    for implementation in ("flashdwc", None):
      text = _lowered_pass(pass_name, case, jnp.bfloat16, implementation)
      assert "flashdwc_" in text and "convolution" not in text, (pass_name, case.name, implementation)


def test_routing_rule_is_consulted_on_the_gpu(monkeypatch, device):
  """A rule that sends every pass to XLA makes implementation=None lower to XLA's conv
  on the GPU, and leaves implementation="flashdwc" on the library's kernels."""
  if device.platform == "cpu":
    pytest.skip("routing applies to the GPU lowering only")
  monkeypatch.setattr(routing, "XLA_RULES", (routing.XlaRule(routing.PASSES, lambda p: True, "test"),))
  case = REDUCED[0]
  x = jax.device_put(jnp.ones(case.x_shape, jnp.float32), device)
  w = jax.device_put(jnp.ones(case.kernel_shape, jnp.float32), device)
  for implementation, ours in ((None, False), ("flashdwc", True)):
    f = jax.jit(jax.grad(lambda x, w: depthwise_conv2d(x, w, implementation=implementation,
                                                       **case.conv_kwargs()).sum(), argnums=(0, 1)))
    text = f.lower(x, w).as_text()
    assert ("flashdwc_" in text) == ours and ("convolution" in text) != ours, implementation


def test_dilated_problems_on_subgrids_are_not_routed():
  """implementation=None binds the sub-grid passes of a dilated problem with routed=False:
  the rules judge undilated problems, and ours on the sub-grids is what was measured."""
  x = jnp.ones((2, 9, 9, 8), jnp.bfloat16)
  w = jnp.ones((3, 3, 1, 8), jnp.bfloat16)

  def routed_flags(dilation):
    jaxpr = jax.make_jaxpr(lambda x, w: depthwise_conv2d(x, w, kernel_dilation=dilation))(x, w)
    return [e.params["routed"] for e in jaxpr.eqns if "routed" in e.params]

  assert routed_flags(1) == [True]
  assert routed_flags(2) == [False]
  # 64 channels: the forward reads the residue classes in place (_dilation.in_place), also unrouted.
  x, w = jnp.ones((2, 9, 9, 64), jnp.bfloat16), jnp.ones((3, 3, 1, 64), jnp.bfloat16)
  assert routed_flags(2) == [False]

