"""The CUDA dispatcher sends each test shape to the kernel we expect, so that the
numerical tests exercise the row-stream kernel, the tiled GEMV kernel and the
direct fallback."""

import pytest

from jax_flashdwc import _ffi
from numerics import pair
from shapes import TEST_CASES


def expected_forward_kernel(case):
  sh, sw = pair(case.strides)
  dh, dw = pair(case.dilation)
  if (sh, sw, dh, dw) == (1, 1, 1, 1) and case.kw in (3, 5, 7) and case.kh <= 9 and case.c % 4 == 0:
    return "rowstream"
  return "gemv" if sw in (1, 2) and dw == 1 and case.kw <= 512 else "direct"


def _skip_without_gpu():
  import jax

  try:
    has_gpu = bool(jax.devices("gpu"))
  except RuntimeError:
    has_gpu = False
  if not has_gpu:
    pytest.skip("the tensor-core kernels check the device's shared memory; no GPU present")


def _pick(native, case, half_precision=False):
  sh, sw = pair(case.strides)
  dh, dw = pair(case.dilation)
  return native.cuda_forward_kernel(channels=case.c, out_w=case.w, kernel_w=case.kw, stride_w=sw, dilation_w=dw,
                                    half_precision=half_precision, kernel_h=case.kh, stride_h=sh, dilation_h=dh)


@pytest.mark.skipif(not _ffi.cuda_available(), reason="built without CUDA")
def test_forward_dispatch_covers_every_kernel():
  native = _ffi._jax_flashdwc
  chosen = {}
  for case in TEST_CASES:
    kernel = _pick(native, case)
    assert kernel == expected_forward_kernel(case), case.name
    chosen.setdefault(kernel, []).append(case.name)
  assert (len(chosen.get("rowstream", [])) >= 5 and len(chosen.get("gemv", [])) >= 10
          and len(chosen.get("direct", [])) >= 3), chosen


@pytest.mark.skipif(not _ffi.cuda_available(), reason="built without CUDA")
def test_forward_dispatch_limits():
  native = _ffi._jax_flashdwc
  assert native.cuda_forward_kernel(channels=64, out_w=64, kernel_w=512, stride_w=1, dilation_w=1) == "gemv"
  assert native.cuda_forward_kernel(channels=64, out_w=64, kernel_w=513, stride_w=1, dilation_w=1) == "direct"
  assert native.cuda_forward_kernel(channels=64, out_w=64, kernel_w=7, stride_w=3, dilation_w=1) == "direct"
  assert native.cuda_forward_kernel(channels=64, out_w=64, kernel_w=7, stride_w=1, dilation_w=2) == "direct"


@pytest.mark.skipif(not _ffi.cuda_available(), reason="built without CUDA")
def test_half_precision_forward_goes_to_tensor_cores_from_k6():
  _skip_without_gpu()
  native = _ffi._jax_flashdwc
  pick = lambda kw, sw=1, half=True, c=96, w=64: native.cuda_forward_kernel(
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
  assert pick(3, sw=2) == pick(7, sw=2) == "gemv"
  assert pick(31, half=False) == "gemv"


@pytest.mark.skipif(not _ffi.cuda_available(), reason="built without CUDA")
def test_half_precision_3x3_and_5x5_go_to_the_register_filter_kernel():
  _skip_without_gpu()
  native = _ffi._jax_flashdwc
  pick = lambda w, k=5, c=256, kh=None, sw=1, half=True: native.cuda_forward_kernel(
      channels=c, out_w=w, kernel_w=k, stride_w=sw, dilation_w=1, half_precision=half,
      kernel_h=k if kh is None else kh)
  assert pick(64) == pick(32) == pick(48, c=64) == pick(65) == pick(128, c=128) == pick(7, c=768) == "regfilter"
  assert pick(32, k=3) == pick(128, k=3, c=128) == pick(1, k=3, c=64) == pick(14, k=3, c=384) == "regfilter"
  # fp32 and other filter shapes keep the row-stream kernel; partial 64-channel blocks
  # at 5x5 the tensor-core one.
  assert pick(64, half=False) == pick(16, k=3, half=False) == "rowstream"
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
  native = _ffi._jax_flashdwc
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
  return native.cuda_bwd_filter_kernel(channels=case.c, in_h=case.h, in_w=case.w, out_w=out_w, kernel_h=case.kh,
                                       kernel_w=case.kw, stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw,
                                       half_precision=half_precision, deterministic=deterministic)


@pytest.mark.skipif(not _ffi.cuda_available(), reason="built without CUDA")
def test_filter_gradient_dispatch_covers_every_kernel():
  _skip_without_gpu()
  native = _ffi._jax_flashdwc
  chosen, chosen_fp32 = {}, set()
  for case in TEST_CASES:
    sh, sw = pair(case.strides)
    dh, dw = pair(case.dilation)
    unit = (sh, sw, dh, dw) == (1, 1, 1, 1)
    out_w = (case.w - 1) // sw + 1  # as _bwd_filter_pick passes it
    # and whole channel blocks, 64 in fp16/bf16 and 32 in fp32
    rowstream = unit and case.kw in (3, 5, 7) and case.kh <= 7 and out_w >= 32
    if sw > 2 or dw > 1:
      expected = "direct"
    elif unit and (9 <= case.kw <= 64 or (case.kw == 7 and out_w >= 14)):
      expected = "mma"  # where it beat the CUDA-core kernels on the H200 (bwd_filter_cuda.cu)
    elif rowstream and case.c % 64 == 0:
      expected = "rowstream"
    else:
      expected = "split"
    assert _bwd_filter_pick(native, case, half_precision=True) == expected, case.name
    # fp32 never takes tensor cores; its row-stream copies are 4 channels wide, and from
    # 27 taps across at stride 1 it runs the forward loop over dy (bwd_filter_gemv.cuh).
    if unit and case.kw >= 27:
      expected_fp32 = "gemv"
    elif rowstream and case.c % 32 == 0:
      expected_fp32 = "rowstream"
    else:
      expected_fp32 = "split" if expected != "direct" else "direct"
    assert _bwd_filter_pick(native, case, half_precision=False) == expected_fp32, case.name
    chosen_fp32.add(expected_fp32)
    # Deterministic mode has no row-stream kernel (its merge is atomic).
    for half in (True, False):
      picked = _bwd_filter_pick(native, case, half_precision=half, deterministic=True)
      assert picked != "rowstream" and (picked == "split") == (_bwd_filter_pick(native, case, half) in
                                                                ("split", "rowstream")), case.name
    chosen.setdefault(expected, []).append(case.name)
  # (4 row-stream cases in fp16/bf16 since k = 7 went to tensor cores; fp32 adds the k = 7 ones)
  assert (len(chosen["mma"]) >= 6 and len(chosen["split"]) >= 5 and len(chosen["direct"]) >= 3
          and len(chosen["rowstream"]) >= 4), chosen
  assert chosen_fp32 == {"gemv", "rowstream", "split", "direct"}, chosen_fp32


@pytest.mark.skipif(not _ffi.cuda_available(), reason="built without CUDA")
def test_filter_gradient_tensor_core_bounds():
  _skip_without_gpu()
  native = _ffi._jax_flashdwc

  def pick(kw, w, half_precision=True):
    return native.cuda_bwd_filter_kernel(channels=256, in_h=64, in_w=w, out_w=w, kernel_h=kw, kernel_w=kw,
                                         stride_h=1, stride_w=1, dilation_h=1, dilation_w=1,
                                         half_precision=half_precision)

  assert pick(9, 64) == "mma" and pick(9, 32) == "mma" and pick(9, 8) == "mma"  # from 9 taps, any map
  assert pick(13, 32) == "mma" and pick(13, 8) == "mma"
  assert pick(7, 128) == "mma" and pick(7, 14) == "mma" and pick(7, 13) != "mma"  # k = 7 from 14 columns
  convnext = [native.cuda_bwd_filter_kernel(channels=c, in_h=w, in_w=w, out_w=w, kernel_h=7, kernel_w=7, stride_h=1,
                                            stride_w=1, dilation_h=1, dilation_w=1, half_precision=True)
              for w, c in ((56, 96), (28, 192), (14, 384), (7, 768))]
  assert convnext == ["mma", "mma", "mma", "split"]  # ConvNeXt-T's four stages
  assert pick(5, 128) == "rowstream" and pick(3, 128) == "rowstream"
  assert pick(7, 128, half_precision=False) == "rowstream"
  assert pick(27, 128, half_precision=False) == "gemv" and pick(21, 128, half_precision=False) == "split"


@pytest.mark.skipif(not _ffi.cuda_available(), reason="built without CUDA")
def test_filter_gradient_rowstream_takes_only_the_shapes_it_was_timed_faster_on():
  native = _ffi._jax_flashdwc

  def pick(k, w, c, half_precision=True, kh=None):
    return native.cuda_bwd_filter_kernel(channels=c, in_h=w, in_w=w, out_w=w, kernel_h=kh or k, kernel_w=k,
                                         stride_h=1, stride_w=1, dilation_h=1, dilation_w=1,
                                         half_precision=half_precision)

  # The paper's maps: faster than the split kernel in both precisions.
  assert pick(3, 64, 256) == pick(5, 32, 1024) == pick(5, 128, 128, half_precision=False) == "rowstream"
  assert pick(7, 32, 1024, half_precision=False) == "rowstream"  # fp16/bf16 k = 7 goes to tensor cores
  # ConvNeXt-T's last stage (7 wide; the three before take tensor cores in fp16/bf16,
  # test_filter_gradient_tensor_core_bounds).
  assert pick(7, 7, 768) == "split"
  assert pick(7, 56, 96, half_precision=False) == "rowstream"  # 3 whole 32-channel blocks
  assert pick(3, 32, 128) == "rowstream" and pick(3, 31, 128) == "split"
  assert pick(3, 64, 256, kh=7) == "rowstream" and pick(3, 64, 256, kh=8) == "split"


@pytest.mark.skipif(not _ffi.cuda_available(), reason="built without CUDA")
def test_filter_gradient_tiling():
  tiling = _ffi._jax_flashdwc.cuda_bwd_filter_tiling
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
  assert tiling(51, half_precision=False) == (1, 13, 1)  # 52 against 56; one row (bwd_filter_cuda.cu)
  assert tiling(21, half_precision=False) == (4, 7, 1)  # 21 against 22
  assert tiling(31, half_precision=False) == (4, 8, 1)  # 32 either way
  # Several rows only where the padding rows are at most an eighth of the filter's height.
  assert tiling(9, half_precision=False, kernel_h=1) == (1, 9, 1)
  assert tiling(9, half_precision=False, kernel_h=7) == (1, 9, 1)  # 9 rows for 7
  assert tiling(9, half_precision=False, kernel_h=8) == (1, 9, 3)  # 9 rows for 8
  assert tiling(13, half_precision=False, kernel_h=5) == (1, 13, 1)  # 6 rows for 5
