"""The pure-XLA depthwise convolution: the tests' oracle and `implementation="xla"`."""

from __future__ import annotations

import jax
from jax import lax

from ._geometry import ConvGeometry

DIMENSION_NUMBERS = ("NHWC", "HWIO", "NHWC")


def depthwise_conv2d_xla(x: jax.Array, kernel: jax.Array, geometry: ConvGeometry,
                         precision=None) -> jax.Array:
  """lax.conv_general_dilated with one group per channel.

  x: (N, H, W, C); kernel: (KH, KW, 1, C); returns (N, Ho, Wo, C) in x's dtype.
  `precision` is passed to XLA (None: XLA's default; lax.Precision.HIGHEST for the oracle).
  """
  return lax.conv_general_dilated(
      x, kernel,
      window_strides=geometry.strides,
      padding=geometry.padding,
      rhs_dilation=geometry.dilation,
      dimension_numbers=DIMENSION_NUMBERS,
      feature_group_count=x.shape[-1],
      precision=precision)
