// The filter gradient's launch on the GPU: the split, row-stream and GEMV kernels'
// grids, the choice of their template instances, and run_dwconv_bwd_filter, which
// runs the kernel plan_bwd_filter (plan/bwd_filter.h) picks, the tensor-core one
// through bwd_filter/mma.cu. A template here, instantiated once per dtype in
// launch_f32.cu, launch_f16.cu and launch_bf16.cu, so that the build compiles them
// side by side: the channel widths (1 for fp32, 4, and 8 for fp16/bf16), TMs, strides
// and vector variants make 72 kernels, and with the forward launchers in one file
// nvcc -O3 took 441 s on one core (then 112 kernels); the fp32 file alone takes 69 s.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "bwd_filter/direct.cuh"
#include "bwd_filter/gemv.cuh"
#include "bwd_filter/launch.h"
#include "bwd_filter/mma.h"
#include "bwd_filter/rowstream.cuh"
#include "bwd_filter/small.cuh"
#include "bwd_filter/split.cuh"
#include "common/launch.cuh"
#include "plan/bwd_filter.h"
#include "plan/fwd.h"

namespace flashdwc {

// The sizes the plan's checks read (plan/bwd_filter.h, plan/fwd.h).
static_assert(BwdFilterTraits<4>::kBlockChannels == kBwdFilterSplitBlockChannels);
static_assert(BwdFilterRowStreamTraits<__half, 32>::kBlockChannels == kBwdFilterRowStreamHalfBlockChannels);
static_assert(BwdFilterRowStreamTraits<float, 32>::kBlockChannels == kBwdFilterRowStreamF32BlockChannels);
static_assert(GemvFwdTraits<float>::kBlockChannels == kFwdGemvF32BlockChannels &&
              GemvFwdTraits<float>::kRowsPerWarp == kFwdGemvRowsPerWarp);

// Blocks the split kernel aims for: 4 waves of 132 SMs x 4 resident blocks, so
// that the last wave's tail costs little. Z (the chunks of the N * Ho rows) is
// what brings a small filter's grid up to it.
inline constexpr int64_t kBwdFilterTargetBlocks = 2048;
// Deterministic mode keeps one fp32 slice of the filter per chunk; Z is lowered
// until the slices fit in this.
inline constexpr int64_t kBwdFilterMaxWorkspaceBytes = int64_t(256) << 20;

inline BwdFilterGrid make_bwd_filter_grid(const DwConvParams& p, const BwdFilterTiling& tiling,
                                          bool deterministic) {
  const int tm = tiling.tm;
  const int64_t block_channels =
      tiling.width == 8 ? BwdFilterTraits<8>::kBlockChannels : BwdFilterTraits<4>::kBlockChannels;
  static_assert(BwdFilterTraits<1>::kBlockChannels == BwdFilterTraits<4>::kBlockChannels);
  const int kSlots = tiling.width == 1 ? BwdFilterTraits<1>::kSlots : BwdFilterTraits<4>::kSlots;
  static_assert(BwdFilterTraits<4>::kSlots == BwdFilterTraits<8>::kSlots, "widths 4 and 8 have 16 slots");
  BwdFilterGrid g;
  g.kw_tiles = (p.kernel_w + tm - 1) / tm;
  g.tiles = (p.kernel_h + tiling.rows - 1) / tiling.rows * g.kw_tiles;
  g.tiles_per_block = int(std::min<int64_t>(kSlots, g.tiles));
  g.lanes = kSlots / g.tiles_per_block;
  g.rows_per_image = p.out_h + tiling.rows - 1;
  g.rows = p.batch * g.rows_per_image;
  const int64_t blocks_xy = ((g.tiles + g.tiles_per_block - 1) / g.tiles_per_block) *
                            ((p.channels + block_channels - 1) / block_channels);
  const int64_t slice_bytes = p.kernel_h * p.kernel_w * p.channels * int64_t(sizeof(float));
  int64_t splits = (kBwdFilterTargetBlocks + blocks_xy - 1) / blocks_xy;
  splits = std::min(splits, (g.rows + g.lanes - 1) / g.lanes);  // at least one row per lane
  if (deterministic) splits = std::min(splits, kBwdFilterMaxWorkspaceBytes / slice_bytes);
  splits = std::clamp<int64_t>(splits, 1, 65535);
  g.rows_per_split = (g.rows + splits - 1) / splits;
  g.atomic = !deterministic;
  return g;
}

inline int64_t bwd_filter_splits(const BwdFilterGrid& g) {
  return (g.rows + g.rows_per_split - 1) / g.rows_per_split;
}

template <typename T, int kWidth, int kTM, int kStride, bool kVec, int kRows = 1>
cudaError_t launch_bwd_filter_split(const DwConvParams& p, const BwdFilterGrid& g, const T* x, const T* dy,
                                    float* ws, cudaStream_t stream) {
  using Tr = BwdFilterTraits<kWidth>;
  const dim3 blocks(unsigned((g.tiles + g.tiles_per_block - 1) / g.tiles_per_block),
                    unsigned((p.channels + Tr::kBlockChannels - 1) / Tr::kBlockChannels),
                    unsigned(bwd_filter_splits(g)));
  dwconv_bwd_filter_split_kernel<T, kWidth, kTM, kStride, kRows, kVec>
      <<<blocks, Tr::kThreads, 0, stream>>>(x, dy, ws, p, g);
  return cudaGetLastError();
}

// A vector load needs every channel group whole (C a multiple of the width) and the
// load's alignment; the fp32 workspace rows are stored as float4.
// Several filter rows per thread: stride 1 only, and only the (TM, rows) pairs that
// bwd_filter_tiling takes (bwd_filter_width1_rows).
template <typename T, int kWidth, int kTM>
cudaError_t launch_bwd_filter_split_tm(const DwConvParams& p, const BwdFilterTiling& tiling, const BwdFilterGrid& g,
                                       const T* x, const T* dy, float* ws, cudaStream_t stream) {
  if constexpr (kWidth == 1) {  // one element per lane: no vector variant
    constexpr int kRows = bwd_filter_width1_rows(kTM);
    if constexpr (kRows > 1) {
      if (tiling.rows == kRows) {
        return launch_bwd_filter_split<T, kWidth, kTM, 1, false, kRows>(p, g, x, dy, ws, stream);
      }
    }
    if (tiling.rows != 1) return cudaErrorInvalidValue;  // a tiling without a kernel instance
    return p.stride_w == 1 ? launch_bwd_filter_split<T, kWidth, kTM, 1, false>(p, g, x, dy, ws, stream)
                           : launch_bwd_filter_split<T, kWidth, kTM, 2, false>(p, g, x, dy, ws, stream);
  } else {  // (an else, so that width 1 instantiates no vector kernels it never launches)
    constexpr size_t kLoadBytes = kWidth * sizeof(T);
    const bool vec =
        p.channels % kWidth == 0 && aligned(x, kLoadBytes) && aligned(dy, kLoadBytes) && aligned(ws, 16);
    if (p.stride_w == 1) {
      return vec ? launch_bwd_filter_split<T, kWidth, kTM, 1, true>(p, g, x, dy, ws, stream)
                 : launch_bwd_filter_split<T, kWidth, kTM, 1, false>(p, g, x, dy, ws, stream);
    }
    return vec ? launch_bwd_filter_split<T, kWidth, kTM, 2, true>(p, g, x, dy, ws, stream)
               : launch_bwd_filter_split<T, kWidth, kTM, 2, false>(p, g, x, dy, ws, stream);
  }
}

template <typename T>
cudaError_t launch_bwd_filter_split_tiling(const DwConvParams& p, const BwdFilterTiling& tiling,
                                           const BwdFilterGrid& g, const T* x, const T* dy, float* ws,
                                           cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {  // width 1 is fp32's alone (bwd_filter_tiling)
    if (tiling.width == 1) {
      switch (tiling.tm) {
        case 9: return launch_bwd_filter_split_tm<T, 1, 9>(p, tiling, g, x, dy, ws, stream);
        case 11: return launch_bwd_filter_split_tm<T, 1, 11>(p, tiling, g, x, dy, ws, stream);
        case 13: return launch_bwd_filter_split_tm<T, 1, 13>(p, tiling, g, x, dy, ws, stream);
        default: return launch_bwd_filter_split_tm<T, 1, 16>(p, tiling, g, x, dy, ws, stream);
      }
    }
  } else {
    if (tiling.width == 8) {
      return tiling.tm == 3 ? launch_bwd_filter_split_tm<T, 8, 3>(p, tiling, g, x, dy, ws, stream)
                            : launch_bwd_filter_split_tm<T, 8, 4>(p, tiling, g, x, dy, ws, stream);
    }
  }
  switch (tiling.tm) {
    case 4: return launch_bwd_filter_split_tm<T, 4, 4>(p, tiling, g, x, dy, ws, stream);
    case 5: return launch_bwd_filter_split_tm<T, 4, 5>(p, tiling, g, x, dy, ws, stream);
    case 7: return launch_bwd_filter_split_tm<T, 4, 7>(p, tiling, g, x, dy, ws, stream);
    default: return launch_bwd_filter_split_tm<T, 4, 8>(p, tiling, g, x, dy, ws, stream);
  }
}

// dy bytes a pipeline stage of the GEMV filter gradient holds, as the forward GEMV
// kernel's filter stage (fwd/launch.cu); its TM and widest dy row are in
// plan/bwd_filter.h.
inline constexpr int64_t kBwdFilterGemvStageBytes = 16 * 1024;

// Blocks along the KH x KW outputs (grid.x): row groups of kRowsPerWarp rows, each
// in segment_blocks blocks of `warps` segments.
inline int64_t bwd_filter_gemv_row_blocks(const DwConvParams& p, const BwdFilterGemvGrid& g) {
  return (p.kernel_h + GemvFwdTraits<float>::kRowsPerWarp - 1) / GemvFwdTraits<float>::kRowsPerWarp *
         g.segment_blocks;
}

// Chunks of images (grid.z): enough blocks for kBwdFilterTargetBlocks, and at
// least as many as leave each block kBwdFilterGemvMergeTaps dy taps an output (its
// images times Ho x Wo) between two atomic merges; or in deterministic mode exactly
// `deterministic_slices`, the split grid's count the workspace was sized for (chunks
// past the last image store zeros).
//
// Why the second bound: blocks differ in length (an edge row group skips the dy rows
// that meet only padding, about 83% of a centre one's at fp32 128^4 k = 51), and with
// 4 images a block the 1664 blocks there ran in 6.3 waves of the 264 resident. A
// greedy model of the block scheduler (benchmarks/cuda/bwd_filter_gemv_waves_model.py,
// not a measurement) puts that grid at 90% busy, and at 98% with one image a block.
// At 8192 taps a merge is one atomicAdd per 16384 FLOPs of the block's own sums.
inline constexpr int64_t kBwdFilterGemvMergeTaps = 8192;

inline BwdFilterGemvGrid make_bwd_filter_gemv_grid(const DwConvParams& p, int64_t deterministic_slices) {
  using Tr = GemvFwdTraits<float>;
  BwdFilterGemvGrid g;
  g.segments_per_row = (p.kernel_w + kBwdFilterGemvTM - 1) / kBwdFilterGemvTM;
  g.warps = int(std::clamp<int64_t>(g.segments_per_row, 1, kBwdFilterGemvMaxWarps));
  g.segment_blocks = (g.segments_per_row + g.warps - 1) / g.warps;
  const int64_t row_bytes = p.out_w * Tr::kBlockChannels * int64_t(sizeof(float));
  // (An empty batch or dy runs no stage: every block stores or adds zeros.)
  g.rows_per_stage = std::max<int64_t>(std::min(kBwdFilterGemvStageBytes / row_bytes, p.out_h), 1);
  g.stages_per_image = (p.out_h + g.rows_per_stage - 1) / g.rows_per_stage;
  const int64_t blocks_xy =
      bwd_filter_gemv_row_blocks(p, g) * ((p.channels + Tr::kBlockChannels - 1) / Tr::kBlockChannels);
  const int64_t taps = std::max<int64_t>(p.out_h * p.out_w, 1);
  const int64_t images_per_merge = (kBwdFilterGemvMergeTaps + taps - 1) / taps;
  const int64_t wanted = std::max((kBwdFilterTargetBlocks + blocks_xy - 1) / blocks_xy,
                                  (p.batch + images_per_merge - 1) / images_per_merge);
  const int64_t chunks = deterministic_slices > 0
                             ? deterministic_slices
                             : std::max<int64_t>(std::min<int64_t>({wanted, p.batch, 65535}), 1);
  g.images_per_chunk = std::max<int64_t>((p.batch + chunks - 1) / chunks, 1);
  g.atomic = deterministic_slices == 0;
  return g;
}

template <bool kVec>
cudaError_t launch_bwd_filter_gemv(const DwConvParams& p, const float* x, const float* dy, float* ws,
                                   int64_t deterministic_slices, cudaStream_t stream) {
  using Tr = GemvFwdTraits<float>;
  const BwdFilterGemvGrid g = make_bwd_filter_gemv_grid(p, deterministic_slices);
  const int64_t chunks =
      g.atomic ? std::max<int64_t>((p.batch + g.images_per_chunk - 1) / g.images_per_chunk, 1) : deterministic_slices;
  const size_t smem = 2 * size_t(g.rows_per_stage * p.out_w * Tr::kBlockChannels) * sizeof(float);
  auto kernel = dwconv_bwd_filter_gemv_kernel<float, kBwdFilterGemvTM, kVec>;
  if (cudaError_t err = allow_dynamic_smem(kernel, smem); err != cudaSuccess) return err;
  const dim3 blocks(unsigned(bwd_filter_gemv_row_blocks(p, g)),
                    unsigned((p.channels + Tr::kBlockChannels - 1) / Tr::kBlockChannels), unsigned(chunks));
  kernel<<<blocks, unsigned(32 * g.warps), smem, stream>>>(x, dy, ws, bwd_filter_as_fwd(p), g);
  return cudaGetLastError();
}

// Row-stream blocks: strips of 64 output columns, or 32 where the output is at most
// 32 wide (so that a narrow map does not leave half of every strip idle), each taking
// an equal run of the image sequence's rows (bwd_filter/rowstream.cuh), as many runs
// per strip and channel block as fill every SM's resident blocks once. Before, runs
// stayed inside one image, about 2048 blocks: 5.2 waves of the 396 resident at fp32
// k = 3 on 128x128x128x128 and 128x64x64x256 on the H200, and 1.9 on 64x56x56x96.
// Kernel-level A/B on the H200, both kernels with their copy
// offsets set once: one wave took 0.95 / 0.91 of the time at fp32 k = 3 on those two
// maps, 0.84 on 64x56x56x96, 0.92-1.00 at k = 5 and 7 and bf16 k = 3 and 5, but
// 1.01-1.09 on 128x32x32x1024 (10.3 waves before, the 6 rows between two images at
// k = 7 a sixth of each image's 38). A run is at least 16 rows, so that the KH - 1
// halo rows it copies twice stay a small fraction.
inline constexpr int64_t kBwdFilterRowStreamMinRows = 16;

// The blocks of the launch: channel blocks vary fastest, then strips, then runs.
inline int64_t bwd_filter_rowstream_runs(int64_t sequence_rows, int64_t strips_and_channel_blocks,
                                         int64_t resident_blocks) {
  const int64_t runs = std::max<int64_t>(resident_blocks / std::max<int64_t>(strips_and_channel_blocks, 1), 1);
  return std::min(runs, std::max<int64_t>(sequence_rows / kBwdFilterRowStreamMinRows, 1));
}

template <typename T, int kStrip, int kKW>
cudaError_t launch_bwd_filter_rowstream(const DwConvParams& p, const T* x, const T* dy, float* ws,
                                        cudaStream_t stream) {
  using Tr = BwdFilterRowStreamTraits<T, kStrip>;
  BwdFilterRowStreamGrid grid;
  grid.strips = (p.out_w + kStrip - 1) / kStrip;
  grid.channel_blocks = (p.channels + Tr::kBlockChannels - 1) / Tr::kBlockChannels;
  grid.image_rows = int(p.out_h + p.kernel_h - 1);
  grid.sequence_rows = p.batch * grid.image_rows - (p.kernel_h - 1);
  grid.x_ring = int(p.kernel_h) + Tr::kPrefetchRows;
  grid.segments = Tr::kWorkers / int(p.kernel_h);
  const size_t smem = size_t(bwd_filter_rowstream_smem_bytes<T, kStrip, kKW>(p.kernel_h));
  auto kernel = dwconv_bwd_filter_rowstream_kernel<T, kStrip, kKW>;
  if (cudaError_t err = allow_dynamic_smem(kernel, smem); err != cudaSuccess) return err;
  int per_sm = 0;
  if (cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Tr::kThreads, smem);
      err != cudaSuccess) {
    return err;
  }
  // Where the device cannot be queried, about the H200's count at k = 3.
  const int64_t resident = per_sm * device_limits().sms;
  const int64_t runs = bwd_filter_rowstream_runs(grid.sequence_rows, grid.strips * grid.channel_blocks,
                                                 resident > 0 ? resident : 396);
  grid.rows_per_block = (grid.sequence_rows + runs - 1) / runs;
  grid.row_blocks = (grid.sequence_rows + grid.rows_per_block - 1) / grid.rows_per_block;
  const unsigned blocks = unsigned(grid.row_blocks * grid.strips * grid.channel_blocks);
  kernel<<<blocks, Tr::kThreads, smem, stream>>>(x, dy, ws, p, grid);
  return cudaGetLastError();
}

template <typename T, int kStrip>
cudaError_t launch_bwd_filter_rowstream_strip(const DwConvParams& p, const T* x, const T* dy, float* ws,
                                              cudaStream_t stream) {
  switch (p.kernel_w) {
    case 3: return launch_bwd_filter_rowstream<T, kStrip, 3>(p, x, dy, ws, stream);
    case 5: return launch_bwd_filter_rowstream<T, kStrip, 5>(p, x, dy, ws, stream);
    default: return launch_bwd_filter_rowstream<T, kStrip, 7>(p, x, dy, ws, stream);
  }
}

// Small-filter blocks (bwd_filter/small.cuh): every (channel block, column block) runs
// the image sequence in equal runs, as many as fill the device's resident blocks
// once, each at least kBwdFilterSmallMinRunSteps steps (bwd_filter/small_grid.h).
template <typename T, int kK, int kStride>
cudaError_t launch_bwd_filter_small(const DwConvParams& p, const T* x, const T* dy, float* ws, cudaStream_t stream) {
  using Tr = BwdFilterSmallTraits<T, kK, kStride>;
  auto kernel = dwconv_bwd_filter_small_kernel<T, kK, kStride>;
  // The shared memory depends on the block split, which depends on the resident
  // blocks only through the run count: the split is taken first at 3 blocks an SM.
  const int device_sms = device_limits().sms;
  const int sms = device_sms > 0 ? device_sms : 132;  // where the device cannot be queried, an H100's
  BwdFilterSmallGrid grid = make_bwd_filter_small_grid(p, Tr::kWidth, int(sizeof(T)), int64_t(sms) * 3);
  const size_t smem = size_t(grid.smem_bytes);
  if (cudaError_t err = allow_dynamic_smem(kernel, smem); err != cudaSuccess) return err;
  int per_sm = 0;
  if (cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Tr::kThreads, smem);
      err != cudaSuccess) {
    return err;
  }
  grid = make_bwd_filter_small_grid(p, Tr::kWidth, int(sizeof(T)), int64_t(std::max(per_sm, 1)) * sms);
  const unsigned blocks = unsigned(grid.runs * grid.col_blocks * grid.channel_blocks);
  kernel<<<blocks, Tr::kThreads, smem, stream>>>(x, dy, ws, p, grid);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_bwd_filter_small_shape(const DwConvParams& p, const T* x, const T* dy, float* ws,
                                          cudaStream_t stream) {
  if (p.kernel_w == 3) {
    return p.stride_w == 1 ? launch_bwd_filter_small<T, 3, 1>(p, x, dy, ws, stream)
                           : launch_bwd_filter_small<T, 3, 2>(p, x, dy, ws, stream);
  }
  return p.stride_w == 1 ? launch_bwd_filter_small<T, 5, 1>(p, x, dy, ws, stream)
                         : launch_bwd_filter_small<T, 5, 2>(p, x, dy, ws, stream);
}

template <typename T>
cudaError_t run_dwconv_bwd_filter(const DwConvParams& p, const T* x, const T* dy, T* dw, float* workspace,
                                  bool deterministic, cudaStream_t stream) {
  BwdFilterKernel kernel = plan_bwd_filter(p, !std::is_same_v<T, float>, deterministic, device_limits());
  // The row-stream kernel's 16-byte copies need aligned buffers (XLA's are; a caller
  // of this function may pass others).
  if (kernel == BwdFilterKernel::kRowStream && !(aligned(x, 16) && aligned(dy, 16))) {
    kernel = BwdFilterKernel::kSplit;
  }
  if (kernel == BwdFilterKernel::kSmall) {
    const size_t copy_bytes = bwd_filter_small_width(!std::is_same_v<T, float>, p.kernel_w) * sizeof(T);
    if (!(aligned(x, copy_bytes) && aligned(dy, copy_bytes))) kernel = BwdFilterKernel::kSplit;
  }
  if (kernel == BwdFilterKernel::kDirect) {
    const dim3 grid(unsigned(p.kernel_h * p.kernel_w),
                    unsigned((p.channels + kBwdFilterChannels - 1) / kBwdFilterChannels));
    const dim3 block(kBwdFilterChannels, kBwdFilterRows);
    dwconv_bwd_filter_direct_kernel<T><<<grid, block, 0, stream>>>(x, dy, dw, p);
    return cudaGetLastError();
  }
  const int64_t count = p.kernel_h * p.kernel_w * p.channels;
  if (!deterministic) {
    if (cudaError_t err = cudaMemsetAsync(workspace, 0, count * sizeof(float), stream); err != cudaSuccess) {
      return err;
    }
  }
  // The split kernel's grid also sets the deterministic slice count of the
  // tensor-core kernel: the workspace was sized for it (bwd_filter_workspace_bytes).
  const BwdFilterTiling tiling = bwd_filter_tiling(p, !std::is_same_v<T, float>);
  const BwdFilterGrid g = make_bwd_filter_grid(p, tiling, deterministic);
  const int64_t slices = g.atomic ? 1 : bwd_filter_splits(g);
  cudaError_t err = cudaSuccess;
  if (kernel == BwdFilterKernel::kMma) {
    if constexpr (!std::is_same_v<T, float>) {
      err = launch_bwd_filter_mma<T>(p, x, dy, workspace, g.atomic ? 0 : slices, stream);
    }
  } else if (kernel == BwdFilterKernel::kGemv) {
    if constexpr (std::is_same_v<T, float>) {
      const int64_t deterministic_slices = g.atomic ? 0 : slices;
      err = p.channels % 4 == 0 && aligned(x, 16) && aligned(dy, 16)
                ? launch_bwd_filter_gemv<true>(p, x, dy, workspace, deterministic_slices, stream)
                : launch_bwd_filter_gemv<false>(p, x, dy, workspace, deterministic_slices, stream);
    }
  } else if (kernel == BwdFilterKernel::kSmall) {  // atomic mode only: one slice
    err = launch_bwd_filter_small_shape<T>(p, x, dy, workspace, stream);
  } else if (kernel == BwdFilterKernel::kRowStream) {  // atomic mode only: one slice
    err = p.out_w <= kBwdFilterRowStreamNarrowStrip
              ? launch_bwd_filter_rowstream_strip<T, kBwdFilterRowStreamNarrowStrip>(p, x, dy, workspace, stream)
              : launch_bwd_filter_rowstream_strip<T, 2 * kBwdFilterRowStreamNarrowStrip>(p, x, dy, workspace,
                                                                                         stream);
  } else {
    err = launch_bwd_filter_split_tiling<T>(p, tiling, g, x, dy, workspace, stream);
  }
  if (err != cudaSuccess) return err;
  dwconv_bwd_filter_finalize_kernel<T><<<direct_grid(count), kDirectThreads, 0, stream>>>(workspace, dw, count,
                                                                                          slices);
  return cudaGetLastError();
}

}  // namespace flashdwc
