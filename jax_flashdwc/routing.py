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
  padding: tuple[tuple[int, int], tuple[int, int]]

  @property
  def half(self) -> bool:
    return self.dtype in ("bfloat16", "float16")

  @property
  def small_square(self) -> bool:
    """A 3x3 or 5x5 filter: the family the rules below were measured on."""
    return self.kh == self.kw and self.kh in (3, 5)

  @property
  def symmetric_padding(self) -> bool:
    return all(lo == hi for lo, hi in self.padding)


@dataclasses.dataclass(frozen=True)
class XlaRule:
  """Problems of `passes` for which `applies` holds run XLA's conv; `measured` says why."""
  passes: tuple[str, ...]
  applies: Callable[[Problem], bool]
  measured: str


# Measured with benchmarks/bench_layers.py on one H100 80GB HBM3 (driver 580.159.04,
# jax 0.11.2), bf16, batch 64, on the MobileNetV2, MobileNetV3-Large and EfficientNet-B0 layers of the
# registry (benchmarks/results/layers_h100_80gb_hbm3.csv; each row names the commit it
# measured): ours against XLA in the same run. The rules cover square 3x3 and 5x5 filters in
# fp16/bf16, which share their kernels; fp32 was not measured on the registry and
# keeps the library's kernels. Each rule names the rows it rests on.
XLA_RULES: tuple[XlaRule, ...] = (
    XlaRule(("dw",), lambda p: p.half and p.small_square and p.symmetric_padding
            and (p.kh == 5 or p.h * p.w <= 28 * 28),
            "filter gradient (the small-filter kernel), symmetric padding: 5x5 ran 0.78-0.99x XLA on all five "
            "such layers (28x28x240: 0.086 ms against 0.068), 3x3 on maps of 28x28 and smaller 0.67-1.04x "
            "(14x14x576 stride 2: 0.048 against 0.032); 3x3 on 56x56 and larger maps is 1.16-1.75x (112x112x16 "
            "0.048 against 0.085) and stays on ours, as do TensorFlow's asymmetric SAME paddings, where XLA "
            "pads first (1.20-2.72x; 14x14 maps of those not timed)"),
    XlaRule(("fwd",), lambda p: p.half and p.kh == p.kw == 5 and p.strides != (1, 1) and p.symmetric_padding,
            "forward, stride 2, 5x5, symmetric padding (the stride-2 kernel): 0.86x on MobileNetV3's 56x56x72 "
            "(0.066 ms against 0.057); at 3x3 it runs 1.01-1.15x (112x112x96: 0.108 against 0.114) and "
            "stays on ours"),
    XlaRule(("dx",), lambda p: p.half and p.kh == p.kw == 5 and p.strides != (1, 1),
            "input gradient, stride 2, 5x5: the gather kernel ran 0.87-0.97x; the polyphase kernel that "
            "now takes it is tested but not yet timed at 5x5 (at 3x3 it runs 2.0-2.9x XLA: MobileNetV2's "
            "112x112x96 0.093 ms against 0.264, so 3x3 stays on ours)"),
    XlaRule(("fwd", "dx"), lambda p: p.half and p.small_square and p.strides == (1, 1)
            and (p.c <= 32 or (p.h * p.w <= 14 * 14 and p.c >= 448)),
            "forward and input gradient, 3x3 and 5x5, stride 1, on 32 channels (112x112x32: 0.84-0.85x) or on "
            "14x14 maps of 448 channels and more (0.81-0.91x); at 28x28 and 56x56 with 144-240 channels ours "
            "is 0.98-1.33x"),
)


def problem(pass_name: str, x, kernel_hw, geometry: ConvGeometry) -> Problem:
  """The Problem of a pass: x is the forward's input (an array or anything with shape and dtype)."""
  n, h, w, c = x.shape
  return Problem(pass_name, str(jnp.dtype(x.dtype)), int(n), int(h), int(w), int(c), int(kernel_hw[0]),
                 int(kernel_hw[1]), tuple(geometry.strides), tuple(geometry.dilation),
                 tuple(tuple(int(v) for v in pair) for pair in geometry.padding))


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
