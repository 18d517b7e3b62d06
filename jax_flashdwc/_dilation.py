"""A dilated stride-1 convolution as an undilated one on interleaved sub-grids.

With dilation d, output row d*q + r reads only padded input rows d*(q + k) + r: the
rows of residue r form their own image, convolved with the undilated filter. Moving
the d_h x d_w residues of the (padded) input into the batch turns the problem into a
VALID, undilated, stride-1 convolution over d_h * d_w * N smaller images, which the
fast stride-1 kernels run in all three passes (the gradients of the rearrangement
are rearrangements too). The cost is a copy of x into the sub-grid layout and one of
y back, both memory passes.
"""

from __future__ import annotations

import jax.numpy as jnp

from ._geometry import ConvGeometry


def applies(geometry: ConvGeometry, prologue: bool) -> bool:
  """Whether a problem can run on sub-grids: dilated, stride 1, and no input prologue
  (the prologue's transform must see the padding as zeros after it, and here the
  padding becomes part of x)."""
  return geometry.strides == (1, 1) and geometry.dilation != (1, 1) and not prologue


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
