// The filter gradient's launch on the GPU: the choice of the kernels' template
// instances, the row-stream and small-filter kernels' occupancy queries, and
// run_dwconv_bwd_filter, which launches the plan of plan_bwd_filter_launch
// (plan/bwd_filter_launch.h), the tensor-core kernel through bwd_filter/mma.cu. A
// template here, instantiated once per dtype in launch_f32.cu, launch_f16.cu and
// launch_bf16.cu, so that the build compiles them side by side: the channel widths
// (1 for fp32, 4, and 8 for fp16/bf16), TMs, strides and vector variants make 72
// kernels, and with the forward launchers in one file nvcc -O3 took 441 s on one core
// (then 112 kernels); the fp32 file alone takes 69 s.
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
#include "plan/bwd_filter_launch.h"
#include "plan/fwd.h"

namespace flashdwc {

// The sizes the plan reads (plan/bwd_filter.h, plan/bwd_filter_launch.h, plan/fwd.h,
// bwd_filter/split_grid.h, bwd_filter/rowstream_grid.h).
static_assert(BwdFilterTraits<4>::kBlockChannels == kBwdFilterSplitBlockChannels);
static_assert(BwdFilterTraits<1>::kBlockChannels == bwd_filter_split_block_channels(1) &&
              BwdFilterTraits<4>::kBlockChannels == bwd_filter_split_block_channels(4) &&
              BwdFilterTraits<8>::kBlockChannels == bwd_filter_split_block_channels(8));
static_assert(BwdFilterTraits<1>::kSlots == bwd_filter_split_slots(1) &&
              BwdFilterTraits<4>::kSlots == bwd_filter_split_slots(4) &&
              BwdFilterTraits<8>::kSlots == bwd_filter_split_slots(8));
static_assert(BwdFilterTraits<1>::kThreads == kBwdFilterSplitThreads &&
              BwdFilterTraits<4>::kThreads == kBwdFilterSplitThreads &&
              BwdFilterTraits<8>::kThreads == kBwdFilterSplitThreads);
template <typename T, int kStrip>
constexpr bool rowstream_sizes_match() {
  using Tr = BwdFilterRowStreamTraits<T, kStrip>;
  return Tr::kThreads == kBwdFilterRowStreamThreads &&
         Tr::kBlockChannels == bwd_filter_rowstream_block_channels(sizeof(T)) &&
         Tr::kWorkers == kBwdFilterRowStreamWorkers && Tr::kPrefetchRows == kBwdFilterRowStreamPrefetchRows &&
         Tr::kDyRing == kBwdFilterRowStreamDyRing;
}
static_assert(rowstream_sizes_match<float, 32>() && rowstream_sizes_match<float, 64>() &&
              rowstream_sizes_match<__half, 32>() && rowstream_sizes_match<__half, 64>() &&
              rowstream_sizes_match<__nv_bfloat16, 32>() && rowstream_sizes_match<__nv_bfloat16, 64>());
static_assert(kBwdFilterChannels == kBwdFilterDirectChannels && kBwdFilterRows == kBwdFilterDirectRows);
static_assert(BwdFilterRowStreamTraits<__half, 32>::kBlockChannels == kBwdFilterRowStreamHalfBlockChannels);
static_assert(BwdFilterRowStreamTraits<float, 32>::kBlockChannels == kBwdFilterRowStreamF32BlockChannels);
static_assert(GemvFwdTraits<float>::kBlockChannels == kFwdGemvF32BlockChannels &&
              GemvFwdTraits<float>::kRowsPerWarp == kFwdGemvRowsPerWarp);

template <typename T, int kWidth, int kTM, int kStride, bool kVec, int kRows = 1>
cudaError_t launch_bwd_filter_split(const DwConvParams& p, const BwdFilterLaunchPlan& plan, const T* x, const T* dy,
                                    float* ws, cudaStream_t stream) {
  dwconv_bwd_filter_split_kernel<T, kWidth, kTM, kStride, kRows, kVec>
      <<<to_dim3(plan.launch.grid), to_dim3(plan.launch.block), 0, stream>>>(x, dy, ws, p, plan.split);
  return cudaGetLastError();
}

// A vector load needs every channel group whole (C a multiple of the width) and the
// load's alignment; the fp32 workspace rows are stored as float4 (plan.vec).
// Several filter rows per thread: stride 1 only, and only the (TM, rows) pairs that
// bwd_filter_tiling takes (bwd_filter_width1_rows).
template <typename T, int kWidth, int kTM>
cudaError_t launch_bwd_filter_split_tm(const DwConvParams& p, const BwdFilterLaunchPlan& plan, const T* x,
                                       const T* dy, float* ws, cudaStream_t stream) {
  if constexpr (kWidth == 1) {  // one element per lane: no vector variant
    constexpr int kRows = bwd_filter_width1_rows(kTM);
    if constexpr (kRows > 1) {
      if (plan.tiling.rows == kRows) {
        return launch_bwd_filter_split<T, kWidth, kTM, 1, false, kRows>(p, plan, x, dy, ws, stream);
      }
    }
    if (plan.tiling.rows != 1) return cudaErrorInvalidValue;  // a tiling without a kernel instance
    return p.stride_w == 1 ? launch_bwd_filter_split<T, kWidth, kTM, 1, false>(p, plan, x, dy, ws, stream)
                           : launch_bwd_filter_split<T, kWidth, kTM, 2, false>(p, plan, x, dy, ws, stream);
  } else {  // (an else, so that width 1 instantiates no vector kernels it never launches)
    if (p.stride_w == 1) {
      return plan.vec ? launch_bwd_filter_split<T, kWidth, kTM, 1, true>(p, plan, x, dy, ws, stream)
                      : launch_bwd_filter_split<T, kWidth, kTM, 1, false>(p, plan, x, dy, ws, stream);
    }
    return plan.vec ? launch_bwd_filter_split<T, kWidth, kTM, 2, true>(p, plan, x, dy, ws, stream)
                    : launch_bwd_filter_split<T, kWidth, kTM, 2, false>(p, plan, x, dy, ws, stream);
  }
}

template <typename T>
cudaError_t launch_bwd_filter_split_tiling(const DwConvParams& p, const BwdFilterLaunchPlan& plan, const T* x,
                                           const T* dy, float* ws, cudaStream_t stream) {
  const BwdFilterTiling& tiling = plan.tiling;
  if constexpr (std::is_same_v<T, float>) {  // width 1 is fp32's alone (bwd_filter_tiling)
    if (tiling.width == 1) {
      switch (tiling.tm) {
        case 9: return launch_bwd_filter_split_tm<T, 1, 9>(p, plan, x, dy, ws, stream);
        case 11: return launch_bwd_filter_split_tm<T, 1, 11>(p, plan, x, dy, ws, stream);
        case 13: return launch_bwd_filter_split_tm<T, 1, 13>(p, plan, x, dy, ws, stream);
        default: return launch_bwd_filter_split_tm<T, 1, 16>(p, plan, x, dy, ws, stream);
      }
    }
  } else {
    if (tiling.width == 8) {
      return tiling.tm == 3 ? launch_bwd_filter_split_tm<T, 8, 3>(p, plan, x, dy, ws, stream)
                            : launch_bwd_filter_split_tm<T, 8, 4>(p, plan, x, dy, ws, stream);
    }
  }
  switch (tiling.tm) {
    case 4: return launch_bwd_filter_split_tm<T, 4, 4>(p, plan, x, dy, ws, stream);
    case 5: return launch_bwd_filter_split_tm<T, 4, 5>(p, plan, x, dy, ws, stream);
    case 7: return launch_bwd_filter_split_tm<T, 4, 7>(p, plan, x, dy, ws, stream);
    default: return launch_bwd_filter_split_tm<T, 4, 8>(p, plan, x, dy, ws, stream);
  }
}

template <bool kVec>
cudaError_t launch_bwd_filter_gemv(const DwConvParams& p, const BwdFilterLaunchPlan& plan, const float* x,
                                   const float* dy, float* ws, cudaStream_t stream) {
  auto kernel = dwconv_bwd_filter_gemv_kernel<float, kBwdFilterGemvTM, kVec>;
  const size_t smem = size_t(plan.launch.smem_bytes);
  if (cudaError_t err = allow_dynamic_smem(kernel, smem); err != cudaSuccess) return err;
  kernel<<<to_dim3(plan.launch.grid), to_dim3(plan.launch.block), smem, stream>>>(x, dy, ws, bwd_filter_as_fwd(p),
                                                                                   plan.gemv);
  return cudaGetLastError();
}

// The row runs (bwd_filter_rowstream_runs) fill the device's resident blocks of the
// kernel instance, which its occupancy says.
template <typename T, int kStrip, int kKW>
cudaError_t launch_bwd_filter_rowstream(const DwConvParams& p, const BwdFilterLaunchPlan& plan, const T* x,
                                        const T* dy, float* ws, cudaStream_t stream) {
  BwdFilterRowStreamGrid grid = plan.rowstream;
  const size_t smem = size_t(plan.launch.smem_bytes);
  auto kernel = dwconv_bwd_filter_rowstream_kernel<T, kStrip, kKW>;
  if (cudaError_t err = allow_dynamic_smem(kernel, smem); err != cudaSuccess) return err;
  int per_sm = 0;
  if (cudaError_t err =
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, int(plan.launch.block.x), smem);
      err != cudaSuccess) {
    return err;
  }
  // Where the device cannot be queried, about the H200's count at k = 3.
  const int64_t resident = per_sm * plan.sms;
  const int64_t runs = bwd_filter_rowstream_runs(grid.sequence_rows, grid.strips * grid.channel_blocks,
                                                 resident > 0 ? resident : 396);
  grid.rows_per_block = (grid.sequence_rows + runs - 1) / runs;
  grid.row_blocks = (grid.sequence_rows + grid.rows_per_block - 1) / grid.rows_per_block;
  const unsigned blocks = unsigned(grid.row_blocks * grid.strips * grid.channel_blocks);
  kernel<<<blocks, to_dim3(plan.launch.block), smem, stream>>>(x, dy, ws, p, grid);
  return cudaGetLastError();
}

template <typename T, int kStrip>
cudaError_t launch_bwd_filter_rowstream_strip(const DwConvParams& p, const BwdFilterLaunchPlan& plan, const T* x,
                                              const T* dy, float* ws, cudaStream_t stream) {
  switch (plan.kernel_w) {
    case 3: return launch_bwd_filter_rowstream<T, kStrip, 3>(p, plan, x, dy, ws, stream);
    case 5: return launch_bwd_filter_rowstream<T, kStrip, 5>(p, plan, x, dy, ws, stream);
    default: return launch_bwd_filter_rowstream<T, kStrip, 7>(p, plan, x, dy, ws, stream);
  }
}

// Small-filter blocks (bwd_filter/small.cuh): every (channel block, column block) runs
// the image sequence in equal runs, as many as fill the device's resident blocks
// once, each at least kBwdFilterSmallMinRunSteps steps (bwd_filter/small_grid.h). The
// plan's grid, at 3 blocks an SM, sets the shared memory; the runs are redone here at
// the kernel's occupancy.
template <typename T, int kK, int kStride>
cudaError_t launch_bwd_filter_small(const DwConvParams& p, const BwdFilterLaunchPlan& plan, const T* x, const T* dy,
                                    float* ws, cudaStream_t stream) {
  using Tr = BwdFilterSmallTraits<T, kK, kStride>;
  auto kernel = dwconv_bwd_filter_small_kernel<T, kK, kStride>;
  const size_t smem = size_t(plan.launch.smem_bytes);
  if (cudaError_t err = allow_dynamic_smem(kernel, smem); err != cudaSuccess) return err;
  int per_sm = 0;
  if (cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Tr::kThreads, smem);
      err != cudaSuccess) {
    return err;
  }
  const BwdFilterSmallGrid grid =
      make_bwd_filter_small_grid(p, Tr::kWidth, int(sizeof(T)), int64_t(std::max(per_sm, 1)) * plan.sms);
  const unsigned blocks = unsigned(grid.runs * grid.col_blocks * grid.channel_blocks);
  kernel<<<blocks, Tr::kThreads, smem, stream>>>(x, dy, ws, p, grid);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_bwd_filter_small_shape(const DwConvParams& p, const BwdFilterLaunchPlan& plan, const T* x,
                                          const T* dy, float* ws, cudaStream_t stream) {
  if (p.kernel_w == 3) {
    return p.stride_w == 1 ? launch_bwd_filter_small<T, 3, 1>(p, plan, x, dy, ws, stream)
                           : launch_bwd_filter_small<T, 3, 2>(p, plan, x, dy, ws, stream);
  }
  return p.stride_w == 1 ? launch_bwd_filter_small<T, 5, 1>(p, plan, x, dy, ws, stream)
                         : launch_bwd_filter_small<T, 5, 2>(p, plan, x, dy, ws, stream);
}

template <typename T>
cudaError_t run_dwconv_bwd_filter(const DwConvParams& p, const T* x, const T* dy, T* dw, float* workspace,
                                  bool deterministic, cudaStream_t stream) {
  BwdFilterCall call;
  call.half_precision = !std::is_same_v<T, float>;
  call.deterministic = deterministic;
  call.x_align = address_alignment(x);
  call.dy_align = address_alignment(dy);
  call.workspace_align = address_alignment(workspace);
  const BwdFilterLaunchPlan plan = plan_bwd_filter_launch(p, call, device_limits());
  if (plan.kernel == BwdFilterKernel::kDirect) {
    dwconv_bwd_filter_direct_kernel<T>
        <<<to_dim3(plan.launch.grid), to_dim3(plan.launch.block), 0, stream>>>(x, dy, dw, p);
    return cudaGetLastError();
  }
  if (plan.zero_workspace) {
    if (cudaError_t err = cudaMemsetAsync(workspace, 0, plan.count * sizeof(float), stream); err != cudaSuccess) {
      return err;
    }
  }
  cudaError_t err = cudaSuccess;
  if (plan.kernel == BwdFilterKernel::kMma) {
    if constexpr (!std::is_same_v<T, float>) err = launch_bwd_filter_mma<T>(p, plan, x, dy, workspace, stream);
  } else if (plan.kernel == BwdFilterKernel::kGemv) {
    if constexpr (std::is_same_v<T, float>) {
      err = plan.vec ? launch_bwd_filter_gemv<true>(p, plan, x, dy, workspace, stream)
                     : launch_bwd_filter_gemv<false>(p, plan, x, dy, workspace, stream);
    }
  } else if (plan.kernel == BwdFilterKernel::kSmall) {
    err = launch_bwd_filter_small_shape<T>(p, plan, x, dy, workspace, stream);
  } else if (plan.kernel == BwdFilterKernel::kRowStream) {
    err = plan.strip == kBwdFilterRowStreamNarrowStrip
              ? launch_bwd_filter_rowstream_strip<T, kBwdFilterRowStreamNarrowStrip>(p, plan, x, dy, workspace, stream)
              : launch_bwd_filter_rowstream_strip<T, 2 * kBwdFilterRowStreamNarrowStrip>(p, plan, x, dy, workspace,
                                                                                         stream);
  } else {
    err = launch_bwd_filter_split_tiling<T>(p, plan, x, dy, workspace, stream);
  }
  if (err != cudaSuccess) return err;
  dwconv_bwd_filter_finalize_kernel<T><<<to_dim3(plan.finalize.grid), to_dim3(plan.finalize.block), 0, stream>>>(
      workspace, dw, plan.count, plan.slices);
  return cudaGetLastError();
}

}  // namespace flashdwc
