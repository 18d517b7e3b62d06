"""Every bad input raises a ValueError or TypeError that names the argument."""

import jax.numpy as jnp
import numpy as np
import pytest

from jax_flashdwc import depthwise_conv2d

X = jnp.ones((2, 8, 8, 4), jnp.float32)
W = jnp.ones((3, 3, 1, 4), jnp.float32)


@pytest.mark.parametrize("x, kernel, kwargs, error, match", [
    (jnp.ones((8, 8, 4)), W, {}, ValueError, r"x must have rank 4 \(N, H, W, C\); got shape \(8, 8, 4\)"),
    (X, jnp.ones((3, 3, 4)), {}, ValueError, r"kernel must have shape \(KH, KW, 1, C\).*got shape \(3, 3, 4\)"),
    (X, jnp.ones((3, 3, 2, 4)), {}, ValueError, r"kernel must have shape \(KH, KW, 1, C\).*\(3, 3, 2, 4\)"),
    (X, jnp.ones((3, 3, 1, 5)), {}, ValueError, r"kernel has 5 channels but x has 4"),
    (jnp.ones((2, 8, 8, 0)), jnp.ones((3, 3, 1, 0)), {}, ValueError, r"x must have at least one channel"),
    (X, jnp.ones((0, 3, 1, 4)), {}, ValueError, r"kernel must have KH, KW >= 1"),
    (X.astype(jnp.int32), W.astype(jnp.int32), {}, TypeError,
     r"x dtype must be one of float32, float16, bfloat16, float64; got int32"),
    (X.astype(jnp.float16), W, {}, TypeError, r"x and kernel must have the same dtype; got x float16"),
    (X, W.astype(jnp.bfloat16), {}, TypeError, r"same dtype; got x float32 and kernel bfloat16"),
    ([[1.0]], W, {}, TypeError, r"x must be an array; got list"),
    (X, W, {"strides": 0}, ValueError, r"strides must be >= 1 in both dimensions; got 0"),
    (X, W, {"strides": (1, -2)}, ValueError, r"strides must be >= 1.*\(1, -2\)"),
    (X, W, {"strides": (1, 2, 3)}, TypeError, r"strides must be an int or a pair of ints"),
    (X, W, {"strides": 1.5}, TypeError, r"strides must be an int or a pair of ints"),
    (X, W, {"kernel_dilation": 0}, ValueError, r"kernel_dilation must be >= 1"),
    (X, W, {"kernel_dilation": "2"}, TypeError, r"kernel_dilation must be an int or a pair"),
    (X, W, {"padding": "FULL"}, ValueError, r"padding must be one of SAME, SAME_LOWER, VALID.*'FULL'"),
    (X, W, {"padding": -5}, ValueError, r"negative padding crops more than the input holds: padding -5"),
    (X, W, {"padding": ((-4, -5), (0, 0))}, ValueError, r"negative padding crops more than the input holds"),
    (X, W, {"padding": ((1, 1, 1), (0, 0))}, TypeError, r"padding must be 'SAME', 'VALID'"),
    (X, W, {"padding": (1, 2, 3)}, TypeError, r"padding must be 'SAME', 'VALID'"),
    (X, W, {"padding": 1.0}, TypeError, r"padding must be 'SAME', 'VALID'"),
    (X, jnp.ones((10, 3, 1, 4)), {"padding": "VALID"}, ValueError,
     r"the output would be empty.*\(Ho, Wo\) = \(-1, 6\)"),
    (X, W, {"padding": "VALID", "kernel_dilation": 5}, ValueError, r"the output would be empty"),
    (X.astype(jnp.float16), W.astype(jnp.float16), {"padding": -1, "implementation": "cudnn"}, ValueError,
     r"implementation must be None"),
    (X, W, {"implementation": "cudnn"}, ValueError,
     r"implementation must be None or one of \('flashdwc', 'xla'\); got 'cudnn'"),
])
def test_bad_input_raises(x, kernel, kwargs, error, match):
  with pytest.raises(error, match=match):
    depthwise_conv2d(x, kernel, **kwargs)


def test_errors_raise_at_trace_time_under_jit():
  import jax

  with pytest.raises(ValueError, match="kernel has 5 channels"):
    jax.jit(depthwise_conv2d)(X, jnp.ones((3, 3, 1, 5)))


def test_numpy_inputs_are_accepted():
  out = depthwise_conv2d(np.ones((1, 4, 4, 2), np.float32), np.ones((3, 3, 1, 2), np.float32))
  assert out.shape == (1, 4, 4, 2)


# Malformed calls straight to the FFI targets (bypassing the Python checks) must come
# back as errors from the handler, never crash the process.
def _raw_call(target, a, b, out_shape, geometry):
  import jax

  result = jax.ShapeDtypeStruct(out_shape, a.dtype)
  if target == "flashdwc_bwd_filter" and jax.default_backend() == "gpu":
    # The CUDA filter gradient also returns its fp32 workspace.
    workspace = jax.ShapeDtypeStruct((1 << 20,), jnp.float32)
    return jax.ffi.ffi_call(target, (result, workspace))(a, b, geometry=geometry, deterministic=False)[0]
  return _call_with_workspace(target, result)(a, b, geometry=geometry)


def _call_with_workspace(target, result):
  """The CUDA forward and input gradient also return a uint8 workspace (the Hopper
  forward's planar copies); one byte is enough for a call that the handler refuses."""
  import jax

  if jax.default_backend() != "gpu":
    return jax.ffi.ffi_call(target, result)
  call = jax.ffi.ffi_call(target, (result, jax.ShapeDtypeStruct((1,), jnp.uint8)))
  return lambda *operands, **attrs: call(*operands, **attrs)[0]


GOOD_GEOMETRY = {k: np.int64(v) for k, v in dict(stride_h=1, stride_w=1, pad_top=1, pad_left=1, dilation_h=1,
                                                   dilation_w=1).items()}


@pytest.mark.parametrize("target, a_shape, b_shape, out_shape, geometry, match", [
    ("flashdwc_fwd", (2, 8, 8, 4), (3, 3, 1, 5), (2, 8, 8, 4), GOOD_GEOMETRY, "inconsistent shapes"),
    ("flashdwc_fwd", (2, 8, 8, 4), (3, 3, 2, 4), (2, 8, 8, 4), GOOD_GEOMETRY, "inconsistent shapes"),
    ("flashdwc_fwd", (2, 8, 8, 4), (3, 3, 1, 4), (3, 8, 8, 4), GOOD_GEOMETRY, "inconsistent shapes"),
    ("flashdwc_bwd_data", (2, 8, 8, 4), (3, 3, 1, 4), (8, 8, 4), GOOD_GEOMETRY, "rank-4"),
    ("flashdwc_bwd_filter", (2, 8, 8, 4), (2, 8, 8, 4), (3, 3, 1, 4), {**GOOD_GEOMETRY, "stride_h": np.int64(0)},
     "strides and dilations must be >= 1"),
    ("flashdwc_fwd", (2, 8, 8, 4), (3, 3, 1, 4), (2, 8, 8, 4), {"stride_h": np.int64(1)}, "attribute"),
])
def test_malformed_ffi_call_returns_an_error(target, a_shape, b_shape, out_shape, geometry, match):
  import jax

  if len(geometry) < len(GOOD_GEOMETRY) and jax.default_backend() == "gpu":
    # Measured on the H200 (jax 0.11.2): the handler's decoder reports the missing
    # struct members, as on the CPU, but the process then dies with SIGSEGV inside
    # XLA's GPU runtime. jax_flashdwc's own ops always pass every member.
    pytest.skip("XLA's GPU runtime crashes on a struct attribute with missing members")
  a, b = jnp.ones(a_shape, jnp.float32), jnp.ones(b_shape, jnp.float32)
  with pytest.raises(Exception, match=match):
    jax.block_until_ready(jax.jit(lambda a, b: _raw_call(target, a, b, out_shape, geometry))(a, b))


def test_ffi_call_with_integer_buffers_returns_an_error():
  import jax

  a, b = jnp.ones((1, 4, 4, 2), jnp.int32), jnp.ones((3, 3, 1, 2), jnp.int32)
  with pytest.raises(Exception, match="unsupported element type"):
    jax.block_until_ready(jax.jit(lambda a, b: _raw_call("flashdwc_fwd", a, b, (1, 4, 4, 2), GOOD_GEOMETRY))(a, b))


@pytest.mark.parametrize("bias_shape, scale, activation, prologue, match", [
    ((5,), jnp.ones((4,), jnp.float32), 0, -1, r"bias must be \(C,\) or \(0,\)"),
    ((4,), jnp.ones((4,), jnp.float32), 9, -1, r"activation must be in \[0, 5\)"),
    ((4,), jnp.ones((4,), jnp.float32), 0, 5, r"prologue must be -1 \(none\) or an activation"),
    ((4,), jnp.ones((3,), jnp.float32), 0, 1, r"scale and shift must be \(C,\) float32"),
    ((4,), jnp.ones((4,), jnp.bfloat16), 0, 1, r"scale and shift must be \(C,\) float32"),
])
def test_malformed_fused_ffi_call_returns_an_error(bias_shape, scale, activation, prologue, match):
  import jax

  x, w = jnp.ones((2, 8, 8, 4), jnp.float32), jnp.ones((3, 3, 1, 4), jnp.float32)
  bias, shift = jnp.ones(bias_shape, jnp.float32), jnp.zeros((4,), jnp.float32)
  call = _call_with_workspace("flashdwc_fwd_fused", jax.ShapeDtypeStruct(x.shape, x.dtype))
  fn = lambda *ops: call(*ops, geometry=GOOD_GEOMETRY, activation=np.int64(activation), prologue=np.int64(prologue))
  with pytest.raises(Exception, match=match):
    jax.block_until_ready(jax.jit(fn)(x, w, bias, scale, shift))
