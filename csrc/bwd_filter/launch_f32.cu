// The filter gradient's tiling rule and workspace size (host code), and its fp32
// launch; fp16 and bf16 are instantiated in bwd_filter_cuda_f16.cu and
// bwd_filter_cuda_bf16.cu.
#include <cstdint>

#include "dwconv/bwd_filter_launch.cuh"

namespace flashdwc {
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
// serves them all, each with its own dy load (bwd_filter_split.cuh, "Rows"), so a
// column step costs rows + 1 loads for rows x TM FMAs instead of 2 for TM. Measured
// on the H200 (kernel-level, fp32, ms, one row -> 2 / 3 / 4; sixteenth session):
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

// fp16/bf16 take the tensor-core kernel from 9 taps across, on any map. Kernel-level
// A/B on the H200 (43c3872, bf16, ms, split -> tensor cores; docs/design-notes.md,
// thirteenth session): k = 9 on 64x32x32x1536 1.29 -> 0.67, on 128x32x32x1024 1.70
// -> 0.86, on 128x64x64x256 1.02 -> 0.73, on 128x14x14x512 0.22 -> 0.14; k = 13 on
// 64x7x7x1024 0.32 -> 0.08; k = 31 on 128^4 4.52 -> 3.30. Below 9 taps the 16-tap M
// tile is mostly padding: taking it from 5 taps, ahead of the row-stream kernel, gave
// 0.94-0.98 at k = 7 on 56- to 128-wide maps (0.90 on 64x14x14x384) but 1.07 on
// 64x7x7x768 and 1.44 at k = 5 on 128x64x64x256. So k = 7 goes to tensor cores on
// outputs at least 14 wide, and narrower filters stay on the CUDA-core kernels.
// Checked against the row-stream and split kernels it displaced (kernel-level A/B,
// H200, sixteenth session, ms): bf16 128x64x64x256 0.696 -> 0.651, 128^4 1.295 ->
// 1.267, 64x56x56x96 0.138 -> 0.128, 64x28x28x192 0.091 -> 0.081, 64x14x14x384 0.066
// -> 0.048; it lost 1% on 128x32x32x1024 (0.709 -> 0.717) and 2% in fp16 on
// 128x64x64x256 (0.638 -> 0.651), where the row-stream kernel converts fp16 faster
// than bf16. One rule for both half types keeps the choice a function of the shape.
constexpr int64_t kBwdFilterMmaMinTaps = 9;
constexpr int64_t kBwdFilterMmaSevenTaps = 7;
constexpr int64_t kBwdFilterMmaSevenTapsMinOutW = 14;

bool bwd_filter_mma_wins(const DwConvParams& p) {
  return p.kernel_w >= kBwdFilterMmaMinTaps ||
         (p.kernel_w == kBwdFilterMmaSevenTaps && p.out_w >= kBwdFilterMmaSevenTapsMinOutW);
}

// KW 3, 5 and 7 at stride 1 stream rows through shared memory (bwd_filter_rowstream.cuh)
// where 16-byte copies take whole channel groups. Against the split kernel on the
// H200 (kernel-level A/B, docs/design-notes.md, eleventh session) it took 0.74-0.97x
// the time at the 9 bf16 paper points with k <= 7 and 0.62-0.82x in fp32, but
// 1.41x on 64x56x56x96 (1.5 channel blocks), 1.00x on 28x28, 1.29x on 14x14 and
// 1.97x on 7x7 (few rows to pipeline), so it takes whole channel blocks, outputs at
// least 32 wide, and the filter heights that were timed (KH <= 7; the kernel itself
// handles up to kBwdFilterRowStreamMaxKernelH).
inline constexpr int64_t kBwdFilterRowStreamMinOutW = 32;
inline constexpr int64_t kBwdFilterRowStreamTimedKernelH = 7;

bool bwd_filter_rowstream_applies(const DwConvParams& p, bool half_precision) {
  // The block width does not depend on the strip; fp16 and bf16 share it.
  const int64_t block_channels = half_precision ? BwdFilterRowStreamTraits<__half, 32>::kBlockChannels
                                                : BwdFilterRowStreamTraits<float, 32>::kBlockChannels;
  const int64_t channel_blocks = p.channels / block_channels;
  const int64_t most_blocks = p.batch * p.out_h * ((p.out_w + kBwdFilterRowStreamNarrowStrip - 1) /
                                                   kBwdFilterRowStreamNarrowStrip);
  return p.stride_h == 1 && p.stride_w == 1 && p.dilation_h == 1 && p.dilation_w == 1 &&
         (p.kernel_w == 3 || p.kernel_w == 5 || p.kernel_w == 7) && p.kernel_h >= 1 &&
         p.kernel_h <= kBwdFilterRowStreamTimedKernelH && p.out_w >= kBwdFilterRowStreamMinOutW &&
         p.channels % block_channels == 0 && most_blocks <= INT32_MAX / std::max<int64_t>(channel_blocks, 1) &&
         p.batch * (p.out_h + p.kernel_h - 1) <= INT32_MAX;  // the row sequence's length, an int per block
}

// fp32 at stride 1 takes the forward-as-filter-gradient kernel (bwd_filter_gemv.cuh)
// from 27 taps across. Kernel-level A/B on the H200 (sixteenth and seventeenth
// sessions, ms, split with filter rows -> gemv; maps 128x64x64x256, 128^4,
// 128x32x32x1024): k = 51 47.24 -> 22.73, 85.46 -> 51.46, 44.67 -> 20.40; k = 31
// 10.87 -> 8.93, 19.26 -> 18.71, 12.69 -> 8.42; k = 27 11.72 -> 7.87, 20.04 -> 16.51,
// 13.48 -> 7.18. Below, its KH x KW outputs fill too few of the 8-wide thread tiles and
// 4-row warps, and the split kernel's rows per thread win on most maps: k = 21 5.00 ->
// 6.25, 9.72 -> 13.63, 6.16 -> 6.10; k = 17 4.25 -> 5.18, 7.64 -> 10.54, 5.22 -> 5.61;
// k = 9 1.54 -> 2.46, 1.66 -> 2.49. k = 13 gains on the two narrower maps (2.94 -> 2.70,
// 3.63 -> 2.74) but not on 128^4 (5.33 -> 5.89); 22-26 taps were not timed.
constexpr int64_t kBwdFilterGemvMinTaps = 27;

BwdFilterKernel select_bwd_filter_kernel(const DwConvParams& p, bool half_precision, bool deterministic) {
  if (!bwd_filter_split_applies(p)) return BwdFilterKernel::kDirect;
  if (!half_precision && p.kernel_w >= kBwdFilterGemvMinTaps && bwd_filter_gemv_applies(p)) {
    return BwdFilterKernel::kGemv;
  }
  const bool mma = half_precision && bwd_filter_mma_wins(p) && bwd_filter_mma_applies(p);
  if (mma && p.kernel_w < kBwdFilterMmaMinTaps) return BwdFilterKernel::kMma;  // ahead of the row-stream kernel
  if (!deterministic && bwd_filter_rowstream_applies(p, half_precision)) return BwdFilterKernel::kRowStream;
  return mma ? BwdFilterKernel::kMma : BwdFilterKernel::kSplit;
}

int64_t bwd_filter_workspace_bytes(const DwConvParams& p, bool deterministic, bool half_precision) {
  if (!bwd_filter_split_applies(p)) return 0;
  const BwdFilterGrid g = make_bwd_filter_grid(p, bwd_filter_tiling(p, half_precision), deterministic);
  const int64_t slices = g.atomic ? 1 : bwd_filter_splits(g);
  return slices * p.kernel_h * p.kernel_w * p.channels * int64_t(sizeof(float));
}

template cudaError_t run_dwconv_bwd_filter<float>(const DwConvParams&, const float*, const float*, float*,
                                                  float*, bool, cudaStream_t);

}  // namespace flashdwc
