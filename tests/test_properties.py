"""Property-based tests: all three passes against the oracle over random problems.

Hypothesis draws the problem (sizes, strides, dilation, padding, dtype) and a
seed for the data; the run is derandomized with a fixed number of examples, so a
failure in CI replays exactly and hypothesis prints the falsifying example. Each
runs on the CPU handlers and, where there is a GPU, on the CUDA ones;
FLASHDWC_PROPERTY_EXAMPLES raises the number of examples for a larger sweep
(60 by default).
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, given, settings, strategies as st  # noqa: E402

from jax_flashdwc import depthwise_conv2d  # noqa: E402
from numerics import all_passes, assert_close, oracle, uniform  # noqa: E402
from shapes import ConvCase  # noqa: E402

CPU = jax.devices("cpu")[0]
EXAMPLES = int(os.environ.get("FLASHDWC_PROPERTY_EXAMPLES", "60"))


@st.composite
def problems(draw):
  kh, kw = draw(st.integers(1, 7)), draw(st.integers(1, 7))
  padding = draw(st.one_of(
      st.sampled_from(["SAME", "VALID"]),
      st.integers(0, 4),
      st.tuples(st.tuples(st.integers(0, 4), st.integers(0, 4)), st.tuples(st.integers(0, 4), st.integers(0, 4)))))
  case = ConvCase("property", n=draw(st.integers(1, 3)), h=draw(st.integers(1, 12)), w=draw(st.integers(1, 12)),
                  c=draw(st.integers(1, 40)), kh=kh, kw=kw,
                  strides=(draw(st.integers(1, 3)), draw(st.integers(1, 3))), padding=padding,
                  dilation=(draw(st.integers(1, 2)), draw(st.integers(1, 2))))
  dtype = draw(st.sampled_from([jnp.float32, jnp.bfloat16, jnp.float16]))
  return case, dtype, draw(st.integers(0, 2**32 - 1))


def _output_hw(case):
  y = jax.eval_shape(lambda x, w: oracle(x, w, case), jax.ShapeDtypeStruct(case.x_shape, jnp.float32),
                     jax.ShapeDtypeStruct(case.kernel_shape, jnp.float32))
  return y.shape


# The device fixture is the same for every example, so sharing it is intended.
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, print_blob=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(problem=problems())
def test_all_passes_match_oracle(problem, device):
  case, dtype, seed = problem
  try:
    y_shape = _output_hw(case)
  except Exception:
    y_shape = (0,)
  assume(min(y_shape) > 0)
  rng = np.random.default_rng(seed)
  x, w = uniform(rng, case.x_shape, dtype), uniform(rng, case.kernel_shape, dtype)
  dy = uniform(rng, y_shape, dtype)
  put = lambda a: jax.device_put(jnp.asarray(a, dtype), device)
  y, dx, dw = jax.jit(lambda x, w, dy: all_passes(
      lambda x, w: depthwise_conv2d(x, w, implementation="flashdwc", **case.conv_kwargs()), x, w, dy))(
          put(x), put(w), put(dy))
  hi = lambda x, w: oracle(x, w, case)
  with jax.default_device(CPU):
    refs = all_passes(hi, jnp.asarray(x), jnp.asarray(w), jnp.asarray(dy))
    mags = all_passes(hi, jnp.abs(jnp.asarray(x)), jnp.abs(jnp.asarray(w)), jnp.abs(jnp.asarray(dy)))
  positions = y_shape[0] * y_shape[1] * y_shape[2]
  for name, out, ref, mag, k in (("fwd", y, refs[0], mags[0], case.kh * case.kw),
                                 ("bwd_data", dx, refs[1], mags[1], case.kh * case.kw),
                                 ("bwd_filter", dw, refs[2], mags[2], positions)):
    assert_close(out, ref, mag, k, dtype, what=f"{name} {case}", seed=seed)
