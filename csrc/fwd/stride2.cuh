// Stride-2 forward for square 3x3 and 5x5 filters (dilation 1, any padding, any H and
// W), as a row walk: a thread owns one output column of one channel group, keeps all
// K*K of its channels' filter taps in registers, and walks down a run of output rows
// with the current K x K input window in registers (fwd/stride2_index.h). Each step
// computes one output from the window; as soon as the window's two top rows are used
// their slots are reloaded with the next step's two new rows, so those loads are in
// flight during the rest of the step's FMAs, its store and the next step's first
// rows.
//
// Why it wins over the GEMV kernel (fwd/gemv.cuh), which runs these problems
// otherwise: the bytes that must move are x read once and y written once
// (MobileNetV2's 64x112x112x96 3x3 layer in bf16: 154 MB + 38.5 MB = 193 MB, 58 us
// at 3.35 TB/s). The GEMV kernel took 0.158 ms there on an H100 (XLA 0.102): it
// re-stages the filter through shared memory per block and reloads every input row
// for each of the K output rows that read it. Here the filter is loaded once a
// thread and each input row once a run (2R + K - 2 rows for a run of R output rows),
// as the stride-2 input gradient (bwd_data/phase.cuh), measured at 0.093 ms on the
// same layer's shape. Measured: 0.108 ms there (XLA 0.114 in that run), 1.01-1.15x
// XLA on the registry's 3x3 stride-2 layers; 5x5 0.86x (docs/performance.md).
//
// Loaded rows and the filter stay packed as loaded (RawVec): at fp16/bf16 that is
// half the registers of fp32, which is what lets a 5x5 window and filter fit; each
// vector is unpacked to fp32 where an FMA uses it and the sums are fp32.
//
// Padding: a window column outside the image has its filter taps zeroed at the start
// (and its loads are zeros), so it adds 0 * 0; a row outside the image is skipped,
// so a non-finite filter tap never meets padding.
#pragma once

#include <cstdint>

#include "common/epilogue.h"
#include "common/params.h"
#include "common/raw_vec.cuh"
#include "common/static_for.cuh"
#include "fwd/stride2_index.h"

namespace flashdwc {

// One block of threads over an image's slots (channel group fastest, then the output
// column, then the run of output rows), blockIdx.y over images. The launcher
// (plan/fwd_launch.cc) guarantees: stride 2, dilation 1, a K x K filter, C a multiple of
// kWidth, buffers (and the bias) aligned to kWidth elements, g.slots and every row
// and column index within int.
template <typename T, int kK, int kWidth, bool kEpilogue, int kMinBlocks>
__global__ void __launch_bounds__(kFwdStride2Threads, kMinBlocks)
dwconv_fwd_stride2_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, DwConvParams p,
                          FwdStride2Grid g, FwdEpilogue epilogue) {
  using V = RawVec<T, kWidth>;
  using Raw = typename V::Raw;
  const int slot = int(blockIdx.x) * kFwdStride2Threads + int(threadIdx.x);
  if (slot >= int(g.slots)) return;
  const int groups = int(g.groups), out_w = int(p.out_w);
  const int rest = slot / groups;
  const int group = slot - rest * groups;
  const int run = rest / out_w;
  const int ow = rest - run * out_w;
  const int o_begin = run * int(g.rows_per_thread);
  const int o_end = min(o_begin + int(g.rows_per_thread), int(p.out_h));
  const int64_t C = p.channels;
  const int64_t c = int64_t(group) * kWidth;
  const int in_h = int(p.in_h), in_w = int(p.in_w);
  const int pad_top = int(p.pad_top);

  // Window column j is input column iw0 + j.
  const int iw0 = 2 * ow - int(p.pad_left);
  bool col_in[kK];
#pragma unroll
  for (int j = 0; j < kK; ++j) col_in[j] = iw0 + j >= 0 && iw0 + j < in_w;
  // The filter, tap (kh, kw) of this thread's channels as loaded; zero in the columns
  // outside the image.
  Raw wr[kK][kK];
#pragma unroll
  for (int kh = 0; kh < kK; ++kh) {
#pragma unroll
    for (int kw = 0; kw < kK; ++kw) {
      const int tap = p.flip_filter ? (kK - 1 - kh) * kK + (kK - 1 - kw) : kh * kK + kw;
      wr[kh][kw] = col_in[kw] ? V::load(w + tap * C + c) : Raw{};
    }
  }

  for (int64_t n = blockIdx.y; n < p.batch; n += gridDim.y) {
    const T* x_image = x + n * p.in_h * p.in_w * C + c;
    T* y_image = y + n * p.out_h * p.out_w * C + c;
    // Input row ih_first + t: the run's row t. Zeros outside the image.
    const int ih_first = 2 * o_begin - pad_top;
    auto load_row = [&](int t, Raw (&raw)[kK]) {
      const int ih = ih_first + t;
      const bool row_in = ih >= 0 && ih < in_h;
      const int64_t row = (int64_t(row_in ? ih : 0) * in_w + iw0) * C;
#pragma unroll
      for (int j = 0; j < kK; ++j) raw[j] = row_in && col_in[j] ? V::load(x_image + row + j * C) : Raw{};
    };
    // win[t % kK]: the run's row t.
    Raw win[kK][kK];
#pragma unroll
    for (int t = 0; t < kK; ++t) load_row(t, win[t]);
    for (int o0 = o_begin; o0 < o_end; o0 += kK) {
      // Unrolled by kK steps, so that slots are constants: step u reads rows 2i + k,
      // i = o0 - o_begin + u (o0 - o_begin a multiple of kK), from slot (2u + k) % kK.
      static_for<0, kK>([&](auto u) {
        constexpr int kU = decltype(u)::value;
        const int o = o0 + kU;
        if (o < o_end) {
          const int ih0 = 2 * o - pad_top;
          const int i2 = 2 * (o - o_begin);
          float acc[kWidth] = {};
          auto row_fma = [&](auto k) {
            constexpr int kRow = decltype(k)::value;
            constexpr int kSlot = (2 * kU + kRow) % kK;
            if (ih0 + kRow < 0 || ih0 + kRow >= in_h) return;
#pragma unroll
            for (int j = 0; j < kK; ++j) {
              float xv[kWidth], wv[kWidth];
              V::unpack(win[kSlot][j], xv);
              opaque(wr[kRow][j]);
              V::unpack(wr[kRow][j], wv);
#pragma unroll
              for (int i = 0; i < kWidth; ++i) acc[i] = fmaf(xv[i], wv[i], acc[i]);
            }
          };
          static_for<0, 2>(row_fma);
          // Rows 2i and 2i + 1 are used: their slots take the next step's new rows.
          if (o + 1 < o_end) {
            load_row(i2 + kK, win[(2 * kU) % kK]);
            load_row(i2 + kK + 1, win[(2 * kU + 1) % kK]);
          }
          static_for<2, kK>(row_fma);
          if constexpr (kEpilogue) {
            float bias[kWidth] = {};
            if (epilogue.bias != nullptr) V::unpack(V::load(static_cast<const T*>(epilogue.bias) + c), bias);
#pragma unroll
            for (int i = 0; i < kWidth; ++i) acc[i] = apply_activation(epilogue.activation, acc[i] + bias[i]);
          }
          V::store(y_image + (int64_t(o) * out_w + ow) * C, acc);
        }
      });
    }
  }
}

}  // namespace flashdwc
