"""Named convolution problems, shared by the tests and the benchmarks."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class ConvCase:
  name: str
  n: int
  h: int
  w: int
  c: int
  kh: int
  kw: int
  strides: Any = 1
  padding: Any = "SAME"
  dilation: Any = 1

  @property
  def x_shape(self):
    return (self.n, self.h, self.w, self.c)

  @property
  def kernel_shape(self):
    return (self.kh, self.kw, 1, self.c)

  def conv_kwargs(self):
    return dict(strides=self.strides, padding=self.padding, kernel_dilation=self.dilation)


# Small and awkward: every channel count, kernel size, stride, dilation and padding
# form that the kernels must get right, at sizes a 2-core CI machine runs quickly.
TEST_CASES = [
    ConvCase("c1_k3", 1, 7, 9, 1, 3, 3),
    ConvCase("c3_k1_n3", 3, 5, 5, 3, 1, 1),
    ConvCase("c33_k2_even", 1, 8, 7, 33, 2, 2),
    ConvCase("c200_k4_even", 1, 6, 5, 200, 4, 4),
    ConvCase("convnext_k7_pad3", 2, 14, 14, 40, 7, 7, padding=3),
    ConvCase("k13", 1, 16, 15, 8, 13, 13),
    ConvCase("replknet_k31", 1, 33, 31, 4, 31, 31),
    ConvCase("slak_51x5", 1, 20, 12, 6, 51, 5),
    ConvCase("slak_5x51", 1, 12, 20, 6, 5, 51),
    ConvCase("h1w1_k3", 3, 1, 1, 5, 3, 3),
    ConvCase("h2w2_k3", 2, 2, 2, 7, 3, 3),
    ConvCase("h1w9_k1x3", 1, 1, 9, 3, 1, 3),
    ConvCase("mobilenet_s2_k3", 2, 9, 9, 16, 3, 3, strides=2),
    ConvCase("s3_k5_valid", 1, 13, 11, 5, 5, 5, strides=3, padding="VALID"),
    ConvCase("s2x3_k3x4_asym", 1, 10, 13, 6, 3, 4, strides=(2, 3), padding=((1, 2), (0, 3))),
    ConvCase("s2_k2_even", 2, 8, 8, 3, 2, 2, strides=2),
    ConvCase("d2_k3", 1, 11, 10, 9, 3, 3, dilation=2),
    ConvCase("d2x3_k3x2_valid", 1, 12, 13, 4, 3, 2, padding="VALID", dilation=(2, 3)),
    ConvCase("s2_d2_k5", 1, 15, 14, 3, 5, 5, strides=2, dilation=2),
    # Dilated 3x3, 5x5 and 7x7 on C a multiple of 8, which fp16/bf16 run on the
    # register-filter kernel reading each residue class in place: maps not multiples of
    # d, unequal dilations with padding on one side only, and a span larger than the map.
    ConvCase("d3_k3_c64_inplace", 2, 19, 23, 64, 3, 3, dilation=3),
    ConvCase("d2x3_k5_c56_onesided", 1, 13, 29, 56, 5, 5, padding=((0, 8), (12, 0)), dilation=(2, 3)),
    ConvCase("d5_k3_c160_on_7x7", 2, 7, 7, 160, 3, 3, dilation=5),
    ConvCase("d3_k7_c64_inplace", 2, 20, 17, 64, 7, 7, dilation=3),
    ConvCase("d3x2_k7_c112_onesided", 1, 16, 25, 112, 7, 7, padding=((14, 4), (1, 11)), dilation=(3, 2)),
    ConvCase("d2_k7_c160_on_7x7", 2, 7, 7, 160, 7, 7, dilation=2),
    ConvCase("pad5_k3_wide", 1, 6, 7, 3, 3, 3, padding=5),
    ConvCase("asym_k7", 1, 9, 9, 3, 7, 7, padding=((0, 6), (5, 1))),
    # Filters wider than the padded map can feed: taps that touch only padding are cut.
    ConvCase("van_d3_k7_on_7x7", 2, 7, 7, 16, 7, 7, padding=9, dilation=3),
    ConvCase("k31_same_on_7x7", 2, 7, 7, 24, 31, 31),
    ConvCase("valid_k3_c33", 3, 7, 8, 33, 3, 3, padding="VALID"),
    # Several blocks and channel tiles of the tiled kernels, ragged at every edge.
    ConvCase("tiles_k9_c72", 2, 20, 37, 72, 9, 9),
    ConvCase("tiles_k9_c70_s2", 2, 21, 38, 70, 9, 9, strides=2),
    ConvCase("tiles_k17x3_c36_s2x1", 1, 30, 45, 36, 17, 3, strides=(2, 1), dilation=(2, 1)),
    # The half-precision GEMV kernel's 64-channel blocks and 8-channel vectors: two
    # full blocks and a ragged third, and C % 8 == 4 (scalar loads in fp16/bf16).
    ConvCase("tiles_k5_c136_s2", 2, 19, 23, 136, 5, 5, strides=2),
    ConvCase("tiles_k5_c100", 1, 13, 29, 100, 5, 5),
    # The row-stream kernel (stride 1, KW 3/5/7, KH <= 9): several strips, runs of
    # rows that wrap the ring of row slots, a ragged last run, a ragged second
    # 64-channel block (fp16/bf16), rectangular and asymmetric padding, KH = 9, and
    # padding wider than the filter (its backward-data pass crops).
    ConvCase("rows_k3_c64", 2, 40, 70, 64, 3, 3),
    ConvCase("rows_k5x3_c72", 1, 37, 33, 72, 5, 3),
    ConvCase("rows_k7_c24_asym", 1, 20, 30, 24, 7, 7, padding=((1, 5), (6, 0))),
    ConvCase("rows_k9x5_c16", 2, 18, 20, 16, 9, 5),
    ConvCase("rows_k3_pad4_c8", 1, 17, 12, 8, 3, 3, padding=4),
    # KW = 7 over whole 64-channel blocks (the row-stream kernel in fp32, tensor cores in
    # fp16/bf16): 4-wide and 2-wide outputs, and a 9-tall filter.
    ConvCase("rows_k7_c128", 2, 15, 70, 128, 7, 7),
    ConvCase("rows_k9x7_c64_narrow", 1, 20, 28, 64, 9, 7),
    # fp16/bf16 on maps at most 32 wide take two images a strip: an odd batch (the last
    # strip's second image is past it), at KW = 5 over a whole 64-channel block (a
    # ragged one goes to tensor cores there) and at KW = 3 over a ragged second block.
    ConvCase("rows_k5_c64_w30_n3_pairs", 3, 11, 30, 64, 5, 5),
    ConvCase("rows_k5x3_c72_w30_n3_pairs", 3, 11, 30, 72, 5, 3),
    # The row-stream filter gradient (whole 64-channel blocks in fp16/bf16, 32 in fp32;
    # outputs at least 32 wide; KH <= 7): a 7x3 filter (two column segments), VALID
    # over two 64-column strips, and the 32-column strip in both precisions.
    ConvCase("rows_k7x3_c64", 1, 18, 40, 64, 7, 3),
    ConvCase("rows_valid_k5_c64_w70", 2, 9, 70, 64, 5, 5, padding="VALID"),
    ConvCase("rows_k3_c128_w32", 1, 10, 32, 128, 3, 3),
    ConvCase("rows_k5_c96_w32", 2, 12, 32, 96, 5, 5),
    # fp16/bf16 3x3 and 5x5 with whole 64-channel blocks: the register-filter kernel
    # (csrc/plan/fwd.cc, can_implement_fwd_regfilter; the rows_* cases above at 3x3 and 5x5 with C a
    # multiple of 64 too), with SAME padding, with an explicit one that leaves output
    # rows wholly in the padding (out 22 x 36; its backward data pass crops, at padding
    # 4 - 6 = -2), 3x3 over 73 columns (strips of 8, the last of 1), and both on a 7x7
    # map (one strip of 8 at 3x3, 7 columns of it inside).
    ConvCase("regfilter_k5_c128_w40", 2, 21, 40, 128, 5, 5),
    ConvCase("regfilter_k5_c64_pad", 2, 17, 33, 64, 5, 5, padding=((6, 3), (4, 3))),
    ConvCase("regfilter_k3_c64_w73", 2, 19, 73, 64, 3, 3),
    ConvCase("regfilter_k3_c192_w7", 3, 7, 7, 192, 3, 3),
    ConvCase("regfilter_k5_c128_w7", 2, 7, 7, 128, 5, 5),
    # C not a multiple of 64: channel pairs padded to whole warps, the padding lanes'
    # copies switched off (20%, 10% and 14% of the lanes idle).
    ConvCase("regfilter_k3_c160_pad_lanes", 2, 11, 19, 160, 3, 3),
    ConvCase("regfilter_k3_c232_pad_lanes", 2, 9, 13, 232, 3, 3, padding=((2, 0), (0, 1))),
    ConvCase("regfilter_k5_c56_pad_lanes", 3, 8, 10, 56, 5, 5),
    # Height stride and dilation with a 9-wide filter, a ragged second channel block
    # (40 = 32 + 8), and a 17-wide filter with 1 valid channel in its second block
    # (the fp32 filter gradient's one-channel-per-lane tiles, TM 9 both).
    ConvCase("k11x9_s2x1_d2x1", 2, 23, 41, 40, 11, 9, strides=(2, 1), dilation=(2, 1)),
    ConvCase("k5x17_w100_c33", 1, 9, 100, 33, 5, 17),
    # The fp32 filter gradient's width 4 at TM 8: 8, 31 and 15 taps wide.
    ConvCase("k3x8_c12", 1, 10, 19, 12, 3, 8),
    ConvCase("k3x31_c20", 1, 7, 40, 20, 3, 31),
    # The fp32 forward-loop filter gradient's lower bound, 27 taps across (two 8-wide
    # thread tiles and a 3-wide third), over two images and a ragged channel block.
    ConvCase("k29x27_c36", 2, 30, 33, 36, 29, 27),
    # fp16/bf16 on tensor cores with one filter copy (k = 31 on a map 33-64 wide: two
    # copies keep a block alone on an H200 SM, fwd_mma.cu), 2 images a strip, odd N.
    ConvCase("k31_w40_one_copy", 3, 36, 40, 16, 31, 31),
    ConvCase("k15x15_c8", 1, 17, 18, 8, 15, 15),
    # Filter rows wider than one 16 KiB shared-memory stage: one row per stage and
    # more than 48 KiB of dynamic shared memory (fp32), so the launch raises the limit.
    ConvCase("wide_k3x200", 1, 4, 203, 8, 3, 200),
    ConvCase("wide_k63_c40", 1, 66, 64, 40, 63, 63),
    # Tensor cores with images side by side: 4 per strip at W <= 32, so N = 5 fills
    # one strip and leaves three quarters of the next without an image.
    ConvCase("side_k9_n5", 5, 10, 20, 24, 9, 9),
    # Tensor cores in stages of 9 filter rows for filters taller than 9 (fwd_mma.cu,
    # with_nine_row_chunks): 17 rows in two stages (9 + 8) over three channel blocks,
    # the third ragged (40 = 16 + 16 + 8); 26 rows in three (9 + 9 + 8), 2 images a strip.
    ConvCase("k17_c40_w100_nine_rows", 1, 20, 100, 40, 17, 17),
    ConvCase("k26x17_w60_nine_rows", 2, 28, 60, 16, 26, 17),
    # The stride-2 polyphase input gradient (csrc/bwd_data/phase.cuh; square 3x3 and
    # 5x5, C a multiple of 8 fp16/bf16 and 4 fp32 at 3x3, 4 and 2 at 5x5): odd and even
    # maps with asymmetric padding, padding on one side only, and a padding of K - 1
    # that leaves a dx edge fed by one dy row; C = 12 takes it at 5x5 in every dtype
    # and at 3x3 in fp32 only (the gather kernel in fp16/bf16).
    ConvCase("phase_s2_k3_odd_asym", 2, 13, 11, 24, 3, 3, strides=2, padding=((0, 2), (2, 1))),
    ConvCase("phase_s2_k3_even_pad2", 1, 10, 12, 16, 3, 3, strides=2, padding=((2, 0), (1, 2))),
    ConvCase("phase_s2_k5_odd_asym", 2, 15, 9, 16, 5, 5, strides=2, padding=((4, 1), (0, 3))),
    ConvCase("phase_s2_k5_c12_same", 1, 17, 14, 12, 5, 5, strides=2),
    ConvCase("phase_s2_k3_c12_valid", 3, 9, 7, 12, 3, 3, strides=2, padding="VALID"),
]

# Stride-2 input gradients large enough that the polyphase kernel gives a thread runs
# of several phase rows (bwd_data_phase_rows_per_thread: about one thread per 2048
# SM thread slots; 2-6 rows on a 132-SM H100 here), most ragged at the image's bottom.
PHASE_RUN_CASES = [
    ConvCase("phase_runs_s2_k3", 32, 113, 111, 64, 3, 3, strides=2, padding=((1, 0), (0, 1))),
    ConvCase("phase_runs_s2_k5", 16, 121, 97, 48, 5, 5, strides=2, padding=((2, 2), (3, 1))),
]

# One case per forward kernel family, for the fused epilogue and prologue tests:
# GEMV (stride 1 and 2), tensor cores (fp16/bf16, KW >= 7, on the GPU), direct
# (dilation), and the scalar path (C % 4 != 0). All pad.
FUSION_CASES = [
    ConvCase("k7", 2, 12, 20, 24, 7, 7),
    ConvCase("k13_c13", 1, 15, 17, 13, 13, 13),
    ConvCase("k3_s2", 2, 11, 12, 16, 3, 3, strides=2),
    ConvCase("k5_d2", 1, 13, 12, 8, 5, 5, dilation=2),
    # The row-stream kernel (fp32; tensor cores in fp16/bf16), with an epilogue and
    # with a prologue.
    ConvCase("k7_c64", 1, 10, 20, 64, 7, 7),
    # The row-stream kernel with a prologue: 4 outputs a thread (over 32 columns
    # wide) and two row blocks at k = 3, 2 outputs a thread at k = 5 (a whole
    # 64-channel block, which keeps KW = 5 off tensor cores in fp16/bf16).
    ConvCase("k3_c32_w40", 2, 19, 40, 32, 3, 3),
    ConvCase("k5_c64", 1, 9, 12, 64, 5, 5),
    # fp16/bf16 at most 32 wide over an odd batch: two images a strip with a prologue.
    ConvCase("k3_c64_w24_n3", 3, 9, 24, 64, 3, 3),
    # fp16/bf16 5x5 over 36 columns and 3x3 over 70: the register-filter kernel with an
    # epilogue; with a prologue, which it does not take, the row-stream kernel.
    ConvCase("k5_c64_w36", 1, 9, 36, 64, 5, 5),
    ConvCase("k3_c64_w70", 1, 9, 70, 64, 3, 3),
]

# The tensor-core launcher gives a block several 8-row output tiles only where that
# leaves at least 4 waves of blocks (choose_mma_fwd_grid, fwd_mma.cu), which the small
# TEST_CASES never reach. On an H200 MULTI_TILE_CASE takes 4 tiles a block over 5 tile
# rows (a last tile block of one tile), with 4 images in each 128-column strip and the
# 9-row filter as one chunk; STREAM_CASE, one image a strip, takes the streaming kernel
# (fwd_mma_stream.cuh) at 4 tiles a block with its look-ahead; TALL_TILE_CASE, a 13-row
# filter over one image a strip, takes 4 tiles a block with all 13 filter rows as one
# chunk and one filter copy (the kLongChunks kernel), over 9 tile rows (a last tile
# block of one tile), two strips and a ragged last channel block (C = 1064);
# CHUNKED_TILE_CASE, a 17-row filter on the same grid over 2 images, takes 2 tiles a
# block (3 would leave under 4 waves of blocks) with chunks of 9 and 8 filter rows, the
# second tile's in reverse order (chunked_multi_tile_grid: the resident blocks' input
# windows take 29 MB of the 60 MiB L2). Over 8 images, as first written, its CPU
# oracle's three convolutions did not finish within the 60 s a GPU test call gave the
# four cases of its test on a 16-core machine.
# tests/cuda/check_fwd_mma.cu forces every tile count on small shapes.
MULTI_TILE_CASE = ConvCase("mma_tiles_k9_h40_w32", 64, 40, 32, 1024, 9, 9)
STREAM_CASE = ConvCase("mma_stream_k9_h64_w96", 48, 64, 96, 256, 9, 9)
TALL_TILE_CASE = ConvCase("mma_tall_tiles_k13_h72_w130", 8, 72, 130, 1064, 13, 13)
CHUNKED_TILE_CASE = ConvCase("mma_chunked_tiles_k17_n2_h72_w130", 2, 72, 130, 1064, 17, 17)

# Small enough for numerical differentiation.
GRAD_CASES = [
    ConvCase("grad_k3", 1, 5, 6, 3, 3, 3),
    ConvCase("grad_s2_k3x2", 2, 6, 5, 2, 3, 2, strides=2, padding=((1, 0), (0, 1))),
    ConvCase("grad_d2_k3", 1, 7, 6, 2, 3, 3, dilation=2),
]


def paper_points(ks=(3, 5, 7, 9, 13, 17, 21, 31, 51)):
  """The Flash-DWC paper's 27 forward points: three feature maps times nine k."""
  maps = [(128, 128, 128, 128), (128, 64, 64, 256), (128, 32, 32, 1024)]
  return [ConvCase(f"paper_{n}x{h}x{w}x{c}_k{k}", n, h, w, c, k, k)
          for (n, h, w, c) in maps for k in ks]


@dataclasses.dataclass(frozen=True)
class ModelLayer:
  """A depthwise layer of a published model: which model, where in it, and the problem."""
  model: str
  layer: str
  case: ConvCase


def _sym(kh, kw, dilation=1):
  """PyTorch-style symmetric padding d * (k - 1) // 2 on each side."""
  d = dilation
  return ((d * (kh - 1) // 2,) * 2, (d * (kw - 1) // 2,) * 2)


def _layer(model, layer, n, hw, c, kh, kw=None, strides=1, dilation=1, padding=None):
  kw = kh if kw is None else kw
  h, w = (hw, hw) if isinstance(hw, int) else hw
  padding = _sym(kh, kw, dilation) if padding is None else padding
  name = f"{model}/{layer}"
  return ModelLayer(model, layer, ConvCase(name, n, h, w, c, kh, kw, strides=strides, padding=padding,
                                           dilation=dilation))


def _registry():
  """The depthwise layers of real models at training batch sizes: the one list of
  shapes that matter, read by the tests (tests/test_registry.py) and the layer
  benchmark (benchmarks/bench_layers.py).

  Inputs at 224x224 (EfficientNet-B3 at 300x300), batch 64 for the small and
  mid-sized models and 32 for the large-kernel ones (RepLKNet-31B, SLaK-T, as their
  papers train at 32-64 a GPU). Each distinct problem appears once per model, named
  by stage and, where they differ, by expanded channels. Stride-2 layers use the
  models' own padding: symmetric k // 2 (PyTorch definitions), "SAME" for the
  TensorFlow-defined EfficientNets. Mamba's causal conv1d is an H = 1 problem with
  K - 1 columns of left padding.
  """
  L = []
  # MobileNetV2 (Sandler et al. 2018): 3x3 on the expanded channels, t = 6.
  for hw, c, s in ((112, 32, 1), (112, 96, 2), (56, 144, 1), (56, 144, 2), (28, 192, 1), (28, 192, 2),
                   (14, 384, 1), (14, 576, 1), (14, 576, 2), (7, 960, 1)):
    L.append(_layer("mobilenet_v2", f"{hw}x{hw}x{c}_s{s}", 64, hw, c, 3, strides=s))
  # MobileNetV3-Large (Howard et al. 2019): 3x3 and 5x5.
  for hw, c, k, s in ((112, 16, 3, 1), (112, 64, 3, 2), (56, 72, 3, 1), (56, 72, 5, 2), (28, 120, 5, 1),
                      (28, 240, 3, 2), (14, 200, 3, 1), (14, 480, 3, 1), (14, 672, 3, 1), (14, 672, 5, 2),
                      (7, 960, 5, 1)):
    L.append(_layer("mobilenet_v3_large", f"{hw}x{hw}x{c}_k{k}_s{s}", 64, hw, c, k, strides=s))
  # EfficientNet-B0 (Tan and Le 2019), TensorFlow "SAME" padding.
  for hw, c, k, s in ((112, 32, 3, 1), (112, 96, 3, 2), (56, 144, 3, 1), (56, 144, 5, 2), (28, 240, 5, 1),
                      (28, 240, 3, 2), (14, 480, 3, 1), (14, 480, 5, 1), (14, 672, 5, 1), (14, 672, 5, 2),
                      (7, 1152, 5, 1), (7, 1152, 3, 1)):
    L.append(_layer("efficientnet_b0", f"{hw}x{hw}x{c}_k{k}_s{s}", 64, hw, c, k, strides=s, padding="SAME"))
  # EfficientNet-B3 at 300x300: widths x1.2 (rounded to 8), stage inputs 150-10.
  for hw, c, k, s in ((150, 40, 3, 1), (150, 144, 3, 2), (75, 192, 3, 1), (75, 192, 5, 2), (38, 288, 5, 1),
                      (38, 288, 3, 2), (19, 576, 3, 1), (19, 816, 5, 1), (19, 816, 5, 2), (10, 1392, 5, 1),
                      (10, 1392, 3, 1)):
    L.append(_layer("efficientnet_b3", f"{hw}x{hw}x{c}_k{k}_s{s}", 32, hw, c, k, strides=s, padding="SAME"))
  # ConvNeXt-T (Liu et al. 2022): 7x7 on every stage.
  for hw, c in ((56, 96), (28, 192), (14, 384), (7, 768)):
    L.append(_layer("convnext_t", f"stage_{hw}x{hw}x{c}", 64, hw, c, 7))
  # VAN-B0 (Guo et al. 2022): LKA's 5x5 then 7x7 dilation 3, and the MLP's 3x3 on 8x the channels.
  for hw, c in ((56, 32), (28, 64), (14, 160), (7, 256)):
    L.append(_layer("van_b0", f"lka_5x5_{hw}x{hw}x{c}", 64, hw, c, 5))
    L.append(_layer("van_b0", f"lka_7x7_d3_{hw}x{hw}x{c}", 64, hw, c, 7, dilation=3))
    L.append(_layer("van_b0", f"mlp_3x3_{hw}x{hw}x{8 * c}", 64, hw, 8 * c, 3))
  # UniRepLKNet-T (Ding et al. 2024): 3x3 in stage 1, 13x13 from stage 2 with the dilated
  # training branches of its dilated reparam block (5 d1, 7 d2, 3 d3, 3 d4, 3 d5).
  L.append(_layer("unireplknet_t", "stage1_3x3_56x56x80", 64, 56, 80, 3))
  for hw, c in ((28, 160), (14, 320), (7, 640)):
    L.append(_layer("unireplknet_t", f"13x13_{hw}x{hw}x{c}", 64, hw, c, 13))
    for k, d in ((5, 1), (7, 2), (3, 3), (3, 4), (3, 5)):
      L.append(_layer("unireplknet_t", f"branch_{k}x{k}_d{d}_{hw}x{hw}x{c}", 64, hw, c, k, dilation=d))
  # InceptionNeXt-T (Yu et al. 2024): 3x3, 1x11 and 11x1 bands on an eighth of the channels each.
  for hw, c in ((56, 96), (28, 192), (14, 384), (7, 768)):
    g = c // 8
    L.append(_layer("inceptionnext_t", f"square_3x3_{hw}x{hw}x{g}", 64, hw, g, 3))
    L.append(_layer("inceptionnext_t", f"band_1x11_{hw}x{hw}x{g}", 64, hw, g, 1, 11))
    L.append(_layer("inceptionnext_t", f"band_11x1_{hw}x{hw}x{g}", 64, hw, g, 11, 1))
  # RepLKNet-31B (Ding et al. 2022): 31, 29, 27, 13 with the 5x5 training branch.
  for hw, c, k in ((56, 128, 31), (28, 256, 29), (14, 512, 27), (7, 1024, 13)):
    L.append(_layer("replknet_31b", f"{k}x{k}_{hw}x{hw}x{c}", 32, hw, c, k))
    L.append(_layer("replknet_31b", f"branch_5x5_{hw}x{hw}x{c}", 32, hw, c, 5))
  # SLaK-T (Liu et al. 2023): 51, 49, 47, 13 as a k x 5 and a 5 x k strip, and a 5x5.
  for hw, c, k in ((56, 96, 51), (28, 192, 49), (14, 384, 47), (7, 768, 13)):
    L.append(_layer("slak_t", f"{k}x5_{hw}x{hw}x{c}", 32, hw, c, k, 5))
    L.append(_layer("slak_t", f"5x{k}_{hw}x{hw}x{c}", 32, hw, c, 5, k))
    L.append(_layer("slak_t", f"branch_5x5_{hw}x{hw}x{c}", 32, hw, c, 5))
  # ConvMixer-1536/20 (Trockman and Kolter 2022): 9x9 on 32x32 (patch 7 at 224).
  L.append(_layer("convmixer_1536_20", "9x9_32x32x1536", 64, 32, 1536, 9))
  # Mamba's causal conv1d (Gu and Dao 2023), K = 4, on d_inner = 2 d_model channels:
  # Mamba-130M (1536) and Mamba-2.8B (5120), 2048-token sequences.
  for c, n in ((1536, 8), (5120, 4)):
    L.append(_layer("mamba", f"conv1d_k4_L2048_c{c}", n, (1, 2048), c, 1, 4, padding=((0, 0), (3, 0))))
  return L


MODEL_LAYERS = _registry()


def model_layers(models=None):
  """The registry's problems (ConvCase, named model/layer), optionally for some models only."""
  return [m.case for m in MODEL_LAYERS if models is None or m.model in models]
