"""The kernel plan (csrc/plan/, through the extension) for named shapes and for every
layer of the model registry, so that the numerical tests exercise every kernel and a
change of kernel for a real layer shows. The plan is host code: these run without a
GPU, on a CPU-only build too."""

import pytest

from jax_flashdwc import _ffi
from numerics import pair
from shapes import MODEL_LAYERS, TEST_CASES

# An H100's limits (an H200 differs only in L2 size, which no kernel choice reads): the
# plan is host code, so these tests run without a GPU.
H100 = dict(sms=132, smem_per_block=232448, smem_per_sm=233472, smem_reserved_per_block=1024, l2_bytes=50 << 20)
_native = _ffi._jax_flashdwc


def _fwd(channels, out_w, kernel_w, stride_w, dilation_w, half_precision=False, kernel_h=1, stride_h=1,
         dilation_h=1):
  problem = dict(channels=channels, out_w=out_w, in_w=out_w, out_h=64, kernel_w=kernel_w, kernel_h=kernel_h,
                 stride_w=stride_w, stride_h=stride_h, dilation_w=dilation_w, dilation_h=dilation_h)
  return _native.plan_fwd(problem, half_precision=half_precision, device=H100)


def _bwd_filter(channels, in_h, in_w, out_w, kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w,
                half_precision, deterministic=False):
  problem = dict(channels=channels, in_h=in_h, out_h=in_h, in_w=in_w, out_w=out_w, kernel_h=kernel_h,
                 kernel_w=kernel_w, stride_h=stride_h, stride_w=stride_w, dilation_h=dilation_h,
                 dilation_w=dilation_w)
  return _native.plan_bwd_filter(problem, half_precision=half_precision, deterministic=deterministic, device=H100)


def _tiling(kernel_w, half_precision, kernel_h=0):
  problem = dict(kernel_w=kernel_w, kernel_h=kernel_h or kernel_w)
  return tuple(_native.plan_bwd_filter_tiling(problem, half_precision=half_precision))


def _axis(size, k, stride, dilation, padding):
  """(output size, padding before) of one axis; padding is "SAME", "VALID" or (lo, hi)."""
  span = dilation * (k - 1) + 1
  if padding == "SAME":
    out = -(-size // stride)
    return out, max((out - 1) * stride + span - size, 0) // 2
  lo, hi = (0, 0) if padding == "VALID" else padding
  return (size + lo + hi - span) // stride + 1, lo


def problem(case):
  """The DwConvParams fields of a ConvCase's forward problem."""
  sh, sw = pair(case.strides)
  dh, dw = pair(case.dilation)
  ph, pw = (case.padding, case.padding) if isinstance(case.padding, str) else case.padding
  out_h, pad_top = _axis(case.h, case.kh, sh, dh, ph)
  out_w, pad_left = _axis(case.w, case.kw, sw, dw, pw)
  return dict(batch=case.n, in_h=case.h, in_w=case.w, out_h=out_h, out_w=out_w, channels=case.c, kernel_h=case.kh,
              kernel_w=case.kw, stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw, pad_top=pad_top,
              pad_left=pad_left)


def plans(case):
  """(forward fp16/bf16, forward fp32, input gradient fp16/bf16, filter gradient fp16/bf16, fp32) on an H100."""
  p = problem(case)
  return (_native.plan_fwd(p, half_precision=True, device=H100), _native.plan_fwd(p, device=H100),
          _native.plan_bwd_data(p, half_precision=True, device=H100),
          _native.plan_bwd_filter(p, half_precision=True, device=H100), _native.plan_bwd_filter(p, device=H100))


def _pick(native, case, half_precision=False):
  sh, sw = pair(case.strides)
  dh, dw = pair(case.dilation)
  return _fwd(channels=case.c, out_w=case.w, kernel_w=case.kw, stride_w=sw, dilation_w=dw,
                                    half_precision=half_precision, kernel_h=case.kh, stride_h=sh, dilation_h=dh)


def test_forward_plan_covers_every_kernel():
  chosen = {}
  for case in TEST_CASES:
    for half in (False, True):
      chosen.setdefault(_pick(_native, case, half_precision=half), []).append(case.name)
  assert set(chosen) == {"regfilter", "mma", "rowstream", "stride2", "gemv", "direct"}, chosen
  assert (len(chosen["rowstream"]) >= 5 and len(chosen["gemv"]) >= 10 and len(chosen["direct"]) >= 3), chosen


def test_forward_dispatch_limits():
  native = _native
  assert _fwd(channels=64, out_w=64, kernel_w=512, stride_w=1, dilation_w=1) == "gemv"
  assert _fwd(channels=64, out_w=64, kernel_w=513, stride_w=1, dilation_w=1) == "direct"
  assert _fwd(channels=64, out_w=64, kernel_w=7, stride_w=3, dilation_w=1) == "direct"
  assert _fwd(channels=64, out_w=64, kernel_w=7, stride_w=1, dilation_w=2) == "direct"


def test_half_precision_forward_goes_to_tensor_cores_from_k6():
  native = _native
  pick = lambda kw, sw=1, half=True, c=96, w=64: _fwd(
      channels=c, out_w=w, kernel_w=kw, stride_w=sw, dilation_w=1, half_precision=half)
  assert pick(7) == pick(31) == pick(63) == pick(31, c=64) == pick(7, c=64) == pick(7, c=768) == "mma"
  assert pick(6) == pick(6, c=64) == "mma"
  # KW = 5: tensor cores over one image a strip (out_w > 64) or a partial 64-channel block.
  assert pick(5) == pick(5, c=64, w=65) == pick(5, c=256, w=128) == "mma"
  assert pick(5, c=64) == pick(5, c=1024, w=32) == pick(5, c=96, half=False) == "rowstream"
  assert pick(3) == pick(3, w=128) == pick(7, half=False) == "rowstream"
  by_name = {case.name: case for case in TEST_CASES}
  assert _pick(native, by_name["rows_k7_c128"], half_precision=True) == "mma"
  assert _pick(native, by_name["rows_k9x7_c64_narrow"], half_precision=True) == "mma"
  assert _pick(native, by_name["convnext_k7_pad3"], half_precision=True) == "mma"  # C = 40
  assert pick(3, sw=2) == pick(7, sw=2) == "gemv"  # stride 2 along the width only
  assert pick(31, half=False) == "gemv"


def test_stride2_3x3_and_5x5_go_to_the_stride2_kernel():
  def pick(k=3, c=96, w=56, half=True, kh=None, sh=2, sw=2, dh=1):
    return _fwd(channels=c, out_w=w, kernel_w=k, stride_w=sw, dilation_w=1, half_precision=half,
                kernel_h=k if kh is None else kh, stride_h=sh, dilation_h=dh)

  for half in (False, True):
    assert pick(half=half) == pick(5, half=half) == pick(3, c=8, w=1, half=half) == "stride2"
  # C a multiple of the channels a thread: 8 fp16/bf16 and 4 fp32 at 3x3, 4 and 2 at 5x5.
  assert pick(c=12) == pick(5, c=6) == pick(c=6, half=False) == "gemv"
  assert pick(c=12, half=False) == pick(5, c=12) == pick(5, c=6, half=False) == "stride2"
  # Not square, 7x7, stride 2 on one axis only, or dilated: the GEMV kernel (or direct).
  assert pick(kh=5) == pick(7) == pick(sh=1) == pick(dh=2) == "gemv"


def test_3x3_and_5x5_go_to_the_register_filter_kernel():
  native = _native
  pick = lambda w, k=5, c=256, kh=None, sw=1, half=True: _fwd(
      channels=c, out_w=w, kernel_w=k, stride_w=sw, dilation_w=1, half_precision=half,
      kernel_h=k if kh is None else kh)
  assert pick(64) == pick(32) == pick(48, c=64) == pick(65) == pick(128, c=128) == pick(7, c=768) == "regfilter"
  assert pick(32, k=3) == pick(128, k=3, c=128) == pick(1, k=3, c=64) == pick(14, k=3, c=384) == "regfilter"
  # fp32 takes it on maps of at most 31 columns (C a multiple of 4, few padding lanes),
  # else the row-stream kernel; other filter shapes keep the row-stream kernel; partial
  # 64-channel blocks at 5x5 the tensor-core one.
  assert pick(31, half=False) == pick(7, k=3, c=960, half=False) == pick(14, k=3, c=120, half=False) == "regfilter"
  assert pick(32, half=False) == pick(64, half=False) == pick(112, k=3, c=32, half=False) == "rowstream"
  assert pick(14, k=3, c=16, half=False) == "rowstream"  # 16 of 32 lanes would idle
  assert pick(64, kh=3) == pick(40, kh=7) == pick(40, k=3, kh=5) == pick(16, k=3, c=96) == "rowstream"
  assert pick(56, c=96) == pick(40, c=96) == pick(128, c=96) == "mma"
  assert pick(64, sw=2) == pick(64, k=3, sw=2) == "gemv"
  by_name = {case.name: case for case in TEST_CASES}
  for name in ("regfilter_k5_c128_w40", "regfilter_k5_c64_pad", "regfilter_k3_c64_w73", "regfilter_k3_c192_w7",
               "regfilter_k5_c128_w7", "rows_valid_k5_c64_w70", "rows_k5_c64_w30_n3_pairs"):
    assert _pick(native, by_name[name], half_precision=True) == "regfilter", name


@pytest.mark.skipif(not _ffi.cuda_available(), reason="built without CUDA")
@pytest.mark.parametrize("half_precision", [False, True])
def test_filter_gradient_workspace_is_whole_fp32_slices(half_precision):
  native = _native
  shape = dict(batch=8, out_h=64, channels=256, kernel_h=3, kernel_w=3, stride_h=1, stride_w=1, dilation_h=1,
               dilation_w=1)
  slice_bytes = 3 * 3 * 256 * 4
  atomic = native.cuda_bwd_filter_workspace_bytes(**shape, deterministic=False, half_precision=half_precision)
  ordered = native.cuda_bwd_filter_workspace_bytes(**shape, deterministic=True, half_precision=half_precision)
  assert atomic == slice_bytes  # one slice, merged by atomics
  assert ordered % slice_bytes == 0 and ordered > slice_bytes  # one slice per chunk
  assert native.cuda_bwd_filter_workspace_bytes(**{**shape, "dilation_w": 2}, deterministic=True,
                                                half_precision=half_precision) == 0  # the direct kernel


def _bwd_filter_pick(native, case, half_precision, deterministic=False):
  sh, sw = pair(case.strides)
  dh, dw = pair(case.dilation)
  out_w = (case.w - 1) // sw + 1  # SAME padding's width; the choice depends on it
  return _bwd_filter(channels=case.c, in_h=case.h, in_w=case.w, out_w=out_w, kernel_h=case.kh,
                                       kernel_w=case.kw, stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw,
                                       half_precision=half_precision, deterministic=deterministic)


def test_filter_gradient_plan_covers_every_kernel():
  chosen = {True: set(), False: set()}
  for case in TEST_CASES:
    for half in (True, False):
      picked = _bwd_filter_pick(_native, case, half)
      chosen[half].add(picked)
      # Deterministic mode has no row-stream kernel (its merge is atomic); the others stay.
      ordered = _bwd_filter_pick(_native, case, half, deterministic=True)
      assert ordered == ("split" if picked in ("rowstream", "small") else picked), case.name
  # fp16/bf16 row-stream only where the small-filter kernel cannot run (rows_k7x3_c64).
  assert chosen[True] == {"mma", "rowstream", "small", "split", "direct"}, chosen
  assert chosen[False] == {"gemv", "rowstream", "small", "split", "direct"}, chosen


# The plan of every layer of the model registry (tests/shapes.py), on an H100:
# (forward fp16/bf16, forward fp32, input gradient fp16/bf16, filter gradient
# fp16/bf16, filter gradient fp32). A change here is a change of kernel for a real
# model's layer: time it (benchmarks/bench_layers.py) before updating the table.
REGISTRY_PLANS = {
    "mobilenet_v2/112x112x32_s1": ('rowstream', 'rowstream', 'forward:rowstream', 'small', 'rowstream'),
    "mobilenet_v2/112x112x96_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "mobilenet_v2/56x56x144_s1": ('rowstream', 'rowstream', 'forward:rowstream', 'small', 'small'),
    "mobilenet_v2/56x56x144_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "mobilenet_v2/28x28x192_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "mobilenet_v2/28x28x192_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "mobilenet_v2/14x14x384_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "mobilenet_v2/14x14x576_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "mobilenet_v2/14x14x576_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "mobilenet_v2/7x7x960_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "mobilenet_v3_large/112x112x16_k3_s1": ('rowstream', 'rowstream', 'forward:rowstream', 'small', 'small'),
    "mobilenet_v3_large/112x112x64_k3_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "mobilenet_v3_large/56x56x72_k3_s1": ('rowstream', 'rowstream', 'forward:rowstream', 'small', 'small'),
    "mobilenet_v3_large/56x56x72_k5_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "mobilenet_v3_large/28x28x120_k5_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "mobilenet_v3_large/28x28x240_k3_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "mobilenet_v3_large/14x14x200_k3_s1": ('rowstream', 'regfilter', 'forward:rowstream', 'small', 'small'),
    "mobilenet_v3_large/14x14x480_k3_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "mobilenet_v3_large/14x14x672_k3_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "mobilenet_v3_large/14x14x672_k5_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "mobilenet_v3_large/7x7x960_k5_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "efficientnet_b0/112x112x32_k3_s1": ('rowstream', 'rowstream', 'forward:rowstream', 'small', 'rowstream'),
    "efficientnet_b0/112x112x96_k3_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "efficientnet_b0/56x56x144_k3_s1": ('rowstream', 'rowstream', 'forward:rowstream', 'small', 'small'),
    "efficientnet_b0/56x56x144_k5_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "efficientnet_b0/28x28x240_k5_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "efficientnet_b0/28x28x240_k3_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "efficientnet_b0/14x14x480_k3_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "efficientnet_b0/14x14x480_k5_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "efficientnet_b0/14x14x672_k5_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "efficientnet_b0/14x14x672_k5_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "efficientnet_b0/7x7x1152_k5_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "efficientnet_b0/7x7x1152_k3_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "efficientnet_b3/150x150x40_k3_s1": ('rowstream', 'rowstream', 'forward:rowstream', 'small', 'small'),
    "efficientnet_b3/150x150x144_k3_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "efficientnet_b3/75x75x192_k3_s1": ('regfilter', 'rowstream', 'forward:regfilter', 'small', 'rowstream'),
    "efficientnet_b3/75x75x192_k5_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "efficientnet_b3/38x38x288_k5_s1": ('regfilter', 'rowstream', 'forward:regfilter', 'small', 'rowstream'),
    "efficientnet_b3/38x38x288_k3_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "efficientnet_b3/19x19x576_k3_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "efficientnet_b3/19x19x816_k5_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "efficientnet_b3/19x19x816_k5_s2": ('stride2', 'stride2', 'phase', 'small', 'small'),
    "efficientnet_b3/10x10x1392_k5_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "efficientnet_b3/10x10x1392_k3_s1": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "convnext_t/stage_56x56x96": ('mma', 'rowstream', 'forward:mma', 'mma', 'rowstream'),
    "convnext_t/stage_28x28x192": ('mma', 'rowstream', 'forward:mma', 'mma', 'split'),
    "convnext_t/stage_14x14x384": ('mma', 'rowstream', 'forward:mma', 'mma', 'split'),
    "convnext_t/stage_7x7x768": ('mma', 'rowstream', 'forward:mma', 'split', 'split'),
    "van_b0/lka_5x5_56x56x32": ('mma', 'rowstream', 'forward:mma', 'small', 'rowstream'),
    "van_b0/lka_7x7_d3_56x56x32": ('direct', 'direct', 'forward:direct', 'direct', 'direct'),
    "van_b0/mlp_3x3_56x56x256": ('regfilter', 'rowstream', 'forward:regfilter', 'small', 'rowstream'),
    "van_b0/lka_5x5_28x28x64": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "van_b0/lka_7x7_d3_28x28x64": ('regfilter', 'direct', 'forward:regfilter', 'direct', 'direct'),
    "van_b0/mlp_3x3_28x28x512": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "van_b0/lka_5x5_14x14x160": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "van_b0/lka_7x7_d3_14x14x160": ('regfilter', 'direct', 'forward:regfilter', 'direct', 'direct'),
    "van_b0/mlp_3x3_14x14x1280": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "van_b0/lka_5x5_7x7x256": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "van_b0/lka_7x7_d3_7x7x256": ('regfilter', 'direct', 'forward:regfilter', 'direct', 'direct'),
    "van_b0/mlp_3x3_7x7x2048": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "unireplknet_t/stage1_3x3_56x56x80": ('rowstream', 'rowstream', 'forward:rowstream', 'small', 'small'),
    "unireplknet_t/13x13_28x28x160": ('mma', 'gemv', 'forward:mma', 'mma', 'split'),
    "unireplknet_t/branch_5x5_d1_28x28x160": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "unireplknet_t/branch_7x7_d2_28x28x160": ('regfilter', 'direct', 'forward:regfilter', 'direct', 'direct'),
    "unireplknet_t/branch_3x3_d3_28x28x160": ('regfilter', 'regfilter', 'forward:regfilter', 'direct', 'direct'),
    "unireplknet_t/branch_3x3_d4_28x28x160": ('regfilter', 'regfilter', 'forward:regfilter', 'direct', 'direct'),
    "unireplknet_t/branch_3x3_d5_28x28x160": ('regfilter', 'regfilter', 'forward:regfilter', 'direct', 'direct'),
    "unireplknet_t/13x13_14x14x320": ('mma', 'gemv', 'forward:mma', 'mma', 'split'),
    "unireplknet_t/branch_5x5_d1_14x14x320": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "unireplknet_t/branch_7x7_d2_14x14x320": ('regfilter', 'direct', 'forward:regfilter', 'direct', 'direct'),
    "unireplknet_t/branch_3x3_d3_14x14x320": ('regfilter', 'regfilter', 'forward:regfilter', 'direct', 'direct'),
    "unireplknet_t/branch_3x3_d4_14x14x320": ('regfilter', 'regfilter', 'forward:regfilter', 'direct', 'direct'),
    "unireplknet_t/branch_3x3_d5_14x14x320": ('regfilter', 'regfilter', 'forward:regfilter', 'direct', 'direct'),
    "unireplknet_t/13x13_7x7x640": ('mma', 'gemv', 'forward:mma', 'mma', 'split'),
    "unireplknet_t/branch_5x5_d1_7x7x640": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "unireplknet_t/branch_7x7_d2_7x7x640": ('regfilter', 'direct', 'forward:regfilter', 'direct', 'direct'),
    "unireplknet_t/branch_3x3_d3_7x7x640": ('regfilter', 'regfilter', 'forward:regfilter', 'direct', 'direct'),
    "unireplknet_t/branch_3x3_d4_7x7x640": ('regfilter', 'regfilter', 'forward:regfilter', 'direct', 'direct'),
    "unireplknet_t/branch_3x3_d5_7x7x640": ('regfilter', 'regfilter', 'forward:regfilter', 'direct', 'direct'),
    "inceptionnext_t/square_3x3_56x56x12": ('gemv', 'rowstream', 'forward:gemv', 'split', 'small'),
    "inceptionnext_t/band_1x11_56x56x12": ('mma', 'gemv', 'forward:mma', 'mma', 'split'),
    "inceptionnext_t/band_11x1_56x56x12": ('gemv', 'gemv', 'forward:gemv', 'split', 'split'),
    "inceptionnext_t/square_3x3_28x28x24": ('rowstream', 'rowstream', 'forward:rowstream', 'small', 'small'),
    "inceptionnext_t/band_1x11_28x28x24": ('mma', 'gemv', 'forward:mma', 'mma', 'split'),
    "inceptionnext_t/band_11x1_28x28x24": ('gemv', 'gemv', 'forward:gemv', 'split', 'split'),
    "inceptionnext_t/square_3x3_14x14x48": ('rowstream', 'rowstream', 'forward:rowstream', 'small', 'small'),
    "inceptionnext_t/band_1x11_14x14x48": ('mma', 'gemv', 'forward:mma', 'mma', 'split'),
    "inceptionnext_t/band_11x1_14x14x48": ('gemv', 'gemv', 'forward:gemv', 'split', 'split'),
    "inceptionnext_t/square_3x3_7x7x96": ('rowstream', 'regfilter', 'forward:rowstream', 'small', 'small'),
    "inceptionnext_t/band_1x11_7x7x96": ('mma', 'gemv', 'forward:mma', 'mma', 'split'),
    "inceptionnext_t/band_11x1_7x7x96": ('gemv', 'gemv', 'forward:gemv', 'split', 'split'),
    "replknet_31b/31x31_56x56x128": ('mma', 'gemv', 'forward:mma', 'mma', 'gemv'),
    "replknet_31b/branch_5x5_56x56x128": ('regfilter', 'rowstream', 'forward:regfilter', 'small', 'rowstream'),
    "replknet_31b/29x29_28x28x256": ('mma', 'gemv', 'forward:mma', 'mma', 'gemv'),
    "replknet_31b/branch_5x5_28x28x256": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "replknet_31b/27x27_14x14x512": ('mma', 'gemv', 'forward:mma', 'mma', 'gemv'),
    "replknet_31b/branch_5x5_14x14x512": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "replknet_31b/13x13_7x7x1024": ('mma', 'gemv', 'forward:mma', 'mma', 'split'),
    "replknet_31b/branch_5x5_7x7x1024": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "slak_t/51x5_56x56x96": ('mma', 'gemv', 'forward:mma', 'split', 'split'),
    "slak_t/5x51_56x56x96": ('mma', 'gemv', 'forward:mma', 'mma', 'gemv'),
    "slak_t/branch_5x5_56x56x96": ('mma', 'rowstream', 'forward:mma', 'small', 'rowstream'),
    "slak_t/49x5_28x28x192": ('gemv', 'gemv', 'forward:gemv', 'split', 'split'),
    "slak_t/5x49_28x28x192": ('mma', 'gemv', 'forward:mma', 'mma', 'gemv'),
    "slak_t/branch_5x5_28x28x192": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "slak_t/47x5_14x14x384": ('gemv', 'gemv', 'forward:gemv', 'split', 'split'),
    "slak_t/5x47_14x14x384": ('mma', 'gemv', 'forward:mma', 'mma', 'gemv'),
    "slak_t/branch_5x5_14x14x384": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "slak_t/13x5_7x7x768": ('gemv', 'gemv', 'forward:gemv', 'split', 'split'),
    "slak_t/5x13_7x7x768": ('mma', 'gemv', 'forward:mma', 'mma', 'split'),
    "slak_t/branch_5x5_7x7x768": ('regfilter', 'regfilter', 'forward:regfilter', 'small', 'small'),
    "convmixer_1536_20/9x9_32x32x1536": ('mma', 'gemv', 'forward:mma', 'mma', 'split'),
    "mamba/conv1d_k4_L2048_c1536": ('gemv', 'gemv', 'forward:gemv', 'split', 'split'),
    "mamba/conv1d_k4_L2048_c5120": ('gemv', 'gemv', 'forward:gemv', 'split', 'split'),
}


def test_model_registry_plans():
  got = {m.case.name: plans(m.case) for m in MODEL_LAYERS}
  assert got == REGISTRY_PLANS


def test_plan_thresholds_are_what_python_reads():
  from jax_flashdwc import conv

  t = _ffi.plan_thresholds()
  assert (conv._TALL_MIN_KERNEL_H, conv._TALL_MAX_KERNEL_W) == (t["tall_filter_min_kernel_h"],
                                                                 t["tall_filter_max_kernel_w"])
  # The plan's thresholds, as the tests above exercise them.
  assert t["fwd_mma_min_kernel_w"] == 6 and t["bwd_filter_mma_min_kernel_w"] == 9
  assert t["bwd_filter_gemv_min_kernel_w"] == 27 and t["bwd_filter_rowstream_min_out_w"] == 32


def test_input_gradient_plan():
  p = dict(channels=256, in_h=64, in_w=64, out_h=64, out_w=64, kernel_h=7, kernel_w=7, pad_top=3, pad_left=3)
  assert _native.plan_bwd_data(p, half_precision=True, device=H100) == "forward:mma"
  assert _native.plan_bwd_data({**p, "kernel_h": 3, "kernel_w": 3}, half_precision=True, device=H100) == \
      "forward:regfilter"
  s2 = {**p, "stride_h": 2, "stride_w": 2, "out_h": 32, "out_w": 32}
  assert _native.plan_bwd_data(s2, device=H100) == "gather"  # 7x7
  # Stride 2, square 3x3 and 5x5: the polyphase kernel, where C is a multiple of its
  # channels a thread (8 fp16/bf16 and 4 fp32 at 3x3, 4 and 2 at 5x5).
  for k in (3, 5):
    q = {**s2, "kernel_h": k, "kernel_w": k, "pad_top": k // 2, "pad_left": 0}
    assert _native.plan_bwd_data(q, half_precision=True, device=H100) == "phase"
    assert _native.plan_bwd_data(q, device=H100) == "phase"
  c = lambda k, ch: {**s2, "kernel_h": k, "kernel_w": k, "channels": ch}
  assert _native.plan_bwd_data(c(3, 12), half_precision=True, device=H100) == "gather"
  assert _native.plan_bwd_data(c(3, 12), device=H100) == "phase"
  assert _native.plan_bwd_data(c(5, 12), half_precision=True, device=H100) == "phase"
  assert _native.plan_bwd_data(c(5, 6), half_precision=True, device=H100) == "gather"
  assert _native.plan_bwd_data(c(5, 6), device=H100) == "phase"
  # Not square, another stride, or dilated: the gather kernel.
  assert _native.plan_bwd_data({**c(3, 64), "kernel_w": 5}, device=H100) == "gather"
  assert _native.plan_bwd_data({**c(3, 64), "stride_w": 1}, device=H100) == "gather"
  assert _native.plan_bwd_data({**c(3, 64), "dilation_h": 2}, device=H100) == "gather"


def test_filter_gradient_tensor_core_bounds():
  native = _native

  def pick(kw, w, half_precision=True):
    return _bwd_filter(channels=256, in_h=64, in_w=w, out_w=w, kernel_h=kw, kernel_w=kw,
                                         stride_h=1, stride_w=1, dilation_h=1, dilation_w=1,
                                         half_precision=half_precision)

  assert pick(9, 64) == "mma" and pick(9, 32) == "mma" and pick(9, 8) == "mma"  # from 9 taps, any map
  assert pick(13, 32) == "mma" and pick(13, 8) == "mma"
  assert pick(7, 128) == "mma" and pick(7, 14) == "mma" and pick(7, 13) != "mma"  # k = 7 from 14 columns
  convnext = [_bwd_filter(channels=c, in_h=w, in_w=w, out_w=w, kernel_h=7, kernel_w=7, stride_h=1,
                                            stride_w=1, dilation_h=1, dilation_w=1, half_precision=True)
              for w, c in ((56, 96), (28, 192), (14, 384), (7, 768))]
  assert convnext == ["mma", "mma", "mma", "split"]  # ConvNeXt-T's four stages
  # fp16/bf16 square 3x3 and 5x5: the small-filter kernel; fp32 keeps the row-stream kernel.
  assert pick(5, 128) == "small" and pick(3, 128) == "small"
  assert pick(5, 128, half_precision=False) == "rowstream" and pick(3, 128, half_precision=False) == "rowstream"
  assert pick(7, 128, half_precision=False) == "rowstream"
  assert pick(27, 128, half_precision=False) == "gemv" and pick(21, 128, half_precision=False) == "split"


def test_filter_gradient_rowstream_takes_only_the_shapes_it_was_timed_faster_on():
  native = _native

  def pick(k, w, c, half_precision=True, kh=None):
    return _bwd_filter(channels=c, in_h=w, in_w=w, out_w=w, kernel_h=kh or k, kernel_w=k,
                                         stride_h=1, stride_w=1, dilation_h=1, dilation_w=1,
                                         half_precision=half_precision)

  # The paper's maps: faster than the split kernel in both precisions. In fp16/bf16 the
  # small-filter kernel takes square 3x3 and 5x5 ahead of it (thresholds.h,
  # bwd_filter_small_half_over_rowstream); fp32 keeps it there.
  assert pick(3, 64, 256, half_precision=False) == pick(5, 32, 1024, half_precision=False) == "rowstream"
  assert pick(5, 128, 128, half_precision=False) == "rowstream"
  assert pick(3, 64, 256) == pick(5, 32, 1024) == "small"
  assert pick(7, 32, 1024, half_precision=False) == "rowstream"  # fp16/bf16 k = 7 goes to tensor cores
  # ConvNeXt-T's last stage (7 wide; the three before take tensor cores in fp16/bf16,
  # test_filter_gradient_tensor_core_bounds).
  assert pick(7, 7, 768) == "split"
  assert pick(7, 56, 96, half_precision=False) == "rowstream"  # 3 whole 32-channel blocks
  # Its 32-column floor: below it fp32 3x3 goes to the small-filter kernel, and a
  # non-square fp16/bf16 filter (which that kernel does not take) to the split kernel.
  assert pick(3, 32, 128, half_precision=False) == "rowstream" and pick(3, 31, 128, half_precision=False) == "small"
  assert pick(3, 32, 128, kh=5) == "rowstream" and pick(3, 31, 128, kh=5) == "split"
  assert pick(3, 32, 128) == pick(3, 31, 128) == "small"
  assert pick(3, 64, 256, kh=7) == "rowstream" and pick(3, 64, 256, kh=8) == "split"


def test_filter_gradient_tiling():
  tiling = _tiling
  # (channels per thread, taps per thread, filter rows per thread), square filters at stride 1.
  # fp16/bf16: 16-byte loads (width 8) where they waste no more taps, else 4 channels; one row.
  assert tiling(3, half_precision=True) == (8, 3, 1)  # 3 taps against width 4's TM 4
  assert tiling(5, half_precision=True) == (4, 5, 1)  # width 8 would compute 6
  assert tiling(7, half_precision=True) == (4, 7, 1)
  assert tiling(9, half_precision=True) == (8, 3, 1)
  assert tiling(13, half_precision=True) == (4, 7, 1)  # width 8 would compute 16
  assert tiling(31, half_precision=True) == (8, 4, 1)  # 32 taps either way
  # fp32: one channel per lane where its TM (9 to 16) computes fewer taps than width 4's.
  assert tiling(3, half_precision=False) == (4, 4, 1)
  assert tiling(8, half_precision=False) == (4, 8, 1)
  assert tiling(9, half_precision=False) == (1, 9, 3)  # width 4: TM 5, 10 taps
  assert tiling(13, half_precision=False) == (1, 13, 2)  # 13 against 14
  assert tiling(17, half_precision=False) == (1, 9, 3)  # 18 against 21; 18 rows for 17
  assert tiling(51, half_precision=False) == (1, 13, 1)  # 52 against 56; one row (csrc/plan/bwd_filter.cc)
  assert tiling(21, half_precision=False) == (4, 7, 1)  # 21 against 22
  assert tiling(31, half_precision=False) == (4, 8, 1)  # 32 either way
  # Several rows only where the padding rows are at most an eighth of the filter's height.
  assert tiling(9, half_precision=False, kernel_h=1) == (1, 9, 1)
  assert tiling(9, half_precision=False, kernel_h=7) == (1, 9, 1)  # 9 rows for 7
  assert tiling(9, half_precision=False, kernel_h=8) == (1, 9, 3)  # 9 rows for 8
  assert tiling(13, half_precision=False, kernel_h=5) == (1, 13, 1)  # 6 rows for 5


def test_regfilter_lane_layout_model():
  """The register-filter kernel's padded lanes and copies, modelled on the CPU
  (tests/cuda/fwd_regfilter_lanes_model.py): no copy outside the pixel, every active
  lane's words in its ring slots."""
  import importlib.util
  import os

  path = os.path.join(os.path.dirname(__file__), "cuda", "fwd_regfilter_lanes_model.py")
  spec = importlib.util.spec_from_file_location("fwd_regfilter_lanes_model", path)
  model = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(model)
  # C = 160 and 56 in fp16/bf16 (80 and 28 words), C = 36 in fp32 (36 words).
  assert model.check(80, 10) == [] and model.check(28, 8) == [] and model.check(36, 10) == []
  assert model.main() == 0


def test_regfilter_dilation_walk_model():
  """The register-filter kernel's walk over residue classes in place, modelled on the CPU
  with the plan's own grid (tests/cuda/fwd_regfilter_dilation_model.py): every output
  written once and equal to a direct dilated convolution, every read inside the image."""
  import importlib.util
  import os

  path = os.path.join(os.path.dirname(__file__), "cuda", "fwd_regfilter_dilation_model.py")
  spec = importlib.util.spec_from_file_location("fwd_regfilter_dilation_model", path)
  model = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(model)
  assert model.check(_native.plan_fwd_launch) == []


def _launch(plan):
  return plan["kernel"], plan["grid"], plan["block"], plan["smem_bytes"]


# Launch configurations of named registry layers on an H100 with aligned buffers (the
# plan's plan_*_launch): kernel, grid, block and dynamic shared memory bytes, as the
# launchers computed them before the plan took them over, so that a change of any
# launch shows here.
FWD_LAUNCHES = {
    ("mobilenet_v2/112x112x96_s2", True): ("stride2", (37, 64, 1), (128, 1, 1), 0),
    ("mobilenet_v2/112x112x96_s2", False): ("stride2", (42, 64, 1), (128, 1, 1), 0),
    ("convnext_t/stage_56x56x96", True): ("mma", (6, 224, 1), (256, 1, 1), 75424),
    ("convnext_t/stage_56x56x96", False): ("rowstream", (768, 1, 1), (128, 1, 1), 86912),
    ("van_b0/mlp_3x3_56x56x256", True): ("regfilter", (448, 3, 1), (128, 1, 1), 0),
    ("van_b0/mlp_3x3_56x56x256", False): ("rowstream", (2048, 1, 1), (128, 1, 1), 43392),
    ("van_b0/lka_7x7_d3_56x56x32", True): ("direct", (2, 3584, 1), (128, 1, 1), 0),
    ("replknet_31b/31x31_56x56x128", True): ("mma", (8, 112, 1), (256, 1, 1), 104608),
    ("replknet_31b/31x31_56x56x128", False): ("gemv", (784, 4, 1), (128, 1, 1), 31744),
    ("convmixer_1536_20/9x9_32x32x1536", True): ("mma", (96, 16, 1), (256, 1, 1), 95904),
    ("convmixer_1536_20/9x9_32x32x1536", False): ("gemv", (512, 48, 1), (128, 1, 1), 20736),
}
BWD_DATA_LAUNCHES = {
    "mobilenet_v2/112x112x96_s2": ("phase", (38, 64, 1), (128, 1, 1), 0),
    "convnext_t/stage_56x56x96": ("forward:mma", (6, 224, 1), (256, 1, 1), 75424),
}
# (name, half precision, deterministic). The row-stream and small-filter grids are set
# at launch from the kernels' occupancy, so the plan says (1, 1, 1) there.
BWD_FILTER_LAUNCHES = {
    ("replknet_31b/31x31_56x56x128", False, False): ("gemv", (8, 4, 32), (128, 1, 1), 28672),
    ("replknet_31b/31x31_56x56x128", False, True): ("gemv", (8, 4, 64), (128, 1, 1), 28672),
    ("replknet_31b/31x31_56x56x128", True, False): ("mma", (2, 16, 48), (128, 1, 1), 34320),
    ("convnext_t/stage_56x56x96", True, False): ("mma", (1, 12, 163), (128, 1, 1), 25104),
    ("convnext_t/stage_56x56x96", False, False): ("rowstream", (1, 1, 1), (128, 1, 1), 105216),
    ("convnext_t/stage_56x56x96", False, True): ("split", (1, 3, 598), (128, 1, 1), 0),
    ("mobilenet_v2/112x112x96_s2", True, False): ("small", (1, 1, 1), (128, 1, 1), 39936),
    ("convmixer_1536_20/9x9_32x32x1536", False, False): ("split", (1, 48, 43), (128, 1, 1), 0),
    ("van_b0/lka_7x7_d3_56x56x32", False, False): ("direct", (49, 1, 1), (32, 8, 1), 0),
}


def test_launch_plans_of_registry_layers():
  cases = {m.case.name: m.case for m in MODEL_LAYERS}
  for (name, half), want in FWD_LAUNCHES.items():
    got = _native.plan_fwd_launch(problem(cases[name]), half_precision=half, device=H100)
    assert _launch(got) == want, (name, half, got)
  for name, want in BWD_DATA_LAUNCHES.items():
    got = _native.plan_bwd_data_launch(problem(cases[name]), half_precision=True, device=H100)
    assert _launch(got) == want, (name, got)
  for (name, half, deterministic), want in BWD_FILTER_LAUNCHES.items():
    got = _native.plan_bwd_filter_launch(problem(cases[name]), half_precision=half, deterministic=deterministic,
                                         device=H100)
    assert _launch(got) == want, (name, half, deterministic, got)


# An H200 of a build with the Hopper kernel: DeviceLimits::wgmma set (the plan reads no
# other difference from the H100).
H200_WGMMA = dict(H100, l2_bytes=60 << 20, wgmma=1)


def test_hopper_forward_takes_large_square_filters_on_sm90_only():
  p = dict(batch=128, in_h=64, in_w=64, out_h=64, out_w=64, channels=256, kernel_h=31, kernel_w=31, pad_top=15,
           pad_left=15)
  pick = lambda half=True, device=H200_WGMMA, **change: _native.plan_fwd({**p, **change}, half_precision=half,
                                                                          device=device)
  k = lambda k, **change: dict(kernel_h=k, kernel_w=k, pad_top=k // 2, pad_left=k // 2, **change)
  assert pick() == pick(**k(51)) == pick(**k(57)) == pick(**k(33, channels=8)) == "wgmma"
  # Padding on one side only (the output still as large as the input), odd sizes.
  assert pick(pad_top=0, pad_left=30) == pick(batch=3, in_h=37, out_h=37, in_w=70, out_w=70) == "wgmma"
  # Not on an H100, not in fp32, not below the threshold or above 57 columns (four k-steps).
  assert pick(device=H100) == pick(**k(17)) == pick(**k(63)) == "mma"
  assert pick(half=False) == "gemv"
  assert _ffi.plan_thresholds()["fwd_wgmma_min_kernel"] == 31
  assert pick(kernel_h=51, pad_top=25) == "wgmma"  # 51 x 31
  assert pick(**k(29)) == pick(kernel_w=29, pad_left=14) == "mma"
  assert pick(kernel_w=5, pad_left=2) == "gemv"  # 31 x 5
  # Under 48 output columns only from 51 taps across (fwd_wgmma_min_out_w,
  # fwd_wgmma_narrow_min_kernel).
  narrow = dict(in_w=32, out_w=32)
  assert pick(**narrow) == pick(in_w=47, out_w=47) == pick(**k(33), **narrow) == "mma"
  assert pick(**k(51), **narrow) == pick(**k(57), in_w=17, out_w=17) == "wgmma"
  assert pick(in_w=48, out_w=48) == pick(in_w=56, out_w=56) == pick(in_w=64, out_w=64) == "wgmma"
  # Geometry it does not take: channels not a multiple of 8, a smaller output (VALID),
  # stride, dilation, a row too wide for the transposes' shared tile.
  assert pick(channels=12) == pick(out_h=34, out_w=34, pad_top=0, pad_left=0) == "mma"
  assert pick(in_w=400, out_w=400) == "mma"
  assert pick(stride_h=2, stride_w=2, out_h=32, out_w=32) == "gemv"
  assert pick(dilation_h=2, dilation_w=2, pad_top=30, pad_left=30) == "direct"
  # The input gradient at stride 1 runs as this forward on the rotated filter.
  assert _native.plan_bwd_data(p, half_precision=True, device=H200_WGMMA) == "forward:wgmma"
  assert _native.plan_bwd_data(p, half_precision=True, device=H100) == "forward:mma"


def test_hopper_forward_launch_needs_its_workspace_and_no_prologue():
  p = dict(batch=128, in_h=64, in_w=64, out_h=64, out_w=64, channels=256, kernel_h=51, kernel_w=51, pad_top=25,
           pad_left=25)
  want = _native.fwd_workspace_bytes(p, half_precision=True, device=H200_WGMMA)
  # xt: C N H rows of 64 + 16 * 4 - 8 = 120 columns; yt after it: rows of 64 columns.
  assert want == 256 * 128 * 64 * (120 + 64) * 2
  launch = lambda **kw: _native.plan_fwd_launch(p, half_precision=True, device=H200_WGMMA, **kw)
  got = launch(workspace_bytes=want)
  assert (got["kernel"], got["rows_per_mma"], got["workspace_bytes"]) == ("wgmma", 16, want)
  assert got["grid"] == (16, 256, 1) and got["block"] == (128, 1, 1) and got["smem_bytes"] <= H100["smem_per_block"]
  assert launch(workspace_bytes=want - 1)["kernel"] == launch()["kernel"] == "mma"
  assert launch(workspace_bytes=want, prologue=True)["kernel"] == "mma"
  assert launch(workspace_bytes=want, epilogue=True)["kernel"] == "wgmma"
  # The lowering asks for none where the plan does not pick it.
  assert _native.fwd_workspace_bytes(p, half_precision=True, prologue=True, device=H200_WGMMA) == 0
  assert _native.fwd_workspace_bytes(p, half_precision=True, device=H100) == 0
  assert _native.fwd_workspace_bytes(p, half_precision=False, device=H200_WGMMA) == 0
  assert _native.bwd_data_workspace_bytes(p, half_precision=True, device=H200_WGMMA) == want
  bwd = _native.plan_bwd_data_launch(p, half_precision=True, device=H200_WGMMA, workspace_bytes=want)
  assert bwd["kernel"] == "forward:wgmma"
  strided = dict(p, stride_h=2, stride_w=2, out_h=32, out_w=32)
  assert _native.bwd_data_workspace_bytes(strided, half_precision=True, device=H200_WGMMA) == 0


def test_hopper_forward_index_model():
  """The Hopper kernel's index mapping, B bricks, staging ring, fragments and both
  transposes, replayed on the CPU against a direct convolution
  (benchmarks/cuda/wgmma_fwd_model.py), with the padding, rectangular filters and
  rotated filter the library gives it."""
  import importlib.util
  import os

  path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "cuda", "wgmma_fwd_model.py")
  spec = importlib.util.spec_from_file_location("wgmma_fwd_model", path)
  model = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(model)
  assert model.check_all()
