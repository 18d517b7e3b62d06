// Forward kernel on CUDA cores for wide fp32 filters: the GEMV dataflow of
// fwd_gemv.cuh (FH rows of 1-D convolutions, inputs reused width-first from a
// register window, filter rows staged in shared memory) with one channel per lane
// instead of four per thread, so that a thread holds kTM = 16 outputs.
//
// Why: at large k the GEMV kernel runs at 17-28 TFLOP/s of fp32's ~67 on the H200.
// Each of its taps costs a 16-byte global load (4 L1 wavefronts per warp) and a
// 16-byte shared load (4 quarter-warp phases) for 32 FMAs per thread, so the
// load/store pipe is as busy as the FMA pipe (docs/perf-notes.md, GEMV v2). Here a
// tap costs one 4-byte global load and one 4-byte shared load, one 128-byte
// wavefront each per warp, for kTM = 16 FMAs: half the load-pipe work and half the
// input bytes per FMA (kTM + KW - 1 inputs per kTM x KW FMAs instead of 8 + KW - 1
// per 8 x KW).
//
// Block: 4 warps, one output row each, 32 channels (a lane each) x kTM columns.
// The 4 rows are consecutive and share their columns, so the warps need the same
// filter taps and their input rows overlap in L1. Stride 1 and dilation 1 along
// the width; any stride and dilation along the height.
#pragma once

#include <cstdint>

#include "common/cp_async.cuh"
#include "common/cuda_types.cuh"
#include "common/static_for.cuh"
#include "dwconv/epilogue.h"
#include "dwconv/params.h"

namespace flashdwc {

struct GemvLaneTraits {
  static constexpr int kThreads = 128;
  static constexpr int kBlockChannels = 32;                    // one per lane
  static constexpr int kRowsPerBlock = kThreads / 32;          // one output row per warp
};

// Problem-derived values computed once on the host.
struct GemvLaneGrid {
  int64_t segments_per_row;  // ceil(Wo / kTM)
  int64_t rows;              // N * Ho
  int64_t rows_per_stage;    // filter rows per shared-memory stage
};

// Filter rows [kh_begin, kh_end) of the block's 32 channels into dst, laid out
// (row, KW, 32), zero past C. One 4-byte cp.async per element: a lane reads its
// channel's tap as one word, so this layout has no bank conflicts.
__device__ __forceinline__ void load_filter_rows_lane(float* dst, const float* __restrict__ w,
                                                      const DwConvParams& p, int64_t kh_begin, int64_t kh_end,
                                                      int64_t channel_base) {
  using Tr = GemvLaneTraits;
  const int row_elems = int(p.kernel_w) * Tr::kBlockChannels;
  const int elems = int(kh_end - kh_begin) * row_elems;
  for (int e = threadIdx.x; e < elems; e += Tr::kThreads) {
    const int r = e / row_elems, kw = (e % row_elems) / Tr::kBlockChannels;
    const int64_t c = channel_base + e % Tr::kBlockChannels;
    const bool valid = c < p.channels;
    cp_async<4>(dst + e, valid ? w + filter_tap(p, kh_begin + r, kw) * p.channels + c : w, valid);
  }
}

// One filter row's 1-D convolution for this lane's channel and kTM outputs, taps
// [kw_begin, kw_end). Window invariant (as in gemv_row): at tap kw, slot
// (kw - kw_begin + j) % kTM holds input column base_iw + kw + j, j in [0, kTM), and
// output t reads j = t. Each tap loads j = kTM - 1 into the slot the previous tap
// finished with; the taps run in unrolled chunks of kTM, so every slot index is a
// compile-time constant, and the remainder is unrolled for each length.
// kChecked: columns outside [0, in_w) read as zero. All lanes of a warp share their
// columns, so the checks never diverge.
template <int kTM, bool kChecked>
__device__ __forceinline__ void gemv_lane_row(float (&acc)[kTM], const float* __restrict__ x_row,
                                              const float* w_row, int64_t base_iw, int64_t in_w,
                                              int64_t channels, int kw_begin, int kw_end) {
  float win[kTM];
  // Column indices fit in 32 bits (in_w does); one unsigned compare checks both ends.
  auto inside = [&](int iw) { return !kChecked || unsigned(iw) < unsigned(in_w); };
  auto load_column = [&](int iw) -> float { return inside(iw) ? x_row[int64_t(iw) * channels] : 0.0f; };
  // The column the next tap loads, walked by pointer: one 64-bit add per tap (the
  // index form kept a 64-bit address per hoisted load and spilled under the cap).
  int next_iw = int(base_iw) + kw_begin + kTM - 1;
  const float* next_column = x_row + int64_t(next_iw) * channels;
  auto tap = [&](int k, int kw) {
    win[(k + kTM - 1) % kTM] = inside(next_iw) ? *next_column : 0.0f;
    next_column += channels;
    ++next_iw;
    const float wv = w_row[kw * GemvLaneTraits::kBlockChannels];
#pragma unroll
    for (int t = 0; t < kTM; ++t) acc[t] = fmaf(win[(k + t) % kTM], wv, acc[t]);
  };

#pragma unroll
  for (int j = 0; j < kTM - 1; ++j) win[j] = load_column(int(base_iw) + kw_begin + j);
  int kw0 = kw_begin;
  for (; kw0 + kTM <= kw_end; kw0 += kTM) {
#pragma unroll
    for (int k = 0; k < kTM; ++k) tap(k, kw0 + k);
  }
  const int remainder = kw_end - kw0;
  static_for<1, kTM>([&](auto r) {
    if (remainder == r.value) {
#pragma unroll
      for (int k = 0; k < r.value; ++k) tap(k, kw0 + k);
    }
  });
}

template <int kTM, int kMinBlocksPerSM>
__global__ void __launch_bounds__(GemvLaneTraits::kThreads, kMinBlocksPerSM)
dwconv_fwd_gemv_lane_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                            DwConvParams p, GemvLaneGrid grid, FwdEpilogue epilogue) {
  using Tr = GemvLaneTraits;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* w_smem = reinterpret_cast<float*>(smem_raw);  // (2, rows_per_stage, KW, 32): double-buffered

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // Blocks are numbered (group of 4 output rows, segment along the row).
  const int64_t row_group = int64_t(blockIdx.x) / grid.segments_per_row;
  const int64_t segment = int64_t(blockIdx.x) % grid.segments_per_row;
  const int64_t row = row_group * Tr::kRowsPerBlock + warp;
  const bool row_valid = row < grid.rows;
  const int64_t oh = row % p.out_h;
  const int64_t n = row / p.out_h;
  const int64_t c = int64_t(blockIdx.y) * Tr::kBlockChannels + lane;
  const bool channel_valid = c < p.channels;
  const int64_t ow0 = segment * kTM;
  const int64_t base_iw = ow0 - p.pad_left;
  const int kernel_w = int(p.kernel_w);

  // The same for the whole block (the columns are): every column read is inside
  // the image, or else the taps whose kTM outputs all read padding are skipped
  // (tap kw reads columns base_iw + kw + t; at a border up to half the filter).
  const bool interior = base_iw >= 0 && base_iw + kernel_w - 1 + (kTM - 1) < p.in_w;
  const int64_t first_useful = -base_iw - (kTM - 1);
  const int64_t past_useful = p.in_w - base_iw;
  const int kw_begin = first_useful <= 0 ? 0 : first_useful >= kernel_w ? kernel_w : int(first_useful);
  const int kw_end = past_useful <= kw_begin ? kw_begin : past_useful >= kernel_w ? kernel_w : int(past_useful);

  float acc[kTM];
#pragma unroll
  for (int t = 0; t < kTM; ++t) acc[t] = 0.0f;

  const int64_t row_elems = p.kernel_w * Tr::kBlockChannels;
  const int64_t rows_per_stage = grid.rows_per_stage;
  const int64_t stages = (p.kernel_h + rows_per_stage - 1) / rows_per_stage;
  auto stage_smem = [&](int64_t stage) { return w_smem + (stage & 1) * rows_per_stage * row_elems; };
  auto stage_end = [&](int64_t stage) { return min((stage + 1) * rows_per_stage, p.kernel_h); };
  load_filter_rows_lane(stage_smem(0), w, p, 0, stage_end(0), int64_t(blockIdx.y) * Tr::kBlockChannels);
  cp_async_commit();
  for (int64_t stage = 0; stage < stages; ++stage) {
    if (stage + 1 < stages) {
      load_filter_rows_lane(stage_smem(stage + 1), w, p, (stage + 1) * rows_per_stage, stage_end(stage + 1),
                            int64_t(blockIdx.y) * Tr::kBlockChannels);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    for (int64_t kh = stage * rows_per_stage; kh < stage_end(stage); ++kh) {
      const int64_t ih = oh * p.stride_h - p.pad_top + kh * p.dilation_h;
      if (!row_valid || ih < 0 || ih >= p.in_h) continue;  // the whole warp
      // Lanes past C read channel 0 instead (never stored), so loads need no mask.
      const float* x_row = x + (n * p.in_h + ih) * p.in_w * p.channels + (channel_valid ? c : 0);
      const float* w_row = stage_smem(stage) + (kh - stage * rows_per_stage) * row_elems + lane;
      if (interior) {
        gemv_lane_row<kTM, false>(acc, x_row, w_row, base_iw, p.in_w, p.channels, 0, kernel_w);
      } else {
        gemv_lane_row<kTM, true>(acc, x_row, w_row, base_iw, p.in_w, p.channels, kw_begin, kw_end);
      }
    }
    // The next stage's copies overwrite the buffer this one read.
    __syncthreads();
  }

  if (!row_valid || !channel_valid) return;
  if (epilogue.active()) {
    const float bias = epilogue.bias != nullptr ? to_float(static_cast<const float*>(epilogue.bias)[c]) : 0.0f;
#pragma unroll
    for (int t = 0; t < kTM; ++t) acc[t] = apply_activation(epilogue.activation, acc[t] + bias);
  }
  float* y_base = y + ((n * p.out_h + oh) * p.out_w + ow0) * p.channels + c;
#pragma unroll
  for (int t = 0; t < kTM; ++t) {
    if (ow0 + t >= p.out_w) break;
    y_base[t * p.channels] = acc[t];
  }
}

}  // namespace flashdwc
