"""`depthwise_conv2d`: the differentiable public function."""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from . import _activations, _dilation, _ffi, ops, routing
from ._geometry import ConvGeometry, make_geometry
from .reference import depthwise_conv2d_xla

IMPLEMENTATIONS = ("flashdwc", "xla")

# fp16/bf16 filters much taller than wide, SLaK's 51x5 strips, run as the transposed
# problem (x's H and W exchanged, the filter's KH and KW): the fast kernels are keyed
# on the filter width. A 51x5 filter found the row-stream kernel closed (KH > 16) and
# the tensor-core kernels too narrow (forward from KW = 7, filter gradient from
# KW = 13), and ran on the GEMV and split CUDA-core kernels; as 5x51 it takes the
# tensor-core ones. The transposes (x and y going forward, dy and dx going back) are
# memory passes, small against 255 taps a pixel: SLaK-T's bf16 training step at batch
# 64 took 36.55 ms against 40.79 ms direct on the H200 (docs/design-notes.md).
# Set to False to time the direct path (--tall-filters direct in benchmarks/).
# The bounds are kernel-choice thresholds of the native plan (csrc/plan/thresholds.h).
TRANSPOSE_TALL_FILTERS = True
_TALL_MIN_KERNEL_H = _ffi.plan_thresholds()["tall_filter_min_kernel_h"]
_TALL_MAX_KERNEL_W = _ffi.plan_thresholds()["tall_filter_max_kernel_w"]


def route_under_none(pass_name: str, x, kernel_hw, geometry: ConvGeometry, platform: str = "cuda") -> str:
  """What implementation=None runs for one pass of an unfused problem on `platform`,
  following depthwise_conv2d below: negative padding cropped, dead taps cut, then
  "flashdwc" for a dilated stride-1 problem (its sub-grid passes are not routed), else
  what routing.py's rule says of the problem the kernels would get (tall filters with
  H and W exchanged). x is the forward's input (an array, or anything with shape and
  dtype)."""
  n, h, w, c = x.shape
  crops, geometry = geometry.cropped()
  h, w = h - sum(crops[0]), w - sum(crops[1])
  (rows, cols), geometry = geometry.live_taps((h, w), kernel_hw)
  kernel_hw = (rows[1] - rows[0] + 1, cols[1] - cols[0] + 1)
  if _dilation.applies(geometry, prologue=False):
    return "flashdwc"
  if _runs_transposed(x.dtype, kernel_hw, geometry):
    h, w, kernel_hw, geometry = w, h, kernel_hw[::-1], geometry.transposed()
  return routing.route(pass_name, jax.ShapeDtypeStruct((n, h, w, c), x.dtype), kernel_hw, geometry,
                       platform=platform)


def _is_zero(t):
  return type(t) is SymbolicZero


def _tangent_sum(terms, like):
  terms = [t for t in terms if t is not None]
  if not terms:
    return jnp.zeros(like.shape, like.dtype)
  total = terms[0]
  for t in terms[1:]:
    total = total + t
  return total


@partial(jax.custom_jvp, nondiff_argnums=(5, 6, 7, 8, 9, 10))
def _dwconv_fused(x, kernel, bias, scale, shift, geometry: ConvGeometry, activation, prologue: bool,
                  input_activation, deterministic: bool, routed: bool):
  return ops.dwconv_fwd_fused(x, kernel, bias, scale, shift, geometry, activation, prologue, input_activation)


def _dwconv_fused_jvp(geometry, activation, prologue, input_activation, deterministic, routed, primals,
                      tangents):
  # The kernel stores the pre-activation z = conv(x', w) + bias; XLA applies the
  # activation (one elementwise pass, usually fused onward). The tangent of z is
  # conv(tx', w) + conv(x', tw) + tbias on the bilinear primitives, so reverse mode
  # (its transpose) and every higher order run on this library's kernels too.
  x, kernel, bias, scale, shift = primals
  tx, tkernel, tbias, tscale, tshift = tangents
  # z through this same custom_jvp function, so that a second differentiation of
  # this rule finds its rule again.
  z = _dwconv_fused(x, kernel, bias, scale, shift, geometry, None, prologue, input_activation, deterministic,
                    routed)
  x_in, tx_in = x, None if _is_zero(tx) else tx
  if prologue:
    # x' and its tangent, recomputed by XLA in one elementwise pass rather than
    # saved by the forward kernel.
    xf = x.astype(jnp.float32)
    u_terms = [None if _is_zero(tx) else tx.astype(jnp.float32) * scale,
               None if _is_zero(tscale) else xf * tscale,
               None if _is_zero(tshift) else jnp.broadcast_to(tshift, x.shape)]
    apply_input = lambda u: _activations.apply(input_activation, u)
    u = xf * scale + shift
    if all(t is None for t in u_terms):
      x_in, tx_in = apply_input(u).astype(x.dtype), None
    else:
      x_prime, tx_prime = jax.jvp(apply_input, (u,), (_tangent_sum(u_terms, u),))
      x_in, tx_in = x_prime.astype(x.dtype), tx_prime.astype(x.dtype)
  conv = lambda a, b: ops.dwconv_fwd(a, b, geometry, deterministic, routed)
  tz = _tangent_sum([None if tx_in is None else conv(tx_in, kernel),
                     None if _is_zero(tkernel) else conv(x_in, tkernel),
                     None if _is_zero(tbias) else jnp.broadcast_to(tbias.astype(jnp.float32), z.shape).astype(z.dtype)], z)
  return jax.jvp(lambda z: _activations.apply(activation, z), (z,), (tz,))


_dwconv_fused.defjvp(_dwconv_fused_jvp, symbolic_zeros=True)


def _runs_transposed(dtype, kernel_hw, geometry: ConvGeometry) -> bool:
  """Whether depthwise_conv2d runs this problem with H and W exchanged."""
  kh, kw = kernel_hw
  return (TRANSPOSE_TALL_FILTERS and jnp.dtype(dtype) != jnp.dtype(jnp.float32)
          and kh >= _TALL_MIN_KERNEL_H and kw <= _TALL_MAX_KERNEL_W
          and geometry.strides == (1, 1) and geometry.dilation == (1, 1))


def _swap_hw(a):
  """(N, H, W, C) -> (N, W, H, C)."""
  return jnp.swapaxes(a, 1, 2)


def _per_channel(name, value, channels):
  """`value` as a (C,) array, or a ValueError naming `name`."""
  value = jnp.asarray(value)
  if value.shape != (channels,):
    raise ValueError(f"{name} must have shape (C,) = ({channels},), one value per channel; got {value.shape}")
  return value


def _float_per_channel(name, value, channels):
  """`value` as a (C,) float32 array, or a TypeError / ValueError naming `name`."""
  value = jnp.asarray(value)
  if not jnp.issubdtype(value.dtype, jnp.floating):
    raise TypeError(f"{name} must be a floating-point array; got {value.dtype}")
  return _per_channel(name, value, channels).astype(jnp.float32)


def _check_activation(name, activation):
  if activation not in _activations.ACTIVATIONS:
    names = tuple(a for a in _activations.ACTIVATIONS if a is not None)
    raise ValueError(f"{name} must be None or one of {names}; got {activation!r}")


def depthwise_conv2d(
    x: jax.Array,
    kernel: jax.Array,
    *,
    strides: int | tuple[int, int] = 1,
    padding: str | int | Any = "SAME",
    kernel_dilation: int | tuple[int, int] = 1,
    precision: Any = None,
    implementation: Literal["flashdwc", "xla"] | None = None,
    bias: jax.Array | None = None,
    activation: Literal["relu", "gelu", "gelu_tanh", "silu"] | None = None,
    input_scale: jax.Array | None = None,
    input_shift: jax.Array | None = None,
    input_activation: Literal["relu", "gelu", "gelu_tanh", "silu"] | None = None,
    deterministic: bool = False,
) -> jax.Array:
  """Depthwise 2-D convolution: each channel convolved with its own filter.

  Args:
    x: (N, H, W, C) input, float32, float16 or bfloat16.
    kernel: (KH, KW, 1, C) filter, the layout of
      ``flax.linen.Conv(features=C, feature_group_count=C)``; same dtype as x.
      Any KH, KW >= 1.
    strides: int or (stride_h, stride_w), each >= 1.
    padding: "SAME", "VALID", "SAME_LOWER" (as in lax.conv_general_dilated), an
      int (all sides), a pair of ints (one per dimension, both sides), or
      ((top, bottom), (left, right)); explicit padding is >= 0 and may be asymmetric.
    kernel_dilation: int or (dilation_h, dilation_w), each >= 1.
    precision: passed to XLA when implementation="xla"; this library's kernels
      always multiply and accumulate in float32.
    implementation: None or "flashdwc" runs this library's kernels for the
      platform (CPU or CUDA); "xla" runs lax.conv_general_dilated with XLA's
      defaults instead.
    bias: optional (C,) per-channel bias, x's dtype, added to the convolution
      inside the forward kernel: in float32 before the one rounding, except in
      the fp16/bf16 tensor-core forward (GPU; the plan gives it most filters 5
      wide and wider), which rounds the convolution to x's dtype first, as an
      unfused add would.
    activation: optional activation applied after the bias, in the same kernel:
      "relu", "gelu" (exact, erf), "gelu_tanh" (tanh approximation) or "silu",
      as in jax.nn. Differentiable: the gradient uses the pre-activation.
    input_scale, input_shift, input_activation: an optional prologue, applied
      to x as the kernel reads it: the convolution runs on
      x' = input_activation(x * input_scale + input_shift), per channel, in
      float32, zero-padded after the transform (as if x' were materialized).
      This is a batch norm folded into a scale and shift, and its activation,
      ahead of the depthwise conv, without a pass that writes x'. Scale and
      shift are (C,) floating-point arrays (used in float32); any of the three
      may be given alone (scale 1, shift 0, no activation by default).
      Differentiable in all of them: the backward passes recompute x' in XLA.
    deterministic: make the kernel gradient bit-identical from run to run: the
      GPU kernel then sums its partial results in a fixed order instead of with
      atomic adds, in scratch memory of one float32 filter per chunk of rows. The
      CPU kernels are always deterministic. Ignored with implementation="xla".

  Returns:
    (N, Ho, Wo, C) in x's dtype, accumulated in float32, then bias and activation
    if given. Without them and without a prologue it matches
    ``lax.conv_general_dilated(x, kernel, strides, padding, rhs_dilation=...,
    dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=C)``.
    Differentiable in x, kernel, bias, input_scale and input_shift, in forward
    and reverse mode and to any order, and batchable with vmap.
  """
  if implementation is not None and implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation must be None or one of {IMPLEMENTATIONS}; "
                     f"got {implementation!r}")
  # float64 has no kernel of this library: implementation=None runs XLA's conv for it.
  is_float64 = any(hasattr(a, "dtype") and jnp.dtype(a.dtype) == jnp.float64 for a in (x, kernel))
  if implementation == "flashdwc" and is_float64:
    raise TypeError("implementation='flashdwc' has kernels for float32, float16 and bfloat16; got float64 "
                    "(implementation=None or 'xla' runs XLA's conv for it)")
  geometry = make_geometry(x, kernel, strides, padding, kernel_dilation, allow_float64=implementation != "flashdwc")
  if is_float64:
    implementation = "xla"
  _check_activation("activation", activation)
  _check_activation("input_activation", input_activation)
  channels = x.shape[-1]
  if bias is not None:
    bias = _per_channel("bias", bias, channels)
    if bias.dtype != jnp.dtype(x.dtype):
      raise TypeError(f"bias must have x's dtype {jnp.dtype(x.dtype)}; got {bias.dtype}")
  prologue = input_scale is not None or input_shift is not None or input_activation is not None
  # Without a prologue these are placeholders the kernel ignores.
  scale, shift = jnp.ones((channels,), jnp.float32), jnp.zeros((channels,), jnp.float32)
  if input_scale is not None:
    scale = _float_per_channel("input_scale", input_scale, channels)
  if input_shift is not None:
    shift = _float_per_channel("input_shift", input_shift, channels)
  if implementation == "xla":
    if prologue:
      x = _activations.apply(input_activation, x.astype(jnp.float32) * scale + shift).astype(x.dtype)
    y = depthwise_conv2d_xla(x, kernel, geometry, precision=precision)
    return _activations.apply(activation, y if bias is None else y + bias)
  if not isinstance(deterministic, bool):
    raise TypeError(f"deterministic must be a bool; got {deterministic!r}")
  # implementation=None lets each pass run XLA's conv where routing.py's measured rule
  # says XLA is faster; "flashdwc" always runs this library's kernels.
  routed = implementation is None
  crops, geometry = geometry.cropped()
  if any(c for pair in crops for c in pair):
    # Negative padding crops x here, so the kernels only ever see padding >= 0.
    (top, bottom), (left, right) = crops
    x = x[:, top:x.shape[1] - bottom, left:x.shape[2] - right, :]
  (rows, cols), geometry = geometry.live_taps(x.shape[1:3], kernel.shape[:2])
  if (rows[1] - rows[0] + 1, cols[1] - cols[0] + 1) != tuple(kernel.shape[:2]):
    # Taps that only ever fall in the padding (_geometry.live_taps): cut, with their padding.
    kernel = kernel[rows[0]:rows[1] + 1, cols[0]:cols[1] + 1]
  restore = lambda y: y
  if not prologue and _dilation.in_place(x.shape, x.dtype, kernel.shape[:2], geometry):
    # The forward and the input gradient read the residue classes in place; the filter
    # gradient rearranges x and dy into sub-grids itself (ops.dwconv_bwd_filter). Not
    # routed, as the sub-grid passes below.
    routed = False
  elif _dilation.applies(geometry, prologue):
    # Bias and activation are per channel and elementwise, so they commute with the
    # rearrangement.
    batch, out_hw = x.shape[0], geometry.output_hw(x.shape[1:3], kernel.shape[:2])
    x, dilated = _dilation.to_subgrids(x, geometry)
    restore = lambda y, g=geometry: _dilation.from_subgrids(y, g, batch, out_hw)
    geometry = dilated
    # Not routed: routing.py's rules were fitted on undilated layers and would judge the
    # sub-grid problems, sending some to XLA's conv on the sub-grids, which was never
    # timed. Ours on the sub-grids was: 1.2-173x XLA's dilated conv in every pass of
    # the registry's 16 dilated layers (H100, bf16; docs/performance.md).
    routed = False
  if _runs_transposed(x.dtype, kernel.shape[:2], geometry):
    # Bias, activation and prologue are per channel, so they carry over unchanged.
    x, kernel, geometry = _swap_hw(x), jnp.swapaxes(kernel, 0, 1), geometry.transposed()
    restore = lambda y, outer=restore: outer(_swap_hw(y))
  if bias is None and activation is None and not prologue:
    return restore(ops.dwconv_fwd(x, kernel, geometry, deterministic, routed))
  bias = jnp.zeros((channels,), x.dtype) if bias is None else bias
  return restore(_dwconv_fused(x, kernel, bias, scale, shift, geometry, activation, prologue, input_activation,
                               deterministic, routed))
