// Input-gradient gather kernel: each dx position gathers the dy positions whose
// receptive field covers it, only the taps of its stride phase. It runs every strided
// input gradient (stride 1 runs the forward kernels on the rotated filter): a gather
// moves little more than the bytes that must move, and the only reuse is through L1.
#pragma once

#include <cstdint>

#include "common/direct_conv.cuh"

namespace flashdwc {

// Backward-data for any stride: each dx position gathers the dy positions whose
// receptive field covers it, only the taps of its stride phase.
template <typename T, int kWidth>
__global__ void __launch_bounds__(kDirectThreadsPerBlock)
dwconv_bwd_data_direct_kernel(const T* __restrict__ dy, const T* __restrict__ w, T* __restrict__ dx,
                              DwConvParams p, int step_h, int step_w) {
  const int groups = int(p.channels / kWidth);
  const int slots = int(p.in_w) * groups;
  const int64_t out_step_h = step_h * p.dilation_h / p.stride_h;
  const int64_t out_step_w = step_w * p.dilation_w / p.stride_w;
  for (int64_t row = blockIdx.y; row < p.batch * p.in_h; row += gridDim.y) {
    const int64_t n = row / p.in_h;
    const int64_t ih = row - n * p.in_h;
    const StridedTaps th = strided_taps(ih, p.pad_top, p.stride_h, p.dilation_h, step_h, p.kernel_h);
    const T* dy_image = dy + n * p.out_h * p.out_w * p.channels;
    for (int slot = blockIdx.x * blockDim.x + threadIdx.x; slot < slots; slot += gridDim.x * blockDim.x) {
      const int iw = slot / groups;
      const int64_t c = int64_t(slot - iw * groups) * kWidth;
      const StridedTaps tw = strided_taps(iw, p.pad_left, p.stride_w, p.dilation_w, step_w, p.kernel_w);
      float acc[kWidth] = {};
      int64_t oh = th.out_first;
      for (int kh = th.first; kh < p.kernel_h; kh += step_h, oh -= out_step_h) {
        if (oh < 0) break;
        if (oh >= p.out_h) continue;
        const T* dy_row = dy_image + oh * p.out_w * p.channels + c;
        int64_t ow = tw.out_first;
        for (int kw = tw.first; kw < p.kernel_w; kw += step_w, ow -= out_step_w) {
          if (ow < 0) break;
          if (ow >= p.out_w) continue;
          float gv[kWidth], wv[kWidth];
          DirectChannels<T, kWidth>::load(dy_row + ow * p.channels, gv);
          DirectChannels<T, kWidth>::load(w + filter_tap(p, kh, kw) * p.channels + c, wv);
#pragma unroll
          for (int i = 0; i < kWidth; ++i) acc[i] = fmaf(gv[i], wv[i], acc[i]);
        }
      }
      DirectChannels<T, kWidth>::store(dx + (row * p.in_w + iw) * p.channels + c, acc);
    }
  }
}

}  // namespace flashdwc
