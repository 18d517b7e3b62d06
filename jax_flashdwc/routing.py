"""The one rule for which passes `implementation=None` runs on XLA's conv.

Under `implementation=None` each of the three passes (fwd; dx, the input gradient;
dw, the filter gradient) runs this library's kernels unless the table below names
the problem: there, the layer benchmark over the model registry
(benchmarks/bench_layers.py, benchmarks/results/layers_*.csv) measured XLA's conv
faster on the GPU, so the pass lowers to the conv XLA would emit for it.
`implementation="flashdwc"` never consults this table, and the CPU always runs the
library's kernels. The decision is per pass and made at lowering time, so a
training step can run its forward on our kernels and a gradient on XLA's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from ._geometry import ConvGeometry
from .reference import depthwise_conv2d_xla

PASSES = ("fwd", "dx", "dw")


@dataclasses.dataclass(frozen=True)
class Problem:
  """One pass of one depthwise convolution, as the rule sees it."""
  pass_name: str
  dtype: str  # "float32", "bfloat16", "float16"
  n: int
  h: int
  w: int
  c: int
  kh: int
  kw: int
  strides: tuple[int, int]
  dilation: tuple[int, int]


@dataclasses.dataclass(frozen=True)
class XlaRule:
  """Problems of `passes` for which `applies` holds run XLA's conv; `measured` says why."""
  passes: tuple[str, ...]
  applies: Callable[[Problem], bool]
  measured: str


# Empty until the registry benchmark names a family that the kernels do not win.
XLA_RULES: tuple[XlaRule, ...] = ()


def problem(pass_name: str, x, kernel_hw, geometry: ConvGeometry) -> Problem:
  """The Problem of a pass: x is the forward's input (an array or anything with shape and dtype)."""
  n, h, w, c = x.shape
  return Problem(pass_name, str(jnp.dtype(x.dtype)), int(n), int(h), int(w), int(c), int(kernel_hw[0]),
                 int(kernel_hw[1]), tuple(geometry.strides), tuple(geometry.dilation))


def route(pass_name: str, x, kernel_hw, geometry: ConvGeometry, platform: str | None = "cuda") -> str:
  """"xla" where the table sends this pass to XLA's conv on `platform`, else "flashdwc"."""
  if pass_name not in PASSES:
    raise ValueError(f"pass_name must be one of {PASSES}; got {pass_name!r}")
  if platform not in ("cuda", "gpu"):
    return "flashdwc"
  p = problem(pass_name, x, kernel_hw, geometry)
  return "xla" if any(pass_name in r.passes and r.applies(p) for r in XLA_RULES) else "flashdwc"


# XLA's conv for each pass: the forward, and its linear transposes in x and in w
# (what XLA emits for the gradients of lax.conv_general_dilated).


def xla_fwd(x, w, geometry: ConvGeometry):
  return depthwise_conv2d_xla(x, w, geometry)


def xla_bwd_data(dy, w, geometry: ConvGeometry, input_hw):
  x_spec = jax.ShapeDtypeStruct((dy.shape[0], *input_hw, dy.shape[3]), dy.dtype)
  (dx,) = jax.linear_transpose(lambda x: depthwise_conv2d_xla(x, w, geometry), x_spec)(dy)
  return dx


def xla_bwd_filter(x, dy, geometry: ConvGeometry, kernel_hw):
  w_spec = jax.ShapeDtypeStruct((*kernel_hw, 1, x.shape[3]), x.dtype)
  (dw,) = jax.linear_transpose(lambda w: depthwise_conv2d_xla(x, w, geometry), w_spec)(dy)
  return dw
