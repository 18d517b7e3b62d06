// Forward direct kernel: one thread per output position and channel group, for any
// stride, padding and dilation. The fallback for what the tiled kernels do not take,
// and the fast path for dilated filters where the only reuse is through L1.
#pragma once

#include <cstdint>

#include "common/direct_conv.cuh"
#include "common/epilogue.h"

namespace flashdwc {

template <typename T, int kWidth>
__global__ void __launch_bounds__(kDirectThreadsPerBlock)
dwconv_fwd_direct_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, DwConvParams p,
                         FwdEpilogue epilogue, FwdPrologue prologue) {
  const int groups = int(p.channels / kWidth);
  const int slots = int(p.out_w) * groups;
  for (int64_t row = blockIdx.y; row < p.batch * p.out_h; row += gridDim.y) {
    const int64_t n = row / p.out_h;
    const int64_t oh = row - n * p.out_h;
    const int64_t ih0 = oh * p.stride_h - p.pad_top;
    int kh_lo, kh_hi;
    valid_taps(ih0, p.dilation_h, p.kernel_h, p.in_h, kh_lo, kh_hi);
    const T* x_image = x + n * p.in_h * p.in_w * p.channels;
    for (int slot = blockIdx.x * blockDim.x + threadIdx.x; slot < slots; slot += gridDim.x * blockDim.x) {
      const int ow = slot / groups;
      const int64_t c = int64_t(slot - ow * groups) * kWidth;
      const int64_t iw0 = ow * p.stride_w - p.pad_left;
      int kw_lo, kw_hi;
      valid_taps(iw0, p.dilation_w, p.kernel_w, p.in_w, kw_lo, kw_hi);
      float acc[kWidth] = {};
      for (int kh = kh_lo; kh < kh_hi; ++kh) {
        const T* x_row = x_image + ((ih0 + kh * p.dilation_h) * p.in_w + iw0) * p.channels + c;
        for (int kw = kw_lo; kw < kw_hi; ++kw) {
          float xv[kWidth], wv[kWidth];
          DirectChannels<T, kWidth>::load(x_row + kw * p.dilation_w * p.channels, xv);
          DirectChannels<T, kWidth>::load(w + filter_tap(p, kh, kw) * p.channels + c, wv);
#pragma unroll
          for (int i = 0; i < kWidth; ++i) {
            const float v = prologue.active() ? prologue.apply(c + i, xv[i]) : xv[i];
            acc[i] = fmaf(v, wv[i], acc[i]);
          }
        }
      }
      if (epilogue.active()) {
#pragma unroll
        for (int i = 0; i < kWidth; ++i) {
          const float bias = epilogue.bias != nullptr ? to_float(static_cast<const T*>(epilogue.bias)[c + i]) : 0.0f;
          acc[i] = apply_activation(epilogue.activation, acc[i] + bias);
        }
      }
      DirectChannels<T, kWidth>::store(y + ((row * p.out_w) + ow) * p.channels + c, acc);
    }
  }
}

}  // namespace flashdwc
