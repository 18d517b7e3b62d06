// The filter gradient's plan (plan/bwd_filter.h).
#include "plan/bwd_filter.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>

#include "bwd_filter/mma_layout.h"
#include "bwd_filter/small_grid.h"
#include "plan/fwd.h"
#include "plan/thresholds.h"

namespace flashdwc {

const char* bwd_filter_kernel_name(BwdFilterKernel kernel) {
  switch (kernel) {
    case BwdFilterKernel::kMma: return "mma";
    case BwdFilterKernel::kRowStream: return "rowstream";
    case BwdFilterKernel::kSplit: return "split";
    case BwdFilterKernel::kGemv: return "gemv";
    case BwdFilterKernel::kDirect: return "direct";
    case BwdFilterKernel::kSmall: return "small";
  }
  return "direct";
}

namespace {

// Tiling of the backward-filter split kernel: channels per thread and taps per
// thread (TM), the paper's flexible tiling. A filter row of KW taps takes
// ceil(KW / TM) tiles of TM taps, and a tile costs about TM FMA steps plus 2 for
// its loads per output column. Among a width's TMs the one that minimizes tiles x
// (TM + 2) wastes least. Width 4: 9 -> 5 (10 taps computed; TM = 8 computed 16,
// and k = 9 measured 6.8 ms against 2.6 ms at k = 7 on 128x128x128x128), 13, 17,
// 21 -> 7, 31, 51 -> 8. TM = 9 is left out: it spills 148-256 bytes under the
// 128-register cap, TM = 7 spills 32. Width 8 (fp16/bf16 only) holds twice the
// channels, so it takes TM 3 or 4 for the registers of width 4's 6 or 8.
constexpr int kBwdFilterTmWidth4[] = {8, 7, 5, 4};
constexpr int kBwdFilterTmWidth8[] = {4, 3};
// Width 1 holds a quarter of width 4's registers per tap, so its TMs reach 16; the
// four fit the common widths: 9 -> 9, 13 -> 13, 17 -> 9 (18 taps), 21 -> 11,
// 27 -> 9, 29 and 31 -> 16 (32), 51 -> 13 (52), 63 -> 16 (64).
constexpr int kBwdFilterTmWidth1[] = {16, 13, 11, 9};

template <size_t kCount>
int bwd_filter_best_tm(const DwConvParams& p, const int (&candidates)[kCount]) {
  int best = candidates[0];
  int64_t best_cost = INT64_MAX;
  for (int tm : candidates) {  // ties go to the larger TM (listed first): fewer loads per FMA
    const int64_t cost = (p.kernel_w + tm - 1) / tm * (tm + 2);
    if (cost < best_cost) best = tm, best_cost = cost;
  }
  return best;
}

int64_t bwd_filter_taps_computed(const DwConvParams& p, int tm) { return (p.kernel_w + tm - 1) / tm * tm; }

}  // namespace

// fp16/bf16 take width 8 (16-byte loads) when its TM computes no more taps than
// width 4's. Measured on the H200, bf16 128x128x128x128, atomic mode, ms width 4 ->
// width 8: k = 3 (taps 4 -> 3) 0.709 -> 0.590, k = 31 (32 -> 32) 30.2 -> 26.6;
// k = 5 (5 -> 6) 0.981 -> 1.806, k = 7 (7 -> 8) 1.493 -> 2.078, k = 13 (14 -> 16)
// 5.74 -> 6.95. So the wider load wins when the tiles waste nothing more, and one
// wasted tap in 5 to 7 costs more than it gains.
// fp32 takes width 1 (one channel per lane) where its TM computes fewer taps than
// width 4's. Measured on the H200, fp32 128x64x64x256, ms width 4 -> width 1: k = 9
// (taps 10 -> 9) 2.77 -> 2.03, k = 13 (14 -> 13) 3.49 -> 3.29, k = 17 (21 -> 18)
// 7.31 -> 5.26, k = 51 (56 -> 52) 64.3 -> 46.2; with no fewer taps it lost 4-6%:
// k = 21 (21 -> 22) 7.28 -> 7.67, k = 31 (32 -> 32) 15.7 -> 16.3. fp16/bf16 never
// take it: at equal or fewer taps width 1 lost to width 8 or 4 at k = 9, 13, 21, 27,
// 29, 31 and 51 (k = 29: 12.8 -> 17.8 ms), a lane's 2-byte load moving an eighth of
// what a 16-byte load does; k = 17 alone won, by 10%.
// Filter rows per thread for width 1 (fp32, stride 1, no dilation): one x load then
// serves them all, each with its own dy load (bwd_filter/split.cuh, "Rows"), so a
// column step costs rows + 1 loads for rows x TM FMAs instead of 2 for TM. Measured
// on the H200 (kernel-level, fp32, ms, one row -> 2 / 3 / 4):
//   k = 9 (TM 9):    128x64x64x256 2.07 -> 2.10 / 1.56 / 2.08, 128^4 3.92 -> 4.23 /
//                    2.98 / 4.14, 128x32x32x1024 2.38 -> 2.45 / 1.69 / 2.11;
//   k = 17 (TM 9):   128x64x64x256 5.37 -> 4.89 / 4.26 / 5.57;
//   k = 13 (TM 13):  128x64x64x256 3.34 -> 2.95 / 4.01 / 3.62, 128x32x32x1024 4.58 ->
//                    3.64 / 4.45 / 3.48;
//   k = 51 (TM 13):  128x64x64x256 46.6 -> 42.6 / 49.9 / 58.1, 128^4 86.5 -> 86.4 /
//                    100.6 / 114.4, 128x32x32x1024 44.4 -> 50.6 / 56.0 / 62.5;
//   k = 21 and 31 (width 4 at one row against width 1 at TM 11 and 16): 1.5-1.8x slower.
// Rows that pass the filter's height are computed and dropped (k = 9 at 2 rows: 10),
// and above 3 rows at TM 9 or 2 at TM 13 ptxas spills (24-100 bytes). So TM 9 takes 3
// rows and a one-tile TM 13 row (k = 13) takes 2, where the padding rows are at most
// an eighth of the filter's; k = 51 at 2 rows gained on one map and lost on another,
// and stays at one.
BwdFilterTiling with_filter_rows(const DwConvParams& p, BwdFilterTiling lane) {
  if (p.stride_h != 1 || p.stride_w != 1 || p.dilation_h != 1 || p.dilation_w != 1) return lane;
  const int rows = lane.tm == 13 && p.kernel_w > 13 ? 1 : bwd_filter_width1_rows(lane.tm);
  const int64_t computed = (p.kernel_h + rows - 1) / rows * rows;
  if (rows > 1 && 8 * computed <= 9 * p.kernel_h) lane.rows = rows;
  return lane;
}

BwdFilterTiling bwd_filter_tiling(const DwConvParams& p, bool half_precision) {
  const BwdFilterTiling narrow{4, bwd_filter_best_tm(p, kBwdFilterTmWidth4)};
  if (!half_precision) {
    const BwdFilterTiling lane{1, bwd_filter_best_tm(p, kBwdFilterTmWidth1)};
    return bwd_filter_taps_computed(p, lane.tm) < bwd_filter_taps_computed(p, narrow.tm) ? with_filter_rows(p, lane)
                                                                                          : narrow;
  }
  const BwdFilterTiling wide{8, bwd_filter_best_tm(p, kBwdFilterTmWidth8)};
  return bwd_filter_taps_computed(p, wide.tm) <= bwd_filter_taps_computed(p, narrow.tm) ? wide : narrow;
}


// stride_w 1 or 2, dilation_w 1; the channel-block limit is checked for the narrower
// blocks.
bool can_implement_bwd_filter_split(const DwConvParams& p) {
  return (p.stride_w == 1 || p.stride_w == 2) && p.dilation_w == 1 &&
         (p.channels + kBwdFilterSplitBlockChannels - 1) / kBwdFilterSplitBlockChannels <= 65535 &&
         p.kernel_h * p.kernel_w <= INT32_MAX;
}

// fp32, stride 1, no dilation, dy rows at most 512 wide whose two stages fit the
// device's shared memory, the grid within CUDA's limits.
bool can_implement_bwd_filter_gemv(const DwConvParams& p, bool half_precision, const DeviceLimits& device) {
  if (half_precision) return false;
  if (p.stride_h != 1 || p.stride_w != 1 || p.dilation_h != 1 || p.dilation_w != 1) return false;
  if (p.out_w <= 0 || p.out_w > kBwdFilterGemvMaxOutW) return false;
  const int64_t row_groups = (p.kernel_h + kFwdGemvRowsPerWarp - 1) / kFwdGemvRowsPerWarp;
  const int64_t segments_per_row = (p.kernel_w + kBwdFilterGemvTM - 1) / kBwdFilterGemvTM;
  const int64_t row_bytes = p.out_w * kFwdGemvF32BlockChannels * int64_t(sizeof(float));
  return (p.channels + kFwdGemvF32BlockChannels - 1) / kFwdGemvF32BlockChannels <= 65535 &&
         row_groups * segments_per_row <= INT32_MAX && 2 * row_bytes <= device.smem_per_block &&
         p.in_w + p.out_w + p.kernel_w <= INT32_MAX;  // gemv_row's 32-bit column, padding included
}

// Atomic mode, stride 1, no dilation, KW 3, 5 or 7, KH within the timed heights
// (plan/thresholds.h), outputs at least 32 wide, whole channel blocks, the grid within
// CUDA's limits.
bool can_implement_bwd_filter_rowstream(const DwConvParams& p, bool half_precision, bool deterministic) {
  const PlanThresholds& t = kPlanThresholds;
  // The block width does not depend on the strip; fp16 and bf16 share it.
  const int64_t block_channels =
      half_precision ? kBwdFilterRowStreamHalfBlockChannels : kBwdFilterRowStreamF32BlockChannels;
  const int64_t channel_blocks = p.channels / block_channels;
  const int64_t most_blocks = p.batch * p.out_h * ((p.out_w + kBwdFilterRowStreamNarrowStrip - 1) /
                                                   kBwdFilterRowStreamNarrowStrip);
  return !deterministic && p.stride_h == 1 && p.stride_w == 1 && p.dilation_h == 1 && p.dilation_w == 1 &&
         (p.kernel_w == 3 || p.kernel_w == 5 || p.kernel_w == 7) && p.kernel_h >= 1 &&
         p.kernel_h <= t.bwd_filter_rowstream_max_kernel_h && p.out_w >= t.bwd_filter_rowstream_min_out_w &&
         p.channels % block_channels == 0 && most_blocks <= INT32_MAX / std::max<int64_t>(channel_blocks, 1) &&
         p.batch * (p.out_h + p.kernel_h - 1) <= INT32_MAX;  // the row sequence's length, an int per block
}

// Atomic mode, square 3x3 or 5x5 filters, equal strides of 1 or 2, no dilation, C a
// multiple of the channels a thread holds (16- or 8-byte copies), row offsets within
// an int, and the stages and partial sums within the device's shared memory.
bool can_implement_bwd_filter_small(const DwConvParams& p, bool half_precision, bool deterministic,
                                    const DeviceLimits& device) {
  if (deterministic || p.kernel_h != p.kernel_w || (p.kernel_w != 3 && p.kernel_w != 5)) return false;
  if (p.stride_h != p.stride_w || (p.stride_w != 1 && p.stride_w != 2)) return false;
  if (p.dilation_h != 1 || p.dilation_w != 1) return false;
  if (p.batch <= 0 || p.channels <= 0 || p.out_h <= 0 || p.out_w <= 0 || p.in_h <= 0 || p.in_w <= 0) return false;
  const int width = bwd_filter_small_width(half_precision, p.kernel_w);
  if (p.channels % width != 0) return false;
  // Copy offsets within a row (iw * C + c) and the step counts are ints.
  if (p.in_w * p.channels > INT32_MAX || p.out_w * p.channels > INT32_MAX) return false;
  const int ring = bwd_filter_small_ring(p.kernel_h, p.stride_h);
  if (p.batch * (p.out_h + ring - 1) > INT32_MAX) return false;
  // One block a (channel block, column block) at least; the grid is an int in x.
  const BwdFilterSmallGrid g =
      make_bwd_filter_small_grid(p, width, half_precision ? 2 : 4, int64_t(device.sms) * 3);
  if (g.runs * g.col_blocks * g.channel_blocks > INT32_MAX) return false;
  return g.smem_bytes <= device.smem_per_block;
}

// fp16/bf16, stride 1, no dilation, KW <= 64, and the block's input planes and dy ring
// within the device's shared memory.
bool can_implement_bwd_filter_mma(const DwConvParams& p, bool half_precision, const DeviceLimits& device) {
  using Tr = MmaBwdFilterTraits;
  if (!half_precision) return false;
  if (p.stride_h != 1 || p.stride_w != 1 || p.dilation_h != 1 || p.dilation_w != 1) return false;
  if (p.kernel_w > Tr::kMaxKernelW || p.kernel_h > (int64_t(1) << 20)) return false;
  if (p.batch <= 0 || p.in_h <= 0 || p.out_w <= 0 || p.channels <= 0) return false;
  // Plane and ring offsets are ints; the largest x plane is 16 (K + M) elements.
  if (p.out_w > (int64_t(1) << 20) || p.in_w > (int64_t(1) << 24)) return false;
  if (mma_bwd_filter_ceil_div(p.channels, Tr::kBlockChannels) > 65535) return false;
  const int64_t max_smem = device.smem_per_block;
  const MmaBwdFilterGrid g = make_mma_bwd_filter_grid(p, 0, max_smem);
  return mma_bwd_filter_smem_bytes(g) <= max_smem;
}

BwdFilterKernel plan_bwd_filter(const DwConvParams& p, bool half_precision, bool deterministic,
                                const DeviceLimits& device) {
  const PlanThresholds& t = kPlanThresholds;
  if (!can_implement_bwd_filter_split(p)) return BwdFilterKernel::kDirect;
  if (p.kernel_w >= t.bwd_filter_gemv_min_kernel_w && can_implement_bwd_filter_gemv(p, half_precision, device)) {
    return BwdFilterKernel::kGemv;
  }
  // The small-filter kernel ahead of the split and row-stream kernels (it runs no
  // filter that the GEMV or tensor-core kernels take).
  const int64_t over_rowstream =
      half_precision ? t.bwd_filter_small_half_over_rowstream : t.bwd_filter_small_f32_over_rowstream;
  if (can_implement_bwd_filter_small(p, half_precision, deterministic, device) &&
      (over_rowstream != 0 || !can_implement_bwd_filter_rowstream(p, half_precision, deterministic))) {
    return BwdFilterKernel::kSmall;
  }
  const bool mma_faster = p.kernel_w >= t.bwd_filter_mma_min_kernel_w ||
                          (p.kernel_w == t.bwd_filter_mma_kw7_kernel_w && p.out_w >= t.bwd_filter_mma_kw7_min_out_w);
  const bool mma = mma_faster && can_implement_bwd_filter_mma(p, half_precision, device);
  // k = 7 goes to tensor cores ahead of the row-stream kernel.
  if (mma && p.kernel_w < t.bwd_filter_mma_min_kernel_w) return BwdFilterKernel::kMma;
  if (can_implement_bwd_filter_rowstream(p, half_precision, deterministic)) return BwdFilterKernel::kRowStream;
  return mma ? BwdFilterKernel::kMma : BwdFilterKernel::kSplit;
}

}  // namespace flashdwc
