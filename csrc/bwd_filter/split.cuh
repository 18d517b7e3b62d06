// Flash-DWC backward-filter kernel on CUDA cores (paper section 5.1):
//   dw[kh, kw, c] = sum over (n, oh, ow) of dy[n, oh, ow, c] * x[n, ih, iw, c].
// The accumulation axis is long (N * Ho * Wo) and the output small, so the N * Ho
// output rows are split into Z chunks (grid.z) to fill the GPU. Each block sums its
// chunk in fp32 and merges it into an fp32 workspace: by atomicAdd into one slice,
// or (deterministic mode) by a plain store into slice z, which
// dwconv_bwd_filter_finalize_kernel then sums in order z = 0, 1, ...
//
// Where it runs (plan/bwd_filter.cc): every filter gradient with stride_w <= 2 and
// width dilation 1 that the tensor-core, row-stream and GEMV kernels do not take,
// and every deterministic one they do not; its chunked fp32 merge serves both
// modes for any such shape (docs/design-notes.md, "Split kernel").
//
// Block: 4 warps of 8 channel groups x 4 slots = 8 groups x 16 slots, or (width 1)
// of 32 channel groups x 1 slot = 32 groups x 4 slots. A channel group is kWidth
// channels: 1 (one per lane), 4 (fp32; fp16/bf16 in 8-byte loads) or 8 (fp16/bf16
// in 16-byte loads), so a block covers 32 or 64 channels. A slot owns a tap tile:
// kTM consecutive taps (kw0 .. kw0 + kTM - 1) of kRows consecutive filter rows
// (kh0 .. kh0 + kRows - 1). Filters with fewer tiles than slots give the spare slots
// other rows of the chunk ("lanes"); the lanes are summed through shared memory in a
// fixed order. Along a row a thread slides a window of kTM input columns: each ow
// costs kStride new x loads and kRows dy loads (kWidth channels each) for
// kRows * kTM * kWidth FMAs.
//
// Rows. With kRows = 1 the kernel walks output rows oh and reads the input row of
// its filter row. With kRows > 1 (stride 1 and dilation 1 along H) it walks input
// rows instead: input row ih = u - pad_top + kh0 meets filter row kh0 + r at output
// row u - r, so one x window serves kRows filter rows, each with its own dy row, and
// an image has out_h + kRows - 1 such rows u (the first and last kRows - 1 meet
// fewer filter rows; the missing dy rows load as zeros).
#pragma once

#include <cstdint>

#include "bwd_filter/split_grid.h"
#include "common/cuda_types.cuh"
#include "common/static_for.cuh"
#include "common/params.h"

namespace flashdwc {

// Width 1 puts one channel on each lane (32 channel groups, 4 slots per block):
// each output column then costs one 128-byte wavefront per warp for dy and one per
// new x column, where widths 4 and 8 cost four each per 16-byte load.
template <int kWidth>
struct BwdFilterTraits {
  static constexpr int kThreads = 128;
  static constexpr int kChannelsPerThread = kWidth;
  static constexpr int kChannelGroups = kWidth == 1 ? 32 : 8;
  static constexpr int kBlockChannels = kChannelGroups * kChannelsPerThread;  // 32 or 64
  static constexpr int kSlots = kThreads / kChannelGroups;                    // 4 or 16
};

// kWidth channels [c, c + valid) at p as float, zero where masked: one 16-byte
// load of 4 fp32 or 8 fp16/bf16, one 8-byte load of 4 fp16/bf16, or one element.
template <typename T, int kWidth, bool kVec>
__device__ __forceinline__ void load_channels_masked(const T* p, int valid, float (&v)[kWidth]) {
  if constexpr (kWidth == 1) {
    v[0] = valid > 0 ? to_float(p[0]) : 0.0f;
  } else if constexpr (kWidth == 4) {
    load4_masked<T, kVec>(p, valid, v);
  } else {
    static_assert(kWidth == Vec16<T>::kWidth, "8 channels per load is for fp16 and bf16");
    load16_masked<T, kVec>(p, valid, v);
  }
}

// Output columns [ow_begin, ow_end) of one input row into acc[r][t] (filter row
// kh0 + r, tap kw0 + t): dy_rows[r] is the dy row that meets it through filter row
// kh0 + r, and dy_valid[r] its channels, 0 where there is none.
//
// Window invariant: at step k (ow = ow_begin + k), slot (kStride * k + t) % kTM holds
// the input column of tap t. Each step loads the kStride columns that are new; with
// the steps unrolled in chunks of kTM every slot index is a compile-time constant.
template <typename T, int kWidth, int kTM, int kStride, int kRows, bool kVec, bool kChecked>
__device__ __forceinline__ void bwd_filter_row(float (&acc)[kRows][kTM][kWidth], const T* __restrict__ x_row,
                                               const T* const (&dy_rows)[kRows], const int (&dy_valid)[kRows],
                                               int64_t first_col, int64_t in_w, int64_t channels,
                                               int channels_valid, int64_t ow_begin, int64_t ow_end) {
  if (ow_begin >= ow_end) return;
  float win[kTM][kWidth];
  // Column indices fit in 32 bits (in_w does); one unsigned compare checks both ends.
  const int col0 = int(first_col + ow_begin * kStride);  // column of tap 0 at ow_begin
  auto load_col = [&](float (&v)[kWidth], const T* column, int col) {
    const bool inside = !kChecked || unsigned(col) < unsigned(in_w);
    load_channels_masked<T, kWidth, kVec>(column, inside ? channels_valid : 0, v);
  };
  // x and dy are walked by pointer, one 64-bit add each per step: with an address
  // computed per load, the unrolled steps kept one per hoisted load and width 1 at
  // TM 16 spilled 460-1112 bytes (ptxas).
  int next_col = col0 + kTM - kStride;  // the first column step 0 loads
  const T* next_x = x_row + int64_t(next_col) * channels;
  const T* next_dy[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) next_dy[r] = dy_rows[r] + ow_begin * channels;
  auto step = [&](int k) {  // k = (ow - ow_begin) % kTM, static
#pragma unroll
    for (int t = kTM - kStride; t < kTM; ++t) {
      const int j = t - (kTM - kStride);
      load_col(win[(kStride * k + t) % kTM], next_x + j * channels, next_col + j);
    }
    next_x += kStride * channels;
    next_col += kStride;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float g[kWidth];
      load_channels_masked<T, kWidth, kVec>(next_dy[r], dy_valid[r], g);
      next_dy[r] += channels;
#pragma unroll
      for (int t = 0; t < kTM; ++t)
#pragma unroll
        for (int i = 0; i < kWidth; ++i)
          acc[r][t][i] = fmaf(win[(kStride * k + t) % kTM][i], g[i], acc[r][t][i]);
    }
  };

#pragma unroll
  for (int t = 0; t < kTM - kStride; ++t) load_col(win[t], x_row + int64_t(col0 + t) * channels, col0 + t);
  const int64_t count = ow_end - ow_begin;
  int64_t rel = 0;
  for (; rel + kTM <= count; rel += kTM) {
#pragma unroll
    for (int k = 0; k < kTM; ++k) step(k);
  }
  const int64_t remainder = count - rel;
  static_for<1, kTM>([&](auto r) {
    if (remainder == r.value) {
#pragma unroll
      for (int k = 0; k < r.value; ++k) step(k);
    }
  });
}

template <typename T, int kWidth, int kTM, int kStride, int kRows, bool kVec>
__global__ void __launch_bounds__(BwdFilterTraits<kWidth>::kThreads, 4)
dwconv_bwd_filter_split_kernel(const T* __restrict__ x, const T* __restrict__ dy, float* __restrict__ ws,
                               DwConvParams p, BwdFilterGrid g) {
  using Tr = BwdFilterTraits<kWidth>;
  static_assert(kStride <= kTM, "the window must hold the columns one step loads");
  // Lane partials, summed by lane 0 of each tile in lane order (deterministic).
  __shared__ float lane_sums[Tr::kSlots][Tr::kChannelGroups][kRows][kTM][kWidth];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = lane % Tr::kChannelGroups;
  const int slot = warp * (32 / Tr::kChannelGroups) + lane / Tr::kChannelGroups;
  const int tile_in_block = slot % g.tiles_per_block;
  const int row_lane = slot / g.tiles_per_block;
  const int64_t tile = int64_t(blockIdx.x) * g.tiles_per_block + tile_in_block;
  const int64_t kh0 = tile / g.kw_tiles * kRows;
  const int64_t kw0 = (tile % g.kw_tiles) * kTM;
  const int64_t c0 = int64_t(blockIdx.y) * Tr::kBlockChannels + group * kWidth;
  const int64_t channels_left = p.channels - c0;
  const int channels_valid = channels_left <= 0 ? 0 : channels_left >= kWidth ? kWidth : int(channels_left);
  const bool active = row_lane < g.lanes && tile < g.tiles && channels_valid > 0;

  // Output columns whose kTM taps all read inside the image run unchecked. The range
  // is made warp-uniform so that no warp runs both variants of one column.
  const int64_t first_col = kw0 - p.pad_left;  // input column of tap 0 at ow = 0
  int lo = 0, hi = int(p.out_w);
  if (active) {
    const int64_t need_lo = -first_col;                           // ow * s >= need_lo
    const int64_t need_hi = p.in_w - kTM - first_col;             // ow * s <= need_hi
    lo = need_lo <= 0 ? 0 : int(min((need_lo + kStride - 1) / kStride, p.out_w));
    hi = need_hi < 0 ? 0 : int(min(need_hi / kStride + 1, p.out_w));
  }
  lo = __reduce_max_sync(0xffffffffu, lo);
  hi = max(lo, int(__reduce_min_sync(0xffffffffu, unsigned(hi))));

  float acc[kRows][kTM][kWidth];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < kTM; ++t)
#pragma unroll
      for (int i = 0; i < kWidth; ++i) acc[r][t][i] = 0.0f;

  const int64_t row_begin = int64_t(blockIdx.z) * g.rows_per_split;
  const int64_t row_end = min(row_begin + g.rows_per_split, g.rows);
  if (active) {
    for (int64_t row = row_begin + row_lane; row < row_end; row += g.lanes) {
      const int64_t u = row % g.rows_per_image, n = row / g.rows_per_image;
      const int64_t ih = u * p.stride_h - p.pad_top + kh0 * p.dilation_h;
      if (ih < 0 || ih >= p.in_h) continue;
      const T* x_row = x + (n * p.in_h + ih) * p.in_w * p.channels + c0;
      const T* dy_image = dy + n * p.out_h * p.out_w * p.channels + c0;
      const T* dy_rows[kRows];
      int dy_valid[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {  // output row u - r; with one filter row, u itself
        const bool meets = kRows == 1 || (u - r >= 0 && u - r < p.out_h && kh0 + r < p.kernel_h);
        dy_rows[r] = meets ? dy_image + (u - r) * p.out_w * p.channels : dy_image;
        dy_valid[r] = meets ? channels_valid : 0;
      }
      bwd_filter_row<T, kWidth, kTM, kStride, kRows, kVec, true>(acc, x_row, dy_rows, dy_valid, first_col, p.in_w,
                                                                 p.channels, channels_valid, 0, lo);
      bwd_filter_row<T, kWidth, kTM, kStride, kRows, kVec, false>(acc, x_row, dy_rows, dy_valid, first_col, p.in_w,
                                                                  p.channels, channels_valid, lo, hi);
      bwd_filter_row<T, kWidth, kTM, kStride, kRows, kVec, true>(acc, x_row, dy_rows, dy_valid, first_col, p.in_w,
                                                                 p.channels, channels_valid, hi, p.out_w);
    }
  }

  if (g.lanes > 1) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int t = 0; t < kTM; ++t)
#pragma unroll
        for (int i = 0; i < kWidth; ++i) lane_sums[slot][group][r][t][i] = acc[r][t][i];
    __syncthreads();
    if (row_lane == 0) {
      for (int l = 1; l < g.lanes; ++l) {
        const int other = l * g.tiles_per_block + tile_in_block;
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int t = 0; t < kTM; ++t)
#pragma unroll
            for (int i = 0; i < kWidth; ++i) acc[r][t][i] += lane_sums[other][group][r][t][i];
      }
    }
  }
  if (!active || row_lane != 0) return;

  const int64_t slice = g.atomic ? 0 : int64_t(blockIdx.z) * p.kernel_h * p.kernel_w * p.channels;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t kh = kh0 + r;
    if (kh >= p.kernel_h) break;
#pragma unroll
    for (int t = 0; t < kTM; ++t) {
      const int64_t kw = kw0 + t;
      if (kw >= p.kernel_w) break;
      float* dst = ws + slice + (kh * p.kernel_w + kw) * p.channels + c0;
      if (g.atomic) {
#pragma unroll
        for (int i = 0; i < kWidth; ++i)
          if (i < channels_valid) atomicAdd(dst + i, acc[r][t][i]);
      } else if constexpr (kVec && kWidth % 4 == 0) {
#pragma unroll
        for (int i = 0; i < kWidth; i += 4)
          store_global_v4(dst + i, __float_as_uint(acc[r][t][i]), __float_as_uint(acc[r][t][i + 1]),
                          __float_as_uint(acc[r][t][i + 2]), __float_as_uint(acc[r][t][i + 3]));
      } else {
#pragma unroll
        for (int i = 0; i < kWidth; ++i)
          if (i < channels_valid) dst[i] = acc[r][t][i];
      }
    }
  }
}

// dw[e] = sum over z < slices of ws[z * count + e], in order of z, cast to T.
template <typename T>
__global__ void dwconv_bwd_filter_finalize_kernel(const float* __restrict__ ws, T* __restrict__ dw,
                                                  int64_t count, int64_t slices) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += int64_t(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int64_t z = 0; z < slices; ++z) sum += ws[z * count + e];
    dw[e] = from_float<T>(sum);
  }
}

}  // namespace flashdwc
