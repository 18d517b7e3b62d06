// How the filter gradient runs one call: the kernel plan_bwd_filter
// (plan/bwd_filter.h) picks, after what the call's buffers allow, with the launch
// configuration of the kernel, of the workspace zeroing and of the finalize kernel,
// and the kernel's tiling. bwd_filter/launch.cuh and bwd_filter/mma.cu only read it
// and launch; the row-stream and small-filter kernels' row runs depend on their
// occupancy (cudaOccupancyMaxActiveBlocksPerMultiprocessor), which their launchers
// query and complete the plan with. Host code only.
#pragma once

#include <cstdint>

#include "bwd_filter/gemv_grid.h"
#include "bwd_filter/mma_layout.h"
#include "bwd_filter/rowstream_grid.h"
#include "bwd_filter/small_grid.h"
#include "bwd_filter/split_grid.h"
#include "common/params.h"
#include "plan/bwd_filter.h"
#include "plan/device_limits.h"
#include "plan/launch_config.h"

namespace flashdwc {

// What the plan reads of a call beyond the problem: each buffer's address_alignment
// (plan/launch_config.h).
struct BwdFilterCall {
  bool half_precision = false;  // fp16 or bf16
  bool deterministic = false;   // bit-identical results across runs (no atomics)
  int64_t x_align = 16, dy_align = 16, workspace_align = 16;
};

// The direct kernel's block: 32 channels by 8 rows of positions.
inline constexpr int kBwdFilterDirectChannels = 32;
inline constexpr int kBwdFilterDirectRows = 8;

// The split kernel's grid: tiles of the filter across blocks, chunks of the N x Ho
// rows across blockIdx.z; in deterministic mode the chunk count also sets the
// workspace's slices (bwd_filter_workspace_bytes).
BwdFilterGrid make_bwd_filter_grid(const DwConvParams& p, const BwdFilterTiling& tiling, bool deterministic);
// The GEMV kernel's grid; deterministic_slices > 0: that many image chunks (the split
// grid's count, which the workspace was sized for), else atomic merges.
BwdFilterGemvGrid make_bwd_filter_gemv_grid(const DwConvParams& p, int64_t deterministic_slices);
// Blocks along the KH x KW outputs (grid.x) of the GEMV kernel.
int64_t bwd_filter_gemv_row_blocks(const DwConvParams& p, const BwdFilterGemvGrid& g);
// Row-stream runs a strip and channel block: as many as fill the resident blocks
// once, each at least kBwdFilterRowStreamMinRows sequence rows.
int64_t bwd_filter_rowstream_runs(int64_t sequence_rows, int64_t strips_and_channel_blocks, int64_t resident_blocks);

struct BwdFilterLaunchPlan {
  BwdFilterKernel kernel = BwdFilterKernel::kDirect;
  // The kernel's launch; the row-stream and small-filter grids are the launcher's.
  LaunchConfig launch;
  bool zero_workspace = false;  // zero the count fp32 sums before the kernel (atomic merges)
  LaunchConfig finalize;      // the sum of the slices into dw (not with kDirect)
  int64_t count = 0;          // KH x KW x C
  int64_t slices = 1;         // workspace slices the finalize sums
  BwdFilterTiling tiling{};   // the split kernel's
  BwdFilterGrid split{};      // set for every kernel but kDirect: it fixes the slices
  bool vec = false;           // split (width > 1), GEMV, tensor core: vector loads
  int strip = 0;              // row-stream: output columns a block
  int64_t kernel_w = 0;       // row-stream: the kernel instance's KW (3, 5 or 7)
  // Row-stream and small-filter: the SMs their runs fill (small-filter: an H100's 132
  // where the device cannot be queried).
  int64_t sms = 0;
  BwdFilterGemvGrid gemv{};
  MmaBwdFilterGrid mma{};
  BwdFilterRowStreamGrid rowstream{};  // all but rows_per_block and row_blocks
  BwdFilterSmallGrid small{};          // at 3 resident blocks an SM (its shared memory)
};

BwdFilterLaunchPlan plan_bwd_filter_launch(const DwConvParams& p, const BwdFilterCall& call,
                                           const DeviceLimits& device);
// The tensor-core kernel's launch alone (launch_bwd_filter_mma's test entry point,
// bwd_filter/mma.h): `slices` deterministic row chunks, or 0 for atomic merges.
BwdFilterLaunchPlan plan_bwd_filter_mma_launch(const DwConvParams& p, int64_t slices, const BwdFilterCall& call,
                                               const DeviceLimits& device);

}  // namespace flashdwc
