// Filter gradient for small filters at stride 1 (KW of 3, 5 or 7; KH up to 16),
// beyond the paper: the forward row-stream kernel's pipeline with the split
// kernel's sliding window.
//   dw[kh, kw, c] = sum over (n, oh, ow) of dy[n, oh, ow, c] * x[n, oh + kh - pad_top, ow + kw - pad_left, c]
//
// Why: at k <= 7 the split kernel ran at 0.79-0.99x XLA in bf16 and 0.50-0.54x in
// fp32 at k = 3 on the H200 (docs/design-notes.md), bound by neither
// bytes nor FLOPs: each thread loads its columns straight from global memory and
// its FMAs wait on them with nothing of the next step in flight, and every input
// row is fetched once per filter row that meets it.
//
// Here a block walks down one strip of a run of rows: each input row and each dy row
// is copied once, by cp.async, kPrefetchRows rows ahead of its use, zero-filled
// outside the image and past the last output column (so that the arithmetic needs no
// predicates). The run may cross from one image into the next: the images' rows are
// numbered as one sequence, Ho + KH - 1 to an image (the padded input's height), whose
// last KH - 1 output rows in each image are not real and are skipped, so that the
// launch can give every block an equal run and fill the GPU in one wave.
//
// Block: 128 threads = 8 channel groups (16 bytes of channels each: 32 fp32 or 64
// fp16/bf16 channels per block) x 16 workers. Worker w takes filter row
// kh = w % KH and column segment w / KH of the strip: 16 / KH segments, so that all
// KH filter rows are summed over every output row the block holds. A worker keeps
// the KW taps of its filter row for its channels in fp32 registers; at the end the
// segments' partial sums are added in a fixed order through shared memory and merged
// into the fp32 workspace with atomicAdd (atomic mode only: deterministic mode keeps
// the split kernel, whose slices the workspace is sized for).
#pragma once

#include <cstdint>

#include "bwd_filter/rowstream_grid.h"
#include "common/cp_async.cuh"
#include "common/cuda_types.cuh"
#include "common/static_for.cuh"
#include "common/params.h"

namespace flashdwc {

template <typename T, int kStrip_>
struct BwdFilterRowStreamTraits {
  static constexpr int kThreads = 128;
  static constexpr int kWidth = Vec16<T>::kWidth;                        // channels per thread: 4 fp32, 8 half
  static constexpr int kChannelGroups = 8;                                // 128 bytes of channels
  static constexpr int kBlockChannels = kChannelGroups * kWidth;          // 32 or 64
  static constexpr int kWorkers = kThreads / kChannelGroups;              // 16
  static constexpr int kStrip = kStrip_;                                  // output columns per block
  // Rows copied ahead of the row being summed, as in the forward row-stream kernel.
  static constexpr int kPrefetchRows = 2;
  static constexpr int kDyRing = kPrefetchRows + 1;
};

inline constexpr int kBwdFilterRowStreamMaxKernelH = 16;  // one worker per filter row at least

// One worker's columns [0, count) of its segment for one output row: acc[kw] +=
// dy[ow] * x[ow + kw], with x_col at the segment's first input column and dy_col at
// its first output column, both in shared memory, kBlockChannels elements a column.
// Window invariant: at step r, slot (r + kw) % kKW holds input column r + kw; the
// steps are unrolled in chunks of kKW so that every slot index is a constant.
template <typename T, int kKW, int kBlockChannels>
__device__ __forceinline__ void bwd_filter_rowstream_segment(float (&acc)[kKW][Vec16<T>::kWidth],
                                                             const T* x_col, const T* dy_col, int count) {
  constexpr int kWidth = Vec16<T>::kWidth;
  float win[kKW][kWidth];
#pragma unroll
  for (int j = 0; j < kKW - 1; ++j) Vec16<T>::load_shared(x_col + j * kBlockChannels, win[j]);
  const T* next_x = x_col + (kKW - 1) * kBlockChannels;
  auto step = [&](auto k) {  // k = r % kKW, a constant
    constexpr int kStep = decltype(k)::value;
    Vec16<T>::load_shared(next_x, win[(kStep + kKW - 1) % kKW]);
    float g[kWidth];
    Vec16<T>::load_shared(dy_col, g);
    next_x += kBlockChannels;
    dy_col += kBlockChannels;
#pragma unroll
    for (int kw = 0; kw < kKW; ++kw)
#pragma unroll
      for (int i = 0; i < kWidth; ++i) acc[kw][i] = fmaf(win[(kStep + kw) % kKW][i], g[i], acc[kw][i]);
  };
  int r = 0;
  for (; r + kKW <= count; r += kKW) static_for<0, kKW>(step);
  const int remainder = count - r;
  static_for<1, kKW>([&](auto length) {
    if (remainder == decltype(length)::value) static_for<0, decltype(length)::value>(step);
  });
}

// 3 resident blocks per SM cap the registers at 168: fp16/bf16 at KW = 7 hold 56
// accumulators and a 56-register window.
template <typename T, int kStrip, int kKW>
__global__ void __launch_bounds__(BwdFilterRowStreamTraits<T, kStrip>::kThreads, 3)
dwconv_bwd_filter_rowstream_kernel(const T* __restrict__ x, const T* __restrict__ dy, float* __restrict__ ws,
                                   DwConvParams p, BwdFilterRowStreamGrid grid) {
  using Tr = BwdFilterRowStreamTraits<T, kStrip>;
  constexpr int kWidth = Tr::kWidth;
  constexpr int kXColumns = kStrip + kKW - 1;
  constexpr int kXRowElems = kXColumns * Tr::kBlockChannels;
  constexpr int kDyRowElems = kStrip * Tr::kBlockChannels;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* x_ring = reinterpret_cast<T*>(smem_raw);              // (x_ring, kXColumns, kBlockChannels)
  T* dy_ring = x_ring + int64_t(grid.x_ring) * kXRowElems;  // (kDyRing, kStrip, kBlockChannels)

  const int kernel_h = int(p.kernel_h);
  // Channel blocks vary fastest, so that the blocks resident together read all C
  // channels of the same pixels rather than one 128-byte slice of many (as in the
  // forward, where it saved up to 7% at k = 3; here within 1% in fp32, 0.97 in bf16 on
  // 128x128x128x128 at k = 3 on the H200).
  const int64_t spatial = int64_t(blockIdx.x) / grid.channel_blocks;
  const int64_t strip = spatial % grid.strips;
  const int64_t row_block = spatial / grid.strips;
  const int64_t channel_base = (int64_t(blockIdx.x) % grid.channel_blocks) * Tr::kBlockChannels;
  const int64_t ow_begin = strip * kStrip;
  const int64_t row_begin = row_block * grid.rows_per_block;  // in the sequence
  const int rows = int(min(row_begin + grid.rows_per_block, grid.sequence_rows) - row_begin);
  // Sequence row s is row s % image_rows of image s / image_rows, both for output
  // rows (real where that row is below Ho) and for the padded input rows (input row
  // ih = s % image_rows - pad_top, real inside [0, H)). Output row o of the block
  // meets input rows o .. o + KH - 1 of its run; each row's place is kept by
  // increments, one row at a time, as the copies go down the run.
  const int64_t iw_begin = ow_begin - p.pad_left;
  const int input_rows = rows + kernel_h - 1;
  struct Place {
    int64_t image;
    int row;  // in the image's part of the sequence
  };
  auto advance = [&](Place& at) {
    if (++at.row == grid.image_rows) {
      at.row = 0;
      ++at.image;
    }
  };
  const Place first = {row_begin / grid.image_rows, int(row_begin % grid.image_rows)};
  Place next_x = first, next_dy = first, next_out = first;

  // 16-byte copies, zero-filled outside the image, past the last output column and
  // past C (C is a multiple of kWidth, so a channel group is whole or absent). Thread
  // t copies channel group t % 8 of columns t / 8, t / 8 + 16, ...: its offsets and
  // which of its columns are inside are set once here, so that a row adds only its
  // base. Before, each 16-byte copy recomputed its column, channel and bounds, and the
  // copies took about half of the kernel's instructions at k = 3 (Nsight Compute on the
  // H200, fp32 128x128x128x128: 59% of issue slots used, 2.9 warps a scheduler).
  constexpr int kColumnsPerPass = Tr::kThreads / Tr::kChannelGroups;  // 16
  constexpr int kXPasses = (kXColumns + kColumnsPerPass - 1) / kColumnsPerPass;
  constexpr int kDyPasses = kStrip / kColumnsPerPass;
  static_assert(kStrip % kColumnsPerPass == 0 && kXPasses <= 32, "a pass is 16 whole columns");
  const int copy_col = threadIdx.x / Tr::kChannelGroups;
  const int64_t copy_c = channel_base + (threadIdx.x % Tr::kChannelGroups) * kWidth;
  const bool channels_inside = copy_c < p.channels;
  unsigned x_valid = 0, dy_valid = 0;  // bit i: the column of pass i is inside
#pragma unroll
  for (int i = 0; i < kXPasses; ++i) {
    const int64_t iw = iw_begin + copy_col + i * kColumnsPerPass;
    if (channels_inside && iw >= 0 && iw < p.in_w) x_valid |= 1u << i;
  }
#pragma unroll
  for (int i = 0; i < kDyPasses; ++i) {
    if (channels_inside && ow_begin + copy_col + i * kColumnsPerPass < p.out_w) dy_valid |= 1u << i;
  }
  const int64_t x_thread = (iw_begin + copy_col) * p.channels + copy_c;  // added only where valid
  const int64_t dy_thread = (ow_begin + copy_col) * p.channels + copy_c;
  const int64_t pass_stride = kColumnsPerPass * p.channels;
  // The rows are loaded in order, so their ring slots and places are kept by increments.
  int x_load_slot = 0, dy_load_slot = 0;
  auto load_x_row = [&](int j) {
    if (j >= input_rows) return;
    const int64_t ih = next_x.row - p.pad_top;
    const bool row_inside = ih >= 0 && ih < p.in_h;
    T* slot = x_ring + x_load_slot * kXRowElems + threadIdx.x * kWidth;
    const T* x_row = x + (next_x.image * p.in_h + (row_inside ? ih : 0)) * p.in_w * p.channels;
    advance(next_x);
    static_for<0, kXPasses>([&](auto pass) {
      constexpr int kPass = decltype(pass)::value;
      // Only the last pass may reach past the row's kXColumns columns.
      if ((kPass + 1) * kColumnsPerPass <= kXColumns || copy_col + kPass * kColumnsPerPass < kXColumns) {
        const bool valid = row_inside && (x_valid >> kPass & 1u);
        cp_async<16>(slot + kPass * Tr::kThreads * kWidth, valid ? x_row + (x_thread + kPass * pass_stride) : x,
                     valid);
      }
    });
    x_load_slot = x_load_slot + 1 == grid.x_ring ? 0 : x_load_slot + 1;
  };
  auto load_dy_row = [&](int o) {
    if (o >= rows) return;
    const bool row_real = next_dy.row < p.out_h;
    T* slot = dy_ring + dy_load_slot * kDyRowElems + threadIdx.x * kWidth;
    const T* dy_row = dy + (next_dy.image * p.out_h + (row_real ? next_dy.row : 0)) * p.out_w * p.channels;
    advance(next_dy);
    static_for<0, kDyPasses>([&](auto pass) {
      constexpr int kPass = decltype(pass)::value;
      const bool valid = row_real && (dy_valid >> kPass & 1u);
      cp_async<16>(slot + kPass * Tr::kThreads * kWidth, valid ? dy_row + (dy_thread + kPass * pass_stride) : dy,
                   valid);
    });
    dy_load_slot = dy_load_slot + 1 == Tr::kDyRing ? 0 : dy_load_slot + 1;
  };

  // Commit groups 0 .. x_ring - 2 hold input rows 0 .. x_ring - 2, and the first
  // kPrefetchRows of them dy rows 0 .. kPrefetchRows - 1; iteration o commits input
  // row o + x_ring - 1 and dy row o + kPrefetchRows. Output row o needs input row
  // o + KH - 1 and dy row o, both in group o + KH - 1 or earlier, so with
  // x_ring - 1 + o groups committed, kPrefetchRows - 1 may still be in flight.
  // (Empty groups past the last row keep that count.)
  for (int j = 0; j < grid.x_ring - 1; ++j) {
    load_x_row(j);
    if (j < Tr::kPrefetchRows) load_dy_row(j);
    cp_async_commit();
  }

  const int group = threadIdx.x % Tr::kChannelGroups;
  const int worker = threadIdx.x / Tr::kChannelGroups;
  const int kh = worker % kernel_h;
  const int segment = worker / kernel_h;
  const bool active = segment < grid.segments;
  const int seg_begin = segment * kStrip / grid.segments;
  const int seg_count = (segment + 1) * kStrip / grid.segments - seg_begin;

  float acc[kKW][kWidth];
#pragma unroll
  for (int kw = 0; kw < kKW; ++kw)
#pragma unroll
    for (int i = 0; i < kWidth; ++i) acc[kw][i] = 0.0f;

  // Ring slots of input row o + kh and dy row o, kept by increments.
  int x_slot = kh % grid.x_ring;
  int dy_slot = 0;
  const int64_t thread_offset = int64_t(seg_begin) * Tr::kBlockChannels + group * kWidth;
  for (int o = 0; o < rows; ++o) {
    cp_async_wait<Tr::kPrefetchRows - 1>();
    // Makes row o's copies visible to every thread, and ends every thread's reads
    // of output row o - 1, whose slots the next copies reuse.
    __syncthreads();
    load_x_row(o + grid.x_ring - 1);
    load_dy_row(o + Tr::kPrefetchRows);
    cp_async_commit();
    // The KH - 1 rows between two images are not output rows: skipped rather than
    // summed with their zero dy, so that an infinite x there makes no NaN.
    if (active && next_out.row < p.out_h) {
      bwd_filter_rowstream_segment<T, kKW, Tr::kBlockChannels>(
          acc, x_ring + int64_t(x_slot) * kXRowElems + thread_offset,
          dy_ring + int64_t(dy_slot) * kDyRowElems + thread_offset, seg_count);
    }
    advance(next_out);
    x_slot = x_slot + 1 == grid.x_ring ? 0 : x_slot + 1;
    dy_slot = dy_slot + 1 == Tr::kDyRing ? 0 : dy_slot + 1;
  }
  // No copy may be in flight when the rings become the partial sums.
  cp_async_wait<0>();
  __syncthreads();

  // Partials (worker, kw, channel group, kWidth): a worker's kWidth floats for one
  // tap are 16 or 32 contiguous bytes, the 8 groups' 128 or 256.
  float* partials = reinterpret_cast<float*>(smem_raw);
  auto partial = [&](int w, int kw) {
    return partials + (int64_t(w) * kKW + kw) * Tr::kBlockChannels + group * kWidth;
  };
#pragma unroll
  for (int kw = 0; kw < kKW; ++kw)
#pragma unroll
    for (int i = 0; i < kWidth; ++i) partial(worker, kw)[i] = acc[kw][i];
  __syncthreads();
  const int64_t c0 = channel_base + group * kWidth;
  if (segment != 0 || c0 >= p.channels) return;
  // Segment 0's worker of each filter row adds the others in segment order.
  for (int s = 1; s < grid.segments; ++s) {
#pragma unroll
    for (int kw = 0; kw < kKW; ++kw)
#pragma unroll
      for (int i = 0; i < kWidth; ++i) acc[kw][i] += partial(s * kernel_h + kh, kw)[i];
  }
#pragma unroll
  for (int kw = 0; kw < kKW; ++kw) {
    float* dst = ws + (int64_t(kh) * kKW + kw) * p.channels + c0;
#pragma unroll
    for (int i = 0; i < kWidth; ++i) atomicAdd(dst + i, acc[kw][i]);
  }
}

}  // namespace flashdwc
