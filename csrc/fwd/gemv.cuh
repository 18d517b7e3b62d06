// Flash-DWC forward kernel on CUDA cores (paper section 3): each thread computes
// kTM consecutive outputs along the width for 16 bytes of channels (4 fp32, 8
// fp16/bf16), as FH rows of 1-D
// convolutions. Along each row the inputs are reused width-first from a register
// window (one new 16-byte load per filter tap feeds kTM * width FMAs) and the filter
// rows are shared by the block from shared memory, loaded with cp.async one stage
// of rows ahead (double buffer).
//
// Where it runs (plan/fwd.cc): stride_w 1 or 2 and KW up to 512 where no faster
// kernel applies, in practice fp32 from KW = 9 and the strided problems. Choosing
// the bounds path per warp and staging the filter rows made it 5.7x XLA in fp32
// (docs/design-notes.md, "GEMV kernel").
//
// Block: 4 warps; a warp is 8 channel groups x 4 width segments, so a block
// covers 32 (fp32) or 64 (half) channels x 16 segments of kTM outputs. Loads of
// 16 bytes per thread make each row of 8 threads one 128-byte transaction.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/cp_async.cuh"
#include "common/cuda_types.cuh"
#include "common/epilogue.h"
#include "fwd/gemv_grid.h"
#include "common/params.h"

namespace flashdwc {

template <typename T>
struct GemvFwdTraits {
  static constexpr int kThreads = 128;
  static constexpr int kChannelsPerThread = Vec16<T>::kWidth;                 // 4 fp32, 8 half
  static constexpr int kChannelGroups = 8;                                   // threads along C per warp
  static constexpr int kBlockChannels = kChannelGroups * kChannelsPerThread;  // 128 bytes: 32 or 64
  static constexpr int kSegments = kThreads / kChannelGroups;                 // 16 width segments
  static constexpr int kRowsPerWarp = 32 / kChannelGroups;                    // 4
};

// Filter rows [kh_begin, kh_end) (all KW taps, kBlockChannels channels each) into
// shared memory, laid out (row, KW, kBlockChannels), by a block of `threads` threads
// (a multiple of kChannelGroups). With kVec each 16-byte chunk is one cp.async;
// otherwise plain element copies.
template <typename T, bool kVec>
__device__ __forceinline__ void load_filter_rows(T* dst, const T* __restrict__ w, const DwConvParams& p,
                                                 int64_t kh_begin, int64_t kh_end, int64_t channel_base,
                                                 int threads = GemvFwdTraits<T>::kThreads) {
  using Tr = GemvFwdTraits<T>;
  constexpr int kWidth = Tr::kChannelsPerThread;
  const int kernel_w = int(p.kernel_w);
  if constexpr (kVec) {
    // Row by row, so that splitting a chunk index divides by the constant
    // kChannelGroups only: the flat form divided by the runtime row length, about
    // 300 SASS instructions per copy loop.
    const int row_chunks = kernel_w * Tr::kChannelGroups;
    const int group = threadIdx.x % Tr::kChannelGroups;
    const int64_t c = channel_base + group * kWidth;
    const bool valid = c < p.channels;
    for (int64_t kh = kh_begin; kh < kh_end; ++kh) {
      T* dst_row = dst + (kh - kh_begin) * row_chunks * kWidth;
      for (int in_row = threadIdx.x; in_row < row_chunks; in_row += threads) {
        const int kw = in_row / Tr::kChannelGroups;
        const T* src = valid ? w + filter_tap(p, kh, kw) * p.channels + c : w;
        cp_async<16>(dst_row + in_row * kWidth, src, valid);
      }
    }
  } else {
    const int row_elems = kernel_w * Tr::kBlockChannels;
    const int elements = int(kh_end - kh_begin) * row_elems;
    for (int e = threadIdx.x; e < elements; e += threads) {
      const int r = e / row_elems, kw = (e % row_elems) / Tr::kBlockChannels;
      const int64_t c = channel_base + e % Tr::kBlockChannels;
      dst[e] = c < p.channels ? w[filter_tap(p, kh_begin + r, kw) * p.channels + c] : T(0.0f);
    }
  }
}

// One filter row's 1-D convolution for this thread's kTM x kWidth outputs.
// kPrologue: each input column is transformed by `affine` as it is loaded (inside
// the image only; padding stays zero).
//
// Only taps [kw_begin, kw_end) run: the others read padding for all kTM outputs.
// kUnguardedInside (vector loads, checked rows): the chunks whose loads all lie in
// the image skip the per-tap edge check; see the chunk loops below.
// Window invariant: at tap kw, slot (kw - kw_begin + j) % kWin holds input column
// base_iw + kw + j, for j in [0, kWin). Output t reads j = kStride * t. Each tap
// loads only j = kWin - 1 into the slot that tap kw - 1 has finished with; with
// the taps unrolled in chunks of kWin, every slot index is a compile-time
// constant and the window never moves between registers.
template <typename T, int kTM, int kStride, bool kVec, bool kChecked, bool kPrologue,
          bool kUnguardedInside = false>
__device__ __forceinline__ void gemv_row(float (&acc)[kTM][Vec16<T>::kWidth], const T* __restrict__ x_row,
                                         const T* w_row, int64_t base_iw, int64_t in_w,
                                         int64_t channels, int channels_valid, int kw_begin, int kw_end,
                                         const ChannelAffine<Vec16<T>::kWidth>& affine) {
  using Tr = GemvFwdTraits<T>;
  constexpr int kWidth = Tr::kChannelsPerThread;
  constexpr int kWin = kStride * (kTM - 1) + 1;
  float win[kWin][kWidth];
  auto transform = [&](float (&v)[kWidth], bool inside) {
    if constexpr (kPrologue) {
#pragma unroll
      for (int i = 0; i < kWidth; ++i)
        v[i] = inside ? affine.apply(i, v[i]) : 0.0f;
    }
  };
  auto load_column = [&](float (&v)[kWidth], int64_t iw) {
    const bool inside = !kChecked || (iw >= 0 && iw < in_w);
    load16_masked<T, kVec>(x_row + iw * channels, inside ? channels_valid : 0, v);
    transform(v, inside);
  };
  // The column the next tap loads. Vector loads walk it by pointer (one 64-bit add
  // per tap): the interior chunk loop was 384 SASS instructions per 256 FFMA with
  // the index form (v2), 302 with the walk. Checked vector loads walk too, with one
  // unsigned compare of a running column index, where the index form took 431 per
  // 256 FFMA; the pointer is only dereferenced inside the image.
  // With kUnguardedInside the running column is 32-bit (can_implement_bwd_filter_gemv
  // keeps every column a row walks, padding included, below 2^31). The forward keeps
  // the 64-bit one: the 32-bit column alone made its fp32 128^4 forward 2-5% slower
  // at k = 9-51 (different register allocation, more spills), the filter gradient
  // 1-3.5% faster.
  using Column = std::conditional_t<kUnguardedInside, uint32_t, uint64_t>;
  const T* next_column = x_row + (base_iw + kw_begin + kWin - 1) * channels;
  Column next_iw = Column(base_iw + kw_begin + kWin - 1);
  const Column in_w_column = Column(in_w);
  // guard: a std::bool_constant, whether this tap's load checks the image's edges.
  // (Without kVec every tap's load_column checks as kChecked says.)
  auto tap = [&](auto guard, int k, int kw) {
    if constexpr (kVec) {
      constexpr bool kGuard = decltype(guard)::value;
      float (&slot)[kWidth] = win[(k + kWin - 1) % kWin];
      // A column left of the image wraps to a huge unsigned index: one compare
      // covers both sides.
      const bool inside = !kGuard || next_iw < in_w_column;
      if (inside) {
        Vec16<T>::load(next_column, slot);
      } else {
#pragma unroll
        for (int i = 0; i < kWidth; ++i) slot[i] = 0.0f;
      }
      transform(slot, inside);
      next_column += channels;
      ++next_iw;
    } else {
      load_column(win[(k + kWin - 1) % kWin], base_iw + kw + kWin - 1);
    }
    float wv[kWidth];
    if constexpr (kVec) {
      Vec16<T>::load_shared(w_row + kw * Tr::kBlockChannels, wv);
    } else {
#pragma unroll
      for (int i = 0; i < kWidth; ++i) wv[i] = to_float(w_row[kw * Tr::kBlockChannels + i]);
    }
#pragma unroll
    for (int t = 0; t < kTM; ++t)
#pragma unroll
      for (int i = 0; i < kWidth; ++i) acc[t][i] = fmaf(win[(k + kStride * t) % kWin][i], wv[i], acc[t][i]);
  };

#pragma unroll
  for (int j = 0; j < kWin - 1; ++j) load_column(win[j], base_iw + kw_begin + j);
  using Guarded = std::bool_constant<kChecked>;
  // Whole chunks are unrolled without a branch per tap, so the compiler can issue
  // each chunk's loads ahead of its FMAs.
  auto chunk = [&](auto guard, int kw0) {
#pragma unroll
    for (int k = 0; k < kWin; ++k) tap(guard, k, kw0 + k);
  };
  int kw0 = kw_begin;
  if constexpr (kChecked && kVec && kUnguardedInside) {
    // A checked row's chunks run guarded until all kWin loads of a chunk lie in the
    // image, then unguarded while they do, then guarded again: most of a row's taps
    // lose the compare and the select. The filter gradient runs every row checked
    // (its output-gradient "filter" is as wide as the map); there this made the fp32
    // kernel 0.92-0.96 of its time at k = 27-51 on the three paper maps (A/B in
    // docs/design-notes.md). The forward does not use it: its
    // k = 9 and 17 points took 1.10-1.26x the time (more code, more spills) for
    // 0.94-0.98 at k = 51.
    auto chunk_inside = [&] {
      const int32_t column = int32_t(next_iw);
      return column >= 0 && column + kWin <= int32_t(in_w_column);
    };
    for (; kw0 + kWin <= kw_end && !chunk_inside(); kw0 += kWin) chunk(std::true_type{}, kw0);
    for (; kw0 + kWin <= kw_end && chunk_inside(); kw0 += kWin) chunk(std::false_type{}, kw0);
  }
  for (; kw0 + kWin <= kw_end; kw0 += kWin) chunk(Guarded{}, kw0);
  // The last partial chunk: one copy of the taps, each behind a warp-uniform guard,
  // where one unrolled copy per remainder length made kWin - 1 copies (28 taps for
  // TM 8, twice: interior and checked).
  const int remainder = kw_end - kw0;
#pragma unroll
  for (int k = 0; k < kWin - 1; ++k) {
    if (k < remainder) tap(Guarded{}, k, kw0 + k);
  }
}

template <typename T, int kTM, int kStride, bool kVec, bool kPrologue, int kMinBlocksPerSM>
__global__ void __launch_bounds__(GemvFwdTraits<T>::kThreads, kMinBlocksPerSM)
dwconv_fwd_gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                       DwConvParams p, GemvFwdGrid grid, FwdEpilogue epilogue, FwdPrologue prologue) {
  using Tr = GemvFwdTraits<T>;
  constexpr int kWidth = Tr::kChannelsPerThread;
  constexpr int kRowsPerWarp = Tr::kRowsPerWarp;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* w_smem = reinterpret_cast<T*>(smem_raw);  // (2, rows_per_stage, KW, kBlockChannels): double-buffered

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = lane % Tr::kChannelGroups;
  // Segments are numbered so that the 4 of a warp share their columns and lie in 4
  // consecutive output rows: (row group of 4, segment along the row, row in group).
  // Same columns means the same padding, so the bounds path and the range of taps
  // that reach the image are warp-uniform.
  const int64_t segment = int64_t(blockIdx.x) * Tr::kSegments + warp * kRowsPerWarp + lane / Tr::kChannelGroups;
  const int64_t row_group = segment / (grid.segments_per_row * kRowsPerWarp);
  const int64_t in_group = segment % (grid.segments_per_row * kRowsPerWarp);
  const int64_t row = row_group * kRowsPerWarp + in_group % kRowsPerWarp;
  const int64_t channel_base = int64_t(blockIdx.y) * Tr::kBlockChannels;
  const int64_t c0 = channel_base + group * kWidth;
  const int64_t channels_left = p.channels - c0;
  const int channels_valid = channels_left <= 0 ? 0 : channels_left >= kWidth ? kWidth : int(channels_left);
  const bool active = row < grid.rows && channels_valid > 0;

  const int64_t ow0 = (in_group / kRowsPerWarp) * kTM;
  const int64_t oh = row % p.out_h;
  const int64_t n = row / p.out_h;
  const int64_t base_iw = ow0 * kStride - p.pad_left;
  const int kernel_w = int(p.kernel_w);
  // Every column the warp reads is inside the image: no bounds checks needed. The
  // choice is per warp, so that a warp never runs both paths (v1 decided per
  // thread; the edge warps then ran both and the block waited for them each row).
  const bool interior = __all_sync(
      0xffffffffu, !active || (base_iw >= 0 && base_iw + kernel_w - 1 + kStride * (kTM - 1) < p.in_w));
  // Taps whose kTM outputs all read padding are skipped: tap kw reads columns
  // base_iw + kw + kStride * t. At an image border this is up to half the filter.
  const int64_t first_useful = -base_iw - kStride * (kTM - 1);
  const int64_t past_useful = p.in_w - base_iw;
  int kw_begin = first_useful <= 0 ? 0 : first_useful >= kernel_w ? kernel_w : int(first_useful);
  int kw_end = past_useful <= kw_begin ? kw_begin : past_useful >= kernel_w ? kernel_w : int(past_useful);
  if (!active) kw_begin = kernel_w, kw_end = 0;
  kw_begin = int(__reduce_min_sync(0xffffffffu, unsigned(kw_begin)));
  kw_end = max(kw_begin, int(__reduce_max_sync(0xffffffffu, unsigned(kw_end))));

  ChannelAffine<kWidth> affine;
  if constexpr (kPrologue) {
    affine.activation = prologue.activation;
#pragma unroll
    for (int i = 0; i < kWidth; ++i) {
      // Channels past C are computed from channel 0's data and never stored.
      const int64_t c = i < channels_valid ? c0 + i : 0;
      affine.scale[i] = prologue.scale[c];
      affine.shift[i] = prologue.shift[c];
    }
  }

  float acc[kTM][kWidth];
#pragma unroll
  for (int t = 0; t < kTM; ++t)
#pragma unroll
    for (int i = 0; i < kWidth; ++i) acc[t][i] = 0.0f;

  // Filter rows travel in stages of grid.rows_per_stage rows, double-buffered, so
  // that small filters need one barrier pair in all and large ones few.
  const int64_t row_elems = p.kernel_w * Tr::kBlockChannels;
  const int64_t rows_per_stage = grid.rows_per_stage;
  const int64_t stages = (p.kernel_h + rows_per_stage - 1) / rows_per_stage;
  auto stage_smem = [&](int64_t stage) { return w_smem + (stage & 1) * rows_per_stage * row_elems; };
  auto stage_end = [&](int64_t stage) { return min((stage + 1) * rows_per_stage, p.kernel_h); };
  if constexpr (kVec) {
    load_filter_rows<T, kVec>(stage_smem(0), w, p, 0, stage_end(0), channel_base);
    cp_async_commit();
  }
  for (int64_t stage = 0; stage < stages; ++stage) {
    if constexpr (kVec) {
      if (stage + 1 < stages) {
        load_filter_rows<T, kVec>(stage_smem(stage + 1), w, p, (stage + 1) * rows_per_stage,
                                  stage_end(stage + 1), channel_base);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
    } else {
      load_filter_rows<T, kVec>(stage_smem(stage), w, p, stage * rows_per_stage, stage_end(stage), channel_base);
    }
    __syncthreads();
    for (int64_t kh = stage * rows_per_stage; kh < stage_end(stage); ++kh) {
      const int64_t ih = oh * p.stride_h - p.pad_top + kh * p.dilation_h;
      if (!active || ih < 0 || ih >= p.in_h) continue;
      // Channel groups past C read channel 0 instead (never stored), so that the
      // interior loads need no mask.
      const T* x_row = x + (n * p.in_h + ih) * p.in_w * p.channels + (channels_valid > 0 ? c0 : 0);
      const T* w_row = stage_smem(stage) + (kh - stage * rows_per_stage) * row_elems + group * kWidth;
      if (interior) {
        gemv_row<T, kTM, kStride, kVec, false, kPrologue>(acc, x_row, w_row, base_iw, p.in_w, p.channels,
                                                          channels_valid, 0, kernel_w, affine);
      } else {
        gemv_row<T, kTM, kStride, kVec, true, kPrologue>(acc, x_row, w_row, base_iw, p.in_w, p.channels,
                                                         channels_valid, kw_begin, kw_end, affine);
      }
    }
    // The next stage's copies overwrite the buffer this one read.
    __syncthreads();
  }

  if (!active) return;
  if (epilogue.active()) {
    float bias[kWidth] = {};
    if (epilogue.bias != nullptr) {
#pragma unroll
      for (int i = 0; i < kWidth; ++i)
        if (i < channels_valid) bias[i] = to_float(static_cast<const T*>(epilogue.bias)[c0 + i]);
    }
#pragma unroll
    for (int t = 0; t < kTM; ++t)
#pragma unroll
      for (int i = 0; i < kWidth; ++i) acc[t][i] = apply_activation(epilogue.activation, acc[t][i] + bias[i]);
  }
  T* y_base = y + ((n * p.out_h + oh) * p.out_w + ow0) * p.channels + c0;
#pragma unroll
  for (int t = 0; t < kTM; ++t) {
    if (ow0 + t >= p.out_w) break;
    T* dst = y_base + t * p.channels;
    if constexpr (kVec) {
      Vec16<T>::store_global(dst, acc[t]);
    } else {
#pragma unroll
      for (int i = 0; i < kWidth; ++i)
        if (i < channels_valid) dst[i] = from_float<T>(acc[t][i]);
    }
  }
}

}  // namespace flashdwc
