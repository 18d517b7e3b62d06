// The filter gradient's launch plan (plan/bwd_filter_launch.h).
#include "plan/bwd_filter_launch.h"

#include <algorithm>
#include <cstdint>

#include "common/direct_grid.h"
#include "plan/fwd.h"

namespace flashdwc {
namespace {

// Blocks the split kernel aims for: 4 waves of 132 SMs x 4 resident blocks, so
// that the last wave's tail costs little. Z (the chunks of the N * Ho rows) is
// what brings a small filter's grid up to it.
constexpr int64_t kBwdFilterTargetBlocks = 2048;
// Deterministic mode keeps one fp32 slice of the filter per chunk; Z is lowered
// until the slices fit in this.
constexpr int64_t kBwdFilterMaxWorkspaceBytes = int64_t(256) << 20;

// dy bytes a pipeline stage of the GEMV filter gradient holds, as the forward GEMV
// kernel's filter stage (kFwdGemvStageBytes); its TM and widest dy row are in
// plan/bwd_filter.h.
constexpr int64_t kBwdFilterGemvStageBytes = 16 * 1024;

// Chunks of images (grid.z) of the GEMV kernel: enough blocks for
// kBwdFilterTargetBlocks, and at least as many as leave each block
// kBwdFilterGemvMergeTaps dy taps an output (its images times Ho x Wo) between two
// atomic merges; or in deterministic mode exactly `deterministic_slices`, the split
// grid's count the workspace was sized for (chunks past the last image store zeros).
//
// Why the second bound: blocks differ in length (an edge row group skips the dy rows
// that meet only padding, about 83% of a centre one's at fp32 128^4 k = 51), and with
// 4 images a block the 1664 blocks there ran in 6.3 waves of the 264 resident. A
// greedy model of the block scheduler (benchmarks/cuda/bwd_filter_gemv_waves_model.py,
// not a measurement) puts that grid at 90% busy, and at 98% with one image a block.
// At 8192 taps a merge is one atomicAdd per 16384 FLOPs of the block's own sums.
constexpr int64_t kBwdFilterGemvMergeTaps = 8192;

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
constexpr int64_t kBwdFilterRowStreamMinRows = 16;

// The tensor-core kernel's grid and launch: `slices` deterministic row chunks, or 0
// for atomic merges in as many chunks as fill the GPU.
void set_mma_launch(const DwConvParams& p, int64_t slices, bool aligned16, const DeviceLimits& device,
                    BwdFilterLaunchPlan& plan) {
  const MmaBwdFilterGrid& m = plan.mma = make_mma_bwd_filter_grid(p, slices, device.smem_per_block);
  const int64_t chunks = slices > 0 ? slices : mma_bwd_filter_ceil_div(m.rows, m.rows_per_split);
  plan.vec = p.channels % 8 == 0 && aligned16;
  plan.launch.grid.x = m.groups;
  plan.launch.grid.y = mma_bwd_filter_ceil_div(p.channels, MmaBwdFilterTraits::kBlockChannels);
  plan.launch.grid.z = chunks;
  plan.launch.block.x = MmaBwdFilterTraits::kThreads;
  plan.launch.smem_bytes = mma_bwd_filter_smem_bytes(m);
}

}  // namespace

BwdFilterLaunchPlan plan_bwd_filter_mma_launch(const DwConvParams& p, int64_t slices, const BwdFilterCall& call,
                                               const DeviceLimits& device) {
  BwdFilterLaunchPlan plan;
  plan.kernel = BwdFilterKernel::kMma;
  set_mma_launch(p, slices, call.x_align >= 16 && call.dy_align >= 16, device, plan);
  return plan;
}

BwdFilterGrid make_bwd_filter_grid(const DwConvParams& p, const BwdFilterTiling& tiling, bool deterministic) {
  const int tm = tiling.tm;
  const int64_t block_channels = bwd_filter_split_block_channels(tiling.width);
  const int kSlots = bwd_filter_split_slots(tiling.width);
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

int64_t bwd_filter_gemv_row_blocks(const DwConvParams& p, const BwdFilterGemvGrid& g) {
  return (p.kernel_h + kFwdGemvRowsPerWarp - 1) / kFwdGemvRowsPerWarp * g.segment_blocks;
}

BwdFilterGemvGrid make_bwd_filter_gemv_grid(const DwConvParams& p, int64_t deterministic_slices) {
  BwdFilterGemvGrid g;
  g.segments_per_row = (p.kernel_w + kBwdFilterGemvTM - 1) / kBwdFilterGemvTM;
  g.warps = int(std::clamp<int64_t>(g.segments_per_row, 1, kBwdFilterGemvMaxWarps));
  g.segment_blocks = (g.segments_per_row + g.warps - 1) / g.warps;
  const int64_t row_bytes = p.out_w * kFwdGemvF32BlockChannels * int64_t(sizeof(float));
  // (An empty batch or dy runs no stage: every block stores or adds zeros.)
  g.rows_per_stage = std::max<int64_t>(std::min(kBwdFilterGemvStageBytes / row_bytes, p.out_h), 1);
  g.stages_per_image = (p.out_h + g.rows_per_stage - 1) / g.rows_per_stage;
  const int64_t blocks_xy =
      bwd_filter_gemv_row_blocks(p, g) * ((p.channels + kFwdGemvF32BlockChannels - 1) / kFwdGemvF32BlockChannels);
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

int64_t bwd_filter_rowstream_runs(int64_t sequence_rows, int64_t strips_and_channel_blocks, int64_t resident_blocks) {
  const int64_t runs = std::max<int64_t>(resident_blocks / std::max<int64_t>(strips_and_channel_blocks, 1), 1);
  return std::min(runs, std::max<int64_t>(sequence_rows / kBwdFilterRowStreamMinRows, 1));
}

BwdFilterLaunchPlan plan_bwd_filter_launch(const DwConvParams& p, const BwdFilterCall& call,
                                           const DeviceLimits& device) {
  BwdFilterLaunchPlan plan;
  const bool half = call.half_precision;
  const int64_t elem_bytes = half ? 2 : 4;
  BwdFilterKernel kernel = plan_bwd_filter(p, half, call.deterministic, device);
  // The row-stream kernel's 16-byte copies need aligned buffers (XLA's are; a caller
  // of run_dwconv_bwd_filter may pass others), the small-filter kernel's its copies'.
  if (kernel == BwdFilterKernel::kRowStream && !(call.x_align >= 16 && call.dy_align >= 16)) {
    kernel = BwdFilterKernel::kSplit;
  }
  if (kernel == BwdFilterKernel::kSmall) {
    const int64_t copy_bytes = bwd_filter_small_width(half, p.kernel_w) * elem_bytes;
    if (!(call.x_align >= copy_bytes && call.dy_align >= copy_bytes)) kernel = BwdFilterKernel::kSplit;
  }
  plan.kernel = kernel;
  if (kernel == BwdFilterKernel::kDirect) {
    plan.launch.grid.x = p.kernel_h * p.kernel_w;
    plan.launch.grid.y = (p.channels + kBwdFilterDirectChannels - 1) / kBwdFilterDirectChannels;
    plan.launch.block.x = kBwdFilterDirectChannels;
    plan.launch.block.y = kBwdFilterDirectRows;
    return plan;
  }
  plan.count = p.kernel_h * p.kernel_w * p.channels;
  plan.zero_workspace = !call.deterministic;
  // The split kernel's grid also sets the deterministic slice count of the
  // tensor-core and GEMV kernels: the workspace was sized for it
  // (bwd_filter_workspace_bytes).
  plan.tiling = bwd_filter_tiling(p, half);
  const BwdFilterGrid& g = plan.split = make_bwd_filter_grid(p, plan.tiling, call.deterministic);
  plan.slices = g.atomic ? 1 : bwd_filter_splits(g);
  plan.finalize.grid = direct_grid(plan.count);
  plan.finalize.block.x = kDirectThreads;
  const bool aligned16 = call.x_align >= 16 && call.dy_align >= 16;
  if (kernel == BwdFilterKernel::kMma) {
    set_mma_launch(p, g.atomic ? 0 : plan.slices, aligned16, device, plan);
  } else if (kernel == BwdFilterKernel::kGemv) {
    const int64_t deterministic_slices = g.atomic ? 0 : plan.slices;
    const BwdFilterGemvGrid& v = plan.gemv = make_bwd_filter_gemv_grid(p, deterministic_slices);
    plan.vec = p.channels % 4 == 0 && aligned16;
    plan.launch.grid.x = bwd_filter_gemv_row_blocks(p, v);
    plan.launch.grid.y = (p.channels + kFwdGemvF32BlockChannels - 1) / kFwdGemvF32BlockChannels;
    plan.launch.grid.z =
        v.atomic ? std::max<int64_t>((p.batch + v.images_per_chunk - 1) / v.images_per_chunk, 1) : deterministic_slices;
    plan.launch.block.x = 32 * v.warps;
    plan.launch.smem_bytes = 2 * v.rows_per_stage * p.out_w * kFwdGemvF32BlockChannels * int64_t(sizeof(float));
  } else if (kernel == BwdFilterKernel::kSmall) {  // atomic mode only: one slice
    // The shared memory depends on the block split, which depends on the resident
    // blocks only through the run count: the split is taken at 3 blocks an SM, and
    // the launcher redoes the runs at the kernel's occupancy.
    plan.sms = device.sms > 0 ? device.sms : 132;
    plan.small = make_bwd_filter_small_grid(p, bwd_filter_small_width(half, p.kernel_w), int(elem_bytes), plan.sms * 3);
    plan.launch.block.x = kBwdFilterSmallThreads;
    plan.launch.smem_bytes = plan.small.smem_bytes;
  } else if (kernel == BwdFilterKernel::kRowStream) {  // atomic mode only: one slice
    plan.strip = p.out_w <= kBwdFilterRowStreamNarrowStrip ? kBwdFilterRowStreamNarrowStrip
                                                           : 2 * kBwdFilterRowStreamNarrowStrip;
    // The kernel instances take KW 3, 5 and 7 (can_implement_bwd_filter_rowstream).
    plan.kernel_w = p.kernel_w == 3 || p.kernel_w == 5 ? p.kernel_w : 7;
    plan.sms = device.sms;
    BwdFilterRowStreamGrid& r = plan.rowstream;
    const int64_t block_channels = bwd_filter_rowstream_block_channels(elem_bytes);
    r.strips = (p.out_w + plan.strip - 1) / plan.strip;
    r.channel_blocks = (p.channels + block_channels - 1) / block_channels;
    r.image_rows = int(p.out_h + p.kernel_h - 1);
    r.sequence_rows = p.batch * r.image_rows - (p.kernel_h - 1);
    r.x_ring = int(p.kernel_h) + kBwdFilterRowStreamPrefetchRows;
    r.segments = kBwdFilterRowStreamWorkers / int(p.kernel_h);
    plan.launch.block.x = kBwdFilterRowStreamThreads;
    plan.launch.smem_bytes = bwd_filter_rowstream_smem_bytes(elem_bytes, plan.strip, plan.kernel_w, p.kernel_h);
  } else {
    const BwdFilterTiling& t = plan.tiling;
    plan.vec = t.width > 1 && p.channels % t.width == 0 && call.x_align >= t.width * elem_bytes &&
               call.dy_align >= t.width * elem_bytes && call.workspace_align >= 16;
    plan.launch.grid.x = (g.tiles + g.tiles_per_block - 1) / g.tiles_per_block;
    plan.launch.grid.y = (p.channels + bwd_filter_split_block_channels(t.width) - 1) /
                         bwd_filter_split_block_channels(t.width);
    plan.launch.grid.z = bwd_filter_splits(g);
    plan.launch.block.x = kBwdFilterSplitThreads;
  }
  return plan;
}

}  // namespace flashdwc
