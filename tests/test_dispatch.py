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


def _pick(native, case):
  sh, sw = pair(case.strides)
  dh, dw = pair(case.dilation)
  return native.cuda_forward_kernel(channels=case.c, out_w=case.w, kernel_w=case.kw, stride_w=sw, dilation_w=dw,
                                    kernel_h=case.kh, stride_h=sh, dilation_h=dh)


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
def test_half_precision_forward_goes_to_tensor_cores_from_k7():
  import jax

  try:
    has_gpu = bool(jax.devices("gpu"))
  except RuntimeError:
    has_gpu = False
  if not has_gpu:
    pytest.skip("the tensor-core kernel checks the device's shared memory; no GPU present")
  native = _ffi._jax_flashdwc
  pick = lambda kw, sw=1, half=True: native.cuda_forward_kernel(channels=64, out_w=64, kernel_w=kw, stride_w=sw,
                                                               dilation_w=1, half_precision=half)
  assert pick(7) == pick(31) == pick(63) == "mma"
  assert pick(3) == pick(5) == pick(7, half=False) == "rowstream"
  assert pick(3, sw=2) == pick(7, sw=2) == "gemv"
  assert pick(31, half=False) == "gemv"
