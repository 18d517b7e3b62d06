"""`depthwise_conv2d`: the differentiable public function."""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

import jax

from . import ops
from ._geometry import ConvGeometry, make_geometry
from .reference import depthwise_conv2d_xla

IMPLEMENTATIONS = ("flashdwc", "xla")


@partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _dwconv(x, kernel, geometry: ConvGeometry, deterministic: bool):
  return ops.dwconv_fwd(x, kernel, geometry)


def _dwconv_fwd(x, kernel, geometry, deterministic):
  return ops.dwconv_fwd(x, kernel, geometry), (x, kernel)


def _dwconv_bwd(geometry, deterministic, residuals, dy):
  x, kernel = residuals
  dx = ops.dwconv_bwd_data(dy, kernel, geometry, x.shape[1:3])
  dw = ops.dwconv_bwd_filter(x, dy, geometry, kernel.shape[:2], deterministic)
  return dx, dw


_dwconv.defvjp(_dwconv_fwd, _dwconv_bwd)


def depthwise_conv2d(
    x: jax.Array,
    kernel: jax.Array,
    *,
    strides: int | tuple[int, int] = 1,
    padding: str | int | Any = "SAME",
    kernel_dilation: int | tuple[int, int] = 1,
    precision: Any = None,
    implementation: Literal["flashdwc", "xla"] | None = None,
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
    deterministic: make the kernel gradient bit-identical from run to run: the
      GPU kernel then sums its partial results in a fixed order instead of with
      atomic adds (same speed within noise; a little more scratch memory). The
      CPU kernels are always deterministic. Ignored with implementation="xla".

  Returns:
    (N, Ho, Wo, C) in x's dtype, accumulated in float32. It matches
    ``lax.conv_general_dilated(x, kernel, strides, padding, rhs_dilation=...,
    dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=C)``.
    Differentiable in x and kernel (reverse mode), and batchable with vmap.
  """
  if implementation is not None and implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation must be None or one of {IMPLEMENTATIONS}; "
                     f"got {implementation!r}")
  geometry = make_geometry(x, kernel, strides, padding, kernel_dilation)
  if implementation == "xla":
    return depthwise_conv2d_xla(x, kernel, geometry, precision=precision)
  if not isinstance(deterministic, bool):
    raise TypeError(f"deterministic must be a bool; got {deterministic!r}")
  return _dwconv(x, kernel, geometry, deterministic)
