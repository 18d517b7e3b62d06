// Direct CUDA kernels: one thread per output position and channel group (forward,
// backward-data) or one block per (filter tap, 32 channels) (backward-filter). They
// handle every stride, padding and dilation; the tiled kernels take over the shapes
// they implement faster. The forward and input-gradient ones are the fast path for
// dilated filters and for the strided input gradient, where the only reuse is
// through L1 and a gather moves little more than the bytes that must move.
#pragma once

#include <cstdint>

#include "common/cuda_types.cuh"
#include "dwconv/epilogue.h"
#include "dwconv/params.h"

namespace flashdwc {

// The direct kernels walk a grid of (row, column) positions: blockIdx.y strides over
// the N * rows image rows, x over the row's (column, channel group) slots, so that a
// thread finds its image row with one division and its column with one 32-bit one.
// A thread owns kWidth consecutive channels of one position: kWidth = Vec16<T>::kWidth
// (16-byte loads and stores) where C is a multiple of it and the buffers are aligned,
// else 1. With one scalar channel a thread, as first written, the bf16 stride-2 input
// gradient of MobileNetV2's 112x112x96 layer took 8x XLA's time on the H200
// (docs/performance.md, real-model layers).
inline constexpr int kDirectThreadsPerBlock = 128;

template <typename T, int kWidth>
struct DirectChannels {
  __device__ __forceinline__ static void load(const T* p, float (&v)[kWidth]) {
    if constexpr (kWidth == 1) {
      v[0] = to_float(__ldg(p));
    } else {
      Vec16<T>::load(p, v);
    }
  }
  __device__ __forceinline__ static void store(T* p, const float (&v)[kWidth]) {
    if constexpr (kWidth == 1) {
      *p = from_float<T>(v[0]);
    } else {
      Vec16<T>::store(p, v);
    }
  }
};

// Taps [lo, hi) of a filter axis whose input index origin + tap * dilation lies in
// [0, size): no test inside the tap loops.
__device__ __forceinline__ void valid_taps(int64_t origin, int64_t dilation, int64_t taps, int64_t size,
                                           int& lo, int& hi) {
  const int64_t first = origin >= 0 ? 0 : (-origin + dilation - 1) / dilation;
  const int64_t past = size - origin <= 0 ? 0 : (size - origin + dilation - 1) / dilation;
  lo = int(first);
  hi = int(past < taps ? past : taps);
}

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

// The taps of one filter axis that reach input index i of a strided convolution:
// those with (i + pad - tap * dilation) a multiple of the stride, out / stride in
// [0, out_size). They form the progression first, first + step, ... with step =
// stride / gcd(stride, dilation) (`step` from the host); `out_first` is the output
// index of the first, and each later tap's is `out_step` lower.
struct StridedTaps {
  int first;  // kernel size or more: none
  int64_t out_first;
};

__device__ __forceinline__ StridedTaps strided_taps(int64_t i, int64_t pad, int64_t stride, int64_t dilation,
                                                   int step, int64_t taps) {
  const int64_t t = i + pad;
  for (int k = 0; k < step && k < taps; ++k) {
    const int64_t r = t - k * dilation;
    const int64_t m = r % stride;
    if (m == 0) return {k, r / stride};
  }
  return {int(taps), 0};
}

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
