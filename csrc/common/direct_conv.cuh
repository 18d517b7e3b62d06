// What the direct CUDA kernels of the three passes share: the channel group a
// thread owns, the grid (common/direct_grid.h), and (common/direct_index.h, shared
// with the CPU loops) the range of filter taps that land inside the input. The direct
// kernels handle every stride, padding and dilation; the tiled kernels take over the
// shapes they implement faster.
#pragma once

#include <cstdint>

#include "common/cuda_types.cuh"
#include "common/direct_grid.h"
#include "common/direct_index.h"
#include "common/launch.cuh"
#include "common/params.h"

namespace flashdwc {

// The direct kernels walk a grid of (row, column) positions: blockIdx.y strides over
// the N * rows image rows, x over the row's (column, channel group) slots, so that a
// thread finds its image row with one division and its column with one 32-bit one.
// A thread owns kWidth consecutive channels of one position: kWidth = Vec16<T>::kWidth
// (16-byte loads and stores) where C is a multiple of it and the buffers are aligned,
// else 1. With one scalar channel a thread, as first written, the bf16 stride-2 input
// gradient of MobileNetV2's 112x112x96 layer took 8x XLA's time on the H200
// (docs/performance.md, real-model layers).

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

}  // namespace flashdwc
