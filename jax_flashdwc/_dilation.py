"""A dilated stride-1 convolution as an undilated one on interleaved sub-grids.

With dilation d, output row d*q + r reads only padded input rows d*(q + k) + r: the
rows of residue r form their own image, convolved with the undilated filter. Moving
the d_h x d_w residues of the (padded) input into the batch turns the problem into a
VALID, undilated, stride-1 convolution over d_h * d_w * N smaller images, which the
fast stride-1 kernels run in all three passes (the gradients of the rearrangement
are rearrangements too). The cost is a copy of x into the sub-grid layout and one of
y back, both memory passes. Where the register-filter kernel runs the forward and the
input gradient (3x3, 5x5 and 7x7 in fp16/bf16, `in_place`), it reads the residue classes
where they lie instead, and only the filter gradient rearranges.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import _ffi
from ._custom_calls import plan_problem
from ._geometry import ConvGeometry

# Dilated stride-1 problems run on the sub-grids (or, where the forward and input
# gradient kernels read them in place, only their filter gradient does). Set to False
# to time the direct kernels (benchmarks/bench_layers.py --dilation direct).
ENABLED = True

_HALF = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))


def applies(geometry: ConvGeometry, prologue: bool) -> bool:
  """Whether a problem can run on sub-grids: dilated, stride 1, and no input prologue
  (the prologue's transform must see the padding as zeros after it, and here the
  padding becomes part of x)."""
  return ENABLED and geometry.strides == (1, 1) and geometry.dilation != (1, 1) and not prologue


def in_place(x_shape, dtype, kernel_hw, geometry: ConvGeometry) -> bool:
  """Whether the forward and the input gradient of a dilated stride-1 fp16/bf16 problem
  (no prologue) run their kernel on the residue classes in place, with no sub-grid
  copies: where the native plan gives both passes the register-filter kernel (3x3, 5x5
  and 7x7, fwd/regfilter.cuh), which addresses each residue class with row and column
  pitches of d. The filter gradient still runs on sub-grids (dwconv_bwd_filter in
  ops.py). fp32 keeps the sub-grids in every pass: in place was timed in fp16/bf16 only."""
  if jnp.dtype(dtype) not in _HALF or not applies(geometry, prologue=False):
    return False
  fwd = plan_problem(geometry, x_shape, geometry.output_hw(x_shape[1:3], kernel_hw), kernel_hw)
  native = _ffi._jax_flashdwc
  # No device limits: the register-filter choice reads none (it needs no dynamic shared
  # memory), so the decision is the same on every device and at every trace. The input
  # gradient's plan takes the problem as the forward's (in_* = dx, out_* = dy).
  return (native.plan_fwd(fwd, half_precision=True, device={}) == "regfilter"
          and native.plan_bwd_data(fwd, half_precision=True, device={}) == "forward:regfilter")


def to_subgrids(x, geometry: ConvGeometry):
  """(N, H, W, C) -> (dh * dw * N, Hs, Ws, C) and the undilated VALID geometry."""
  n, h, w, c = x.shape
  (dh, dw), ((top, bottom), (left, right)) = geometry.dilation, geometry.padding
  rows, cols = h + top + bottom, w + left + right
  rows_up, cols_up = -(-rows // dh) * dh, -(-cols // dw) * dw
  xp = jnp.pad(x, ((0, 0), (top, bottom + rows_up - rows), (left, right + cols_up - cols), (0, 0)))
  sub = xp.reshape(n, rows_up // dh, dh, cols_up // dw, dw, c).transpose(2, 4, 0, 1, 3, 5)
  sub = sub.reshape(dh * dw * n, rows_up // dh, cols_up // dw, c)
  return sub, ConvGeometry(strides=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1))


def from_subgrids(y_sub, geometry: ConvGeometry, batch: int, out_hw):
  """The sub-grid results (dh * dw * N, Hq, Wq, C) interleaved back to (N, Ho, Wo, C)."""
  (dh, dw), (_, hq, wq, c) = geometry.dilation, y_sub.shape
  y = y_sub.reshape(dh, dw, batch, hq, wq, c).transpose(2, 3, 0, 4, 1, 5).reshape(batch, hq * dh, wq * dw, c)
  return y[:, :out_hw[0], :out_hw[1], :]


def to_subgrid_outputs(dy, geometry: ConvGeometry, input_hw, kernel_hw):
  """(N, Ho, Wo, C) -> (dh * dw * N, Hq, Wq, C): an output-shaped array (a gradient of y)
  in the layout of the sub-grid convolution's output, the inverse of from_subgrids;
  the positions from_subgrids crops get zeros."""
  n, out_h, out_w, c = dy.shape
  (dh, dw), ((top, bottom), (left, right)) = geometry.dilation, geometry.padding
  rows, cols = input_hw[0] + top + bottom, input_hw[1] + left + right
  hq = -(-rows // dh) - kernel_hw[0] + 1
  wq = -(-cols // dw) - kernel_hw[1] + 1
  dyp = jnp.pad(dy, ((0, 0), (0, hq * dh - out_h), (0, wq * dw - out_w), (0, 0)))
  sub = dyp.reshape(n, hq, dh, wq, dw, c).transpose(2, 4, 0, 1, 3, 5)
  return sub.reshape(dh * dw * n, hq, wq, c)
