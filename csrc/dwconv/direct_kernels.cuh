// Direct CUDA kernels: one thread per output element (forward, backward-data) or
// one block per (filter tap, 32 channels) (backward-filter). They are the
// reference-quality path that handles every stride, padding and dilation; the
// tiled kernels take over the shapes they can implement.
#pragma once

#include <cstdint>

#include "common/cuda_types.cuh"
#include "dwconv/epilogue.h"
#include "dwconv/params.h"

namespace flashdwc {

template <typename T>
__global__ void dwconv_fwd_direct_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                         T* __restrict__ y, DwConvParams p, FwdEpilogue epilogue,
                                         FwdPrologue prologue) {
  const int64_t total = p.batch * p.out_h * p.out_w * p.channels;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = idx % p.channels;
    int64_t r = idx / p.channels;
    const int64_t ow = r % p.out_w;
    r /= p.out_w;
    const int64_t oh = r % p.out_h;
    const int64_t n = r / p.out_h;
    float acc = 0.0f;
    for (int64_t kh = 0; kh < p.kernel_h; ++kh) {
      const int64_t ih = oh * p.stride_h - p.pad_top + kh * p.dilation_h;
      if (ih < 0 || ih >= p.in_h) continue;
      for (int64_t kw = 0; kw < p.kernel_w; ++kw) {
        const int64_t iw = ow * p.stride_w - p.pad_left + kw * p.dilation_w;
        if (iw < 0 || iw >= p.in_w) continue;
        float xv = to_float(x[((n * p.in_h + ih) * p.in_w + iw) * p.channels + c]);
        if (prologue.active()) xv = prologue.apply(c, xv);
        acc += xv * to_float(w[filter_tap(p, kh, kw) * p.channels + c]);
      }
    }
    if (epilogue.active()) {
      const float bias = epilogue.bias != nullptr ? to_float(static_cast<const T*>(epilogue.bias)[c]) : 0.0f;
      acc = apply_activation(epilogue.activation, acc + bias);
    }
    y[idx] = from_float<T>(acc);
  }
}

// Backward-data for any stride: each dx element gathers the dy elements whose
// receptive field covers it.
template <typename T>
__global__ void dwconv_bwd_data_direct_kernel(const T* __restrict__ dy, const T* __restrict__ w,
                                              T* __restrict__ dx, DwConvParams p) {
  const int64_t total = p.batch * p.in_h * p.in_w * p.channels;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = idx % p.channels;
    int64_t r = idx / p.channels;
    const int64_t iw = r % p.in_w;
    r /= p.in_w;
    const int64_t ih = r % p.in_h;
    const int64_t n = r / p.in_h;
    float acc = 0.0f;
    for (int64_t kh = 0; kh < p.kernel_h; ++kh) {
      const int64_t th = ih + p.pad_top - kh * p.dilation_h;
      if (th < 0 || th % p.stride_h != 0 || th / p.stride_h >= p.out_h) continue;
      const int64_t oh = th / p.stride_h;
      for (int64_t kw = 0; kw < p.kernel_w; ++kw) {
        const int64_t tw = iw + p.pad_left - kw * p.dilation_w;
        if (tw < 0 || tw % p.stride_w != 0 || tw / p.stride_w >= p.out_w) continue;
        const int64_t ow = tw / p.stride_w;
        acc += to_float(dy[((n * p.out_h + oh) * p.out_w + ow) * p.channels + c]) *
               to_float(w[filter_tap(p, kh, kw) * p.channels + c]);
      }
    }
    dx[idx] = from_float<T>(acc);
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
