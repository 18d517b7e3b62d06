// The direct convolution's index math, on the host and the device: which filter taps
// of a position land inside the other tensor. The CUDA direct kernels
// (fwd/direct.cuh, bwd_data/direct.cuh) and the CPU loops (cpu/dwconv_cpu.cc) walk
// the taps these return, so both visit the same taps in the same order.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashdwc {

// Taps [lo, hi) of a filter axis whose input index origin + tap * dilation lies in
// [0, size): no test inside the tap loops.
FLASHDWC_HOST_DEVICE FLASHDWC_FORCEINLINE void valid_taps(int64_t origin, int64_t dilation, int64_t taps,
                                                          int64_t size, int& lo, int& hi) {
  const int64_t first = origin >= 0 ? 0 : (-origin + dilation - 1) / dilation;
  const int64_t past = size - origin <= 0 ? 0 : (size - origin + dilation - 1) / dilation;
  lo = int(first);
  hi = int(past < taps ? past : taps);
}

// The step between the taps of one filter axis that reach one input index of a
// strided convolution: stride / gcd(stride, dilation).
inline int strided_tap_step(int64_t stride, int64_t dilation) {
  int64_t a = stride, b = dilation;
  while (b != 0) {
    const int64_t r = a % b;
    a = b;
    b = r;
  }
  return int(stride / a);
}

// The taps of one filter axis that reach input index i of a strided convolution:
// those with (i + pad - tap * dilation) a multiple of the stride, out / stride in
// [0, out_size). They form the progression first, first + step, ... with step =
// strided_tap_step(stride, dilation); `out_first` is the output index of the first,
// and each later tap's is step * dilation / stride lower.
struct StridedTaps {
  int first;  // kernel size or more: none
  int64_t out_first;
};

FLASHDWC_HOST_DEVICE FLASHDWC_FORCEINLINE StridedTaps strided_taps(int64_t i, int64_t pad, int64_t stride,
                                                                   int64_t dilation, int step, int64_t taps) {
  const int64_t t = i + pad;
  for (int k = 0; k < step && k < taps; ++k) {
    const int64_t r = t - k * dilation;
    const int64_t m = r % stride;
    if (m == 0) return {k, r / stride};
  }
  return {int(taps), 0};
}

}  // namespace flashdwc
