"""The one rule for which passes `implementation=None` runs on XLA's conv.

Under `implementation=None` each of the three passes (fwd; dx, the input gradient;
dw, the filter gradient) runs this library's kernels unless the table below names
the problem: there, the layer benchmark over the model registry
(benchmarks/bench_layers.py, benchmarks/results/layers_*.csv) measured XLA's conv
faster on the GPU, so the pass lowers to the conv XLA would emit for it.
`implementation="flashdwc"` never consults this table, and the CPU always runs the
library's kernels. The decision is per pass and made at lowering time, so a
training step can run its forward on our kernels and a gradient on XLA's. Dilated
stride-1 problems run on sub-grids (_dilation.py), whose passes conv.py does not route:
the table judges undilated problems as the user gave them.
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
# jax 0.11.2), bf16, on the registry's layers (benchmarks/results/layers_h100_80gb_hbm3.csv;
# each row names the commit it measured): ours against XLA in the same run. fp16 shares
# the bf16 kernels and follows the same rules. fp32 is measured on MobileNetV2's layers
# and MobileNetV3-Large's first and its 28x28x120 5x5 so far; the fp32 rules below rest
# on those rows, and every other fp32 problem keeps the library's kernels. Each rule
# names the rows it rests on and the nearest rows it leaves on ours. Small layers
# (0.02-0.1 ms) differ by up to 10% between runs, so rules resting on one or two rows
# near 1.0x are the least certain.
XLA_RULES: tuple[XlaRule, ...] = (
    XlaRule(("dw",), lambda p: p.half and p.small_square and p.symmetric_padding and p.dilation == (1, 1)
            and (p.kh == 5 or p.h * p.w <= 28 * 28)
            and not (p.kh == 5 and p.h * p.w <= 7 * 7 and p.c > 1024)
            and not (p.kh == 3 and p.c <= 96)
            and not (p.kh == 3 and p.strides == (1, 1)
                     and (p.h * p.w * p.c >= 28 * 28 * 512
                          or ((p.c >= 640 or (p.c >= 480 and p.h * p.w <= 14 * 14))
                              and p.n * p.h * p.w * p.c >= 5 * 2**20))),
            "filter gradient (the small-filter kernel), symmetric padding, undilated: 5x5 ran 0.69-1.01x on 27 "
            "of 28 such passes (RepLKNet's 7x7x1024 branch: 0.041 ms against 0.028; EfficientNet-B3's 10x10x1392 "
            "0.73x); the 28th, EfficientNet-B0's 7x7x1152 (1.12x: 0.044 ms against 0.050), stays on ours with "
            "any 5x5 on a 7x7 map of more than 1024 channels (one row, within run-to-run spread of 1.0x), 3x3 on "
            "maps of 28x28 and smaller 0.67-1.05x (MobileNetV2's 14x14x576 stride 2: 0.048 "
            "against 0.032; EfficientNet-B3's 10x10x1392 at batch 32 0.79x). With runs of at least 8 m-steps "
            "(csrc/bwd_filter/small_grid.h) MobileNetV2's 3x3 filter gradients on 28x28 and smaller maps ran "
            "0.96-1.30x (39 of the rule's 44 rows re-timed so: those, MobileNetV3's 28x28x240 stride 2 1.01x, "
            "14x14x200 0.95x, 56x56x72 5x5 0.90x, 28x28x120 5x5 0.70x, 7x7x960 and 14x14x672 stride-2 5x5 "
            "0.74-0.75x; EfficientNet-B0's 5x5 0.83-1.00x, its 7x7x1152 3x3 0.84x, EfficientNet-B3's 75x75x192 "
            "stride-2 5x5 0.89x; in a later run 20 more: EfficientNet-B3's 0.79-0.98x, RepLKNet-31B's and "
            "UniRepLKNet-T's 5x5 branches 0.79-0.99x, VAN-B0's LKA 5x5 0.84-1.07x); the rows near 1.0x stay "
            "routed. Left on ours: 3x3 on 96 channels or fewer (InceptionNeXt-T's squares at 8-step runs: "
            "28x28x24 1.38x, 7x7x96 1.26x, 14x14x48 0.97x; its 56x56x12 takes the next rule), 3x3 on 56x56 and "
            "larger maps (1.12-1.75x: 112x112x16 0.048 against 0.085), 3x3 stride 1 on wide maps (VAN-B0's "
            "28x28x512 1.09x, 14x14x1280 1.26x, 7x7x2048 1.06x; MobileNetV3's 14x14x672 1.16x; MobileNetV2's "
            "14x14x576 at 8-step runs 1.30x: 0.032 ms against 0.041; the 14x14x480 of EfficientNet-B0 and "
            "MobileNetV3, the same problem timed twice in one run, 1.16x and 0.99x: 0.031-0.035 ms against "
            "0.035-0.036), TensorFlow's "
            "asymmetric SAME paddings, where XLA pads first (1.20-2.72x), and dilated filters (on sub-grids, not "
            "routed: 5.8-173x)"),
    XlaRule(("dw",), lambda p: p.half and p.small_square and p.c % 8 != 0,
            "filter gradient, 3x3 or 5x5, channels not a multiple of 8 (no 16-byte vectors): InceptionNeXt-T's "
            "56x56x12 ran 0.47x (0.085 ms against 0.040)"),
    XlaRule(("dw",), lambda p: p.half and p.kw == 1 and p.kh > 1 and 14 <= p.h <= 28,
            "filter gradient of a tall band (KW = 1) on 14x14-28x28 maps: InceptionNeXt-T's 11x1 ran 0.79x "
            "(28x28x24) and 0.81x (14x14x48); its 56x56x12 (1.43x) and 7x7x96 (51x) stay on ours"),
    XlaRule(("dw",), lambda p: p.half and p.kh == p.kw == 7 and p.dilation == (1, 1) and p.strides == (1, 1)
            and 14 < p.h <= 28,
            "filter gradient, 7x7 on maps above 14x14 up to 28x28: ConvNeXt-T's 28x28x192 ran 0.85x (0.088 ms "
            "against 0.076); its 56x56x96 (1.12x), 14x14x384 (1.07x) and 7x7x768 (15.7x) stay on ours"),
    XlaRule(("fwd",), lambda p: p.half and p.kh == p.kw == 5 and p.strides != (1, 1) and p.symmetric_padding,
            "forward, stride 2, 5x5, symmetric padding (the stride-2 kernel): MobileNetV3's 56x56x72 0.86x "
            "(0.066 ms against 0.057) and 14x14x672 0.72x; with TensorFlow's SAME padding, where XLA pads first, "
            "1.31x (EfficientNet-B0's 56x56x144), and at 3x3 1.01-2.35x (112x112x96: 0.108 against 0.114): "
            "those stay on ours"),
    XlaRule(("fwd", "dx"), lambda p: p.half and p.kh == p.kw == 3 and p.strides == (1, 1) and p.dilation == (1, 1)
            and (p.c <= 80 or (p.h == p.w == 14 and p.c <= 256)),
            "forward and input gradient, 3x3, stride 1, 80 channels or fewer, or 14x14 maps of at most 256: "
            "112x112x32 0.84-0.85x (MobileNetV2, EfficientNet-B0), MobileNetV3's 112x112x16 0.52x and 56x56x72 "
            "0.88-0.90x, InceptionNeXt-T's 56x56x12 0.35-0.36x, 28x28x24 0.72-0.82x and 14x14x48 0.73-0.86x, "
            "UniRepLKNet-T's 56x56x80 0.93x (input gradient; its forward 1.01x), MobileNetV3's 14x14x200 "
            "0.88-0.92x (0.023 ms against 0.021). On ours: InceptionNeXt-T's 7x7x96 (1.10-1.31x), 144 channels "
            "and more on 28x28 and larger maps (0.98-1.30x), and 14x14 maps of 384-1280 channels (0.99-1.42x: "
            "EfficientNet-B0's 14x14x480 0.022 ms against 0.032)"),
    XlaRule(("fwd", "dx"), lambda p: p.half and p.kw == 1 and p.kh > 1 and p.c % 8 != 0,
            "forward and input gradient of a tall band (KW = 1) on channels not a multiple of 8: InceptionNeXt-T's "
            "11x1 on 56x56x12 ran 0.91-0.94x; its 1x11 on the same map (1.42-1.46x) and the 11x1 bands on "
            "24-96 channels (1.26-1.53x) stay on ours"),
    XlaRule(("fwd", "dx"), lambda p: p.half and p.kh == p.kw == 5 and p.strides == (1, 1) and p.dilation == (1, 1)
            and p.h == 28 and p.c <= 64,
            "5x5, stride 1, 64 channels or fewer on 28x28 maps: VAN-B0's LKA 5x5 on 28x28x64 ran 0.89x (forward "
            "and input gradient); 56x56x32 (1.16-1.19x), 14x14x160 (1.16x both passes, since the register-filter "
            "forward took its input gradient: 0.023 ms against 0.026), 28x28x160 (1.27-1.29x) and 28x28x240 "
            "(1.25-1.33x) stay on ours"),
    XlaRule(("fwd", "dx"), lambda p: p.dtype == "float32" and p.kh == p.kw == 3 and p.strides == (1, 1)
            and p.dilation == (1, 1) and p.c <= 16,
            "fp32 forward and input gradient, 3x3, stride 1, 16 channels or fewer: MobileNetV3's 112x112x16 "
            "forward 0.90x (0.061 ms against 0.055; its input gradient not measured in fp32, 0.52x in bf16). "
            "On ours: maps of at most 31 columns, on the register-filter kernel in fp32 (MobileNetV2's 7x7x960 "
            "1.48x forward and 1.19x input gradient, 14x14x384 1.00-1.18x, 14x14x576 1.01-1.05x, 28x28x192 "
            "1.16-1.17x), 112x112x32 (0.97-1.05x) and 56x56x144 (0.95-0.97x), within the runs' spread of 1.0x"),
    XlaRule(("dw",), lambda p: p.dtype == "float32" and p.kh == p.kw == 3 and p.strides == (1, 1)
            and p.dilation == (1, 1) and p.c <= 32,
            "fp32 filter gradient, 3x3, stride 1, 32 channels or fewer: MobileNetV2's 112x112x32 ran 0.92x "
            "(0.098 ms against 0.090), the one such row; its other fp32 filter gradients are 1.04-1.64x"),
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
