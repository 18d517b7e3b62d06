// Filter-gradient direct kernel: one block per (filter tap, 32 channels), reducing
// over every output position in a fixed order. The fallback for what the split kernel
// does not take (stride_w above 2, dilation_w above 1); deterministic in both modes.
#pragma once

#include <cstdint>

#include "common/cuda_types.cuh"
#include "common/params.h"

namespace flashdwc {

// Backward-filter: block (kChannels, kRows) owns one filter tap (blockIdx.x) and
// kChannels channels (blockIdx.y); its rows stride over the N*Ho*Wo positions and
// reduce through shared memory in a fixed order, so the result is deterministic.
constexpr int kBwdFilterChannels = 32;
constexpr int kBwdFilterRows = 8;

template <typename T>
__global__ void __launch_bounds__(kBwdFilterChannels * kBwdFilterRows)
dwconv_bwd_filter_direct_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                T* __restrict__ dw, DwConvParams p) {
  __shared__ float partial[kBwdFilterRows][kBwdFilterChannels];
  const int64_t kh = blockIdx.x / p.kernel_w;
  const int64_t kw = blockIdx.x % p.kernel_w;
  const int64_t c = int64_t(blockIdx.y) * kBwdFilterChannels + threadIdx.x;
  const int64_t positions = p.batch * p.out_h * p.out_w;
  float acc = 0.0f;
  if (c < p.channels) {
    for (int64_t pos = threadIdx.y; pos < positions; pos += kBwdFilterRows) {
      const int64_t ow = pos % p.out_w;
      const int64_t r = pos / p.out_w;
      const int64_t oh = r % p.out_h;
      const int64_t n = r / p.out_h;
      const int64_t ih = oh * p.stride_h - p.pad_top + kh * p.dilation_h;
      const int64_t iw = ow * p.stride_w - p.pad_left + kw * p.dilation_w;
      if (ih < 0 || ih >= p.in_h || iw < 0 || iw >= p.in_w) continue;
      acc += to_float(x[((n * p.in_h + ih) * p.in_w + iw) * p.channels + c]) *
             to_float(dy[pos * p.channels + c]);
    }
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < p.channels) {
    float sum = 0.0f;
#pragma unroll
    for (int r = 0; r < kBwdFilterRows; ++r) sum += partial[r][threadIdx.x];
    dw[blockIdx.x * p.channels + c] = from_float<T>(sum);
  }
}

}  // namespace flashdwc
