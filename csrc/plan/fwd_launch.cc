// The forward's launch plan (plan/fwd_launch.h).
#include "plan/fwd_launch.h"

#include <algorithm>
#include <cstdint>

#include "common/direct_grid.h"
#include "plan/fwd_mma_grid.h"

namespace flashdwc {
namespace {

int64_t elem_bytes(bool half_precision) { return half_precision ? 2 : 4; }

// 16-byte channel groups for the direct, GEMV, row-stream and tensor-core kernels.
bool aligned16(const FwdCall& call) { return call.x_align >= 16 && call.w_align >= 16 && call.y_align >= 16; }

// The register-filter kernel's copies: x by 16 bytes, w, y and the bias as 32-bit
// words (fwd_regfilter_aligned, fwd/regfilter.h).
bool regfilter_aligned(const FwdCall& call) {
  return call.x_align >= 16 && call.w_align >= 4 && call.y_align >= 4 && call.bias_align >= 4;
}

// The stride-2 kernel's vectors, for x, w, y and the bias.
bool stride2_aligned(const DwConvParams& p, const FwdCall& call) {
  const int64_t bytes = fwd_stride2_width(p.kernel_w, call.half_precision) * elem_bytes(call.half_precision);
  return call.x_align >= bytes && call.w_align >= bytes && call.y_align >= bytes && call.bias_align >= bytes;
}

FwdLaunchPlan direct_plan(const DwConvParams& p, const FwdCall& call) {
  FwdLaunchPlan plan;
  plan.kernel = FwdKernel::kDirect;
  const int64_t vec_width = 16 / elem_bytes(call.half_precision);
  plan.vec = p.channels % vec_width == 0 && aligned16(call);
  const int64_t width = plan.vec ? vec_width : 1;
  if (!direct_grid_2d(p.batch * p.out_h, p.out_w * (p.channels / width), plan.launch.grid)) {
    plan.status = LaunchStatus::kInvalid;
  }
  plan.launch.block.x = kDirectThreadsPerBlock;
  return plan;
}

FwdLaunchPlan gemv_plan(const DwConvParams& p, const FwdCall& call) {
  FwdLaunchPlan plan;
  plan.kernel = FwdKernel::kGemv;
  const int64_t bytes = elem_bytes(call.half_precision);
  const int64_t block_channels = fwd_gemv_block_channels(bytes);
  plan.vec = p.channels % fwd_gemv_channels_per_thread(bytes) == 0 && aligned16(call);
  plan.tm = fwd_gemv_tm(bytes, p.stride_w == 1 ? 1 : 2);
  GemvFwdGrid& grid = plan.gemv;
  grid.segments_per_row = (p.out_w + plan.tm - 1) / plan.tm;
  grid.rows = p.batch * p.out_h;
  grid.segments =
      (grid.rows + kFwdGemvRowsPerWarp - 1) / kFwdGemvRowsPerWarp * kFwdGemvRowsPerWarp * grid.segments_per_row;
  const int64_t row_bytes = p.kernel_w * block_channels * bytes;
  grid.rows_per_stage = std::clamp<int64_t>(kFwdGemvStageBytes / row_bytes, 1, p.kernel_h);
  plan.launch.grid.x = (grid.segments + kFwdGemvSegments - 1) / kFwdGemvSegments;
  plan.launch.grid.y = (p.channels + block_channels - 1) / block_channels;
  plan.launch.block.x = kFwdGemvThreads;
  plan.launch.smem_bytes = 2 * grid.rows_per_stage * row_bytes;
  return plan;
}

// Row-stream kernel sizes. Outputs per thread: 4 (64-column strips), or where the
// output is at most 32 wide, so that narrow images do not leave half of every strip
// idle, two images a strip at 4 (fp16/bf16 over at least two images; fwd/rowstream.cuh)
// or one image at 2 (fp32, whose 32-wide maps ran as fast as its 64-wide ones per
// output at k = 3 on the H200: 0.355 and 0.356 ms; and single images).
// Blocks: enough for several waves on an H200 (132 SMs, up to 4 resident blocks of 128
// threads each), in runs of at least 16 output rows so that the KH - 1 halo rows a
// block reads twice stay a small fraction. Filters at most 3 rows tall (2 halo rows)
// take twice the blocks: at k = 3, 4096 took 0.97-0.98 of 2048's time on 128^4 (16
// rows a block against 32) and 0.99-1.005 on the other paper maps, in all three
// dtypes; at k = 5 and 7 (4 and 6 halo rows) it read 0.97-1.02, above 1.01 at two
// points, so deeper filters keep 2048 (docs/design-notes.md).
constexpr int64_t kRowStreamTargetBlocks = 2048;
constexpr int64_t kRowStreamTargetBlocksShallow = 4096;
constexpr int64_t kRowStreamShallowKernelH = 3;
constexpr int64_t kRowStreamMinRows = 16;

FwdLaunchPlan rowstream_plan(const DwConvParams& p, const FwdCall& call, const DeviceLimits& device) {
  FwdLaunchPlan plan;
  plan.kernel = FwdKernel::kRowStream;
  const int64_t bytes = elem_bytes(call.half_precision);
  const bool narrow = p.out_w <= kFwdRowStreamNarrowWidth;
  plan.tm = narrow ? 2 : 4;
  if (call.half_precision) {
    // Two images a strip only where two blocks still fit on an SM: their rings are
    // twice as wide as the one-image TM = 2 ones (k = 7: 100 KB a block at KH = 7,
    // 2 an SM; 123 KB at KH = 9, which would leave one block of 4 warps).
    const int64_t two_image_bytes = fwd_rowstream_smem_bytes(bytes, 4, 2, p.kernel_h, p.kernel_w);
    if (narrow && p.batch >= 2 && 2 * (two_image_bytes + device.smem_reserved_per_block) <= device.smem_per_sm) {
      plan.tm = 4;
      plan.images = 2;
    }
  }
  // The kernel instances take KW 3, 5 and 7 (can_implement_fwd_rowstream).
  const int64_t kernel_w = p.kernel_w == 3 || p.kernel_w == 5 ? p.kernel_w : 7;
  RowStreamGrid& grid = plan.rowstream;
  const int64_t sub_width = fwd_rowstream_strip_width(plan.tm) / plan.images;
  const int64_t image_groups = (p.batch + plan.images - 1) / plan.images;
  const int64_t block_channels = fwd_rowstream_block_channels(bytes);
  grid.strips = (p.out_w + sub_width - 1) / sub_width;
  grid.channel_blocks = (p.channels + block_channels - 1) / block_channels;
  const int64_t base = std::max<int64_t>(image_groups * grid.strips * grid.channel_blocks, 1);
  const int64_t target =
      p.kernel_h <= kRowStreamShallowKernelH ? kRowStreamTargetBlocksShallow : kRowStreamTargetBlocks;
  const int64_t row_blocks = std::clamp<int64_t>((target + base - 1) / base, 1, p.out_h);
  grid.rows_per_block = std::max((p.out_h + row_blocks - 1) / row_blocks, std::min(p.out_h, kRowStreamMinRows));
  grid.row_blocks = (p.out_h + grid.rows_per_block - 1) / grid.rows_per_block;
  grid.ring_rows = int(p.kernel_h) + kFwdRowStreamPrefetchRows;
  plan.launch.grid.x = image_groups * grid.strips * grid.row_blocks * grid.channel_blocks;
  plan.launch.block.x = kFwdRowStreamThreads;
  plan.launch.smem_bytes = fwd_rowstream_smem_bytes(bytes, plan.tm, plan.images, p.kernel_h, kernel_w);
  return plan;
}

FwdLaunchPlan stride2_plan(const DwConvParams& p, const FwdCall& call, const DeviceLimits& device) {
  FwdLaunchPlan plan;
  plan.kernel = FwdKernel::kStride2;
  const int64_t width = fwd_stride2_width(p.kernel_w, call.half_precision);
  plan.stride2 = make_fwd_stride2_grid(p, width, fwd_stride2_rows_per_thread(p, width, device.sms));
  if (p.batch <= 0 || plan.stride2.slots <= 0) {
    plan.status = LaunchStatus::kNothing;
    return plan;
  }
  plan.launch = per_image_slots_launch(plan.stride2.slots, p.batch, kFwdStride2Threads);
  return plan;
}

// Output rows a register-filter row block keeps at least: its K - 1 halo rows are
// read twice.
constexpr int64_t kRegFilterMinRowsPerBlock = 16;

FwdLaunchPlan regfilter_plan(const DwConvParams& p, bool half_precision, const DeviceLimits& device) {
  FwdLaunchPlan plan;
  plan.kernel = FwdKernel::kRegFilter;
  const int64_t tw = fwd_regfilter_outputs_per_thread(p.kernel_w);
  RegFilterGrid& g = plan.regfilter;
  g.words = fwd_regfilter_words(p.channels, half_precision);
  g.lane_words = fwd_regfilter_lane_words(p.channels, half_precision);
  g.strips = fwd_regfilter_strips(p);
  g.columns = fwd_regfilter_threads_per_row_block(p, half_precision);
  // One row block per column of threads and row residue unless that leaves under two
  // waves of resident threads, then more, of at least kRegFilterMinRowsPerBlock rows
  // of a residue (rows d_h apart at dilation d_h; its longest residue has
  // ceil(out_h / d_h) rows).
  const int64_t residue_rows = (p.out_h + p.dilation_h - 1) / p.dilation_h;
  const int64_t resident =
      std::max<int64_t>(device.sms, 1) * fwd_regfilter_min_blocks(p.kernel_w) * kFwdRegFilterThreads;
  const int64_t max_row_blocks = std::max<int64_t>(residue_rows / kRegFilterMinRowsPerBlock, 1);
  const int64_t threads_a_block_row = g.columns * p.dilation_h;
  const int64_t wanted =
      std::clamp<int64_t>((2 * resident + threads_a_block_row - 1) / threads_a_block_row, 1, max_row_blocks);
  g.rows_per_block = (residue_rows + wanted - 1) / wanted;
  g.row_blocks = (residue_rows + g.rows_per_block - 1) / g.rows_per_block;
  plan.launch.grid.x = (g.columns + kFwdRegFilterThreads - 1) / kFwdRegFilterThreads;
  plan.launch.grid.y = p.dilation_h * g.row_blocks;
  plan.launch.block.x = kFwdRegFilterThreads;
  return plan;
}

}  // namespace

// One block a (8 units, channel), 128 threads; the transposes' grid is the
// launcher's, (H, N, channel blocks).
FwdLaunchPlan plan_fwd_wgmma_launch(const DwConvParams& p) {
  using Tr = WgmmaFwdTraits;
  FwdLaunchPlan plan;
  plan.kernel = FwdKernel::kWgmma;
  plan.vec = true;
  const WgmmaFwdGrid& g = plan.wgmma = make_wgmma_fwd_grid(p);
  plan.launch.grid.x = (p.batch * g.strips + Tr::kUnits - 1) / Tr::kUnits;
  plan.launch.grid.y = p.channels;
  plan.launch.block.x = Tr::kThreads;
  plan.launch.smem_bytes = g.smem_bytes;
  return plan;
}

int64_t fwd_workspace_bytes(const DwConvParams& p, bool half_precision, bool prologue, const DeviceLimits& device) {
  if (prologue || plan_fwd(p, half_precision, device) != FwdKernel::kWgmma) return 0;
  return make_wgmma_fwd_grid(p).workspace_bytes;
}

FwdLaunchPlan plan_fwd_regfilter_launch(const DwConvParams& p, bool half_precision, const DeviceLimits& device) {
  return regfilter_plan(p, half_precision, device);
}

FwdLaunchPlan plan_fwd_mma_launch(const DwConvParams& p, const FwdCall& call, const DeviceLimits& device,
                                  int tiles_per_block) {
  FwdLaunchPlan plan;
  plan.kernel = FwdKernel::kMma;
  if (p.batch <= 0 || p.out_h <= 0 || p.out_w <= 0 || p.channels <= 0) {
    plan.status = LaunchStatus::kNothing;
    return plan;
  }
  plan.vec = p.channels % 8 == 0 && aligned16(call);
  const MmaFwdGrid& g = plan.mma = choose_mma_fwd_grid(p, device, tiles_per_block, plan.vec);
  // Channel blocks in x, the fastest index (fwd/mma.cuh, MmaFwdGrid); the spatial
  // blocks fill y (at most 65535), then z, with fewer than z blocks past the last.
  const int64_t planes_z = mma_fwd_ceil_div(g.spatial_blocks, 65535);
  plan.launch.grid.x = mma_fwd_ceil_div(p.channels, MmaFwdTraits::kBlockChannels);
  plan.launch.grid.y = mma_fwd_ceil_div(g.spatial_blocks, planes_z);
  plan.launch.grid.z = planes_z;
  plan.launch.block.x = MmaFwdTraits::kThreads;
  plan.launch.smem_bytes = int64_t(mma_fwd_smem_bytes(g));
  return plan;
}

FwdLaunchPlan plan_fwd_launch(const DwConvParams& p, const FwdCall& call, const DeviceLimits& device) {
  FwdKernel kernel = plan_fwd(p, call.half_precision, device);
  if (kernel == FwdKernel::kWgmma) {
    // The Hopper kernel has no prologue, moves 16 bytes a thread and needs its
    // workspace, which the lowering sizes by fwd_workspace_bytes.
    FwdLaunchPlan plan = plan_fwd_wgmma_launch(p);
    if (!call.prologue && aligned16(call) && call.workspace_bytes >= plan.wgmma.workspace_bytes) return plan;
    kernel = plan_fwd_without_wgmma(p, call.half_precision, device);
  }
  if (kernel == FwdKernel::kRegFilter) {
    // The register-filter kernel has no prologue and moves 32-bit words of channels.
    if (!call.prologue && regfilter_aligned(call)) return regfilter_plan(p, call.half_precision, device);
    kernel = plan_fwd_without_regfilter(p, call.half_precision, device);
  }
  if (kernel == FwdKernel::kMma) return plan_fwd_mma_launch(p, call, device, 0);
  if (kernel == FwdKernel::kDirect) return direct_plan(p, call);
  // The stride-2 kernel has no prologue; those calls, and unaligned buffers, take the
  // GEMV kernel below (stride_w 2).
  if (kernel == FwdKernel::kStride2 && !call.prologue && stride2_aligned(p, call)) {
    return stride2_plan(p, call, device);
  }
  if (kernel == FwdKernel::kRowStream && aligned16(call)) return rowstream_plan(p, call, device);
  return gemv_plan(p, call);
}

}  // namespace flashdwc
