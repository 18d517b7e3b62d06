// The thresholds that choose between kernels which can all run a problem, in one
// table, each with the measurement that set it. The plan functions (plan/fwd.cc,
// plan/bwd_filter.cc) read them; Python reads them through plan_thresholds().
// Limits of what a kernel can run at all are not here: they are its can_implement
// check, next to the plan function.
#pragma once

#include <cstdint>
#include <utility>

namespace flashdwc {

struct PlanThresholds {
  // Forward, fp16/bf16: narrowest filter the tensor-core kernel takes everywhere.
  // Kernel-level A/B on the H200 (docs/design-notes.md), bf16, tensor cores against
  // the CUDA-core kernels: KW = 7 took 0.59-0.69 of the time (0.634 against 1.061 ms
  // on 128^4, 0.338 against 0.551 on 128x64x64x256, 0.079 against 0.135 on ConvNeXt's
  // 128x28x28x192), and KW = 3 1.75-1.91x, so KW = 3 and 4 stay on CUDA cores. KW = 6
  // has no row-stream kernel; on tensor cores it takes 0.34-0.55 of the tiled GEMV
  // kernel's time.
  int64_t fwd_mma_min_kernel_w = 6;
  // KW = 5 goes to tensor cores only where the row-stream kernel is the slower one
  // (kernel A/B, tensor cores over row-stream): outputs wider than
  // fwd_mma_kw5_min_out_w (one image a strip; 128^4: 0.90 in bf16, 0.98 in fp16), or
  // C not a multiple of the row-stream kernel's 64-channel blocks (128x56x56x96:
  // 0.71). On the 64- and 32-wide paper maps, with 2 and 4 images a strip and C = 256
  // and 1024, tensor cores took 1.03-1.16 of the time.
  int64_t fwd_mma_kw5_kernel_w = 5;
  int64_t fwd_mma_kw5_min_out_w = 65;
  // Forward, fp16/bf16 on sm_90: the Hopper wgmma kernel (fwd/wgmma.cuh) from this
  // filter size in both directions. Stand-alone on the H200, bf16, 128x64x64x256 with
  // both transposes: k = 31 185.0 and k = 51 310.8 TFLOP/s against mma.sync's 148 and
  // 158; k = 17 83.1 against 106 (benchmarks/results/wgmma_fwd_h200.txt). Between 17
  // and 31, and filters under 31 in one direction (SLaK's 51x5 strips), unmeasured:
  // they stay on mma.sync.
  int64_t fwd_wgmma_min_kernel = 31;
  // Forward, Hopper kernel: maps of at least this many output columns, or filters at
  // least fwd_wgmma_narrow_min_kernel wide on narrower maps. A block's rows are 64-column
  // strips, so a 32-wide map fills half of each and the planar copies weigh more.
  // Through JAX on one H100, bf16 forward, k = 31, two rounds: 128x32x32x1024 2.96-3.01 ms
  // on wgmma against 2.40-2.43 on mma.sync (0.81x), 64x48x48x512 1.35-1.40 against
  // 1.41-1.47 (1.00-1.09x), RepLKNet-31B's 32x56x56x128 0.31 against 0.33 (forward) and
  // 0.39-0.41 against 0.35-0.40 (input gradient); 33-47 columns are unmeasured. At
  // k = 51 the 32-wide map gains (harness: 170.5 TFLOP/s end to end against mma.sync's
  // 152.5 on an H200).
  int64_t fwd_wgmma_min_out_w = 48;
  int64_t fwd_wgmma_narrow_min_kernel = 51;
  // Forward, fp16/bf16 3x3 and 5x5: the register-filter kernel takes C not a multiple
  // of 64 where the padding lanes (pairs rounded up to 32) are at most this percentage
  // of the pairs: EfficientNet-B0's 480 and 672 channels (7% and 5%), 240 (7%), 160
  // (20%); not 96, 144 or 200 (33%, 33%, 28%). On the 13 registry layers this moved
  // (H100, bf16) it took 0.63-0.98 of the replaced kernels' time (EfficientNet-B0's
  // 14x14x672 5x5: 0.060 -> 0.038 ms) and ran 1.07-1.49x XLA (docs/design-notes.md).
  // fp32 (one channel a lane, C a multiple of 4) takes the same limit on its words.
  int64_t fwd_regfilter_max_idle_lanes_pct = 25;
  // Forward, fp32 3x3 and 5x5: the register-filter kernel (one channel a lane) on maps
  // of at most this many output columns. The row-stream kernel, which takes fp32 there
  // otherwise, is bound by its small grid under 32 columns (34 us on a 7x7 map whatever
  // the filter), where the fp16/bf16 register-filter kernel took 0.38-0.63 of its time;
  // in fp32 MobileNetV2's 3x3 forward on 14x14 and 7x7 maps ran 0.65-0.87x XLA on it
  // and 1.00-1.48x on this kernel, 28x28x192 1.16x against 0.93x (H100, through JAX,
  // docs/performance.md). Wider fp32 maps keep the row-stream kernel (not timed
  // against this one).
  int64_t fwd_regfilter_fp32_max_out_w = 31;
  // Filter-gradient, fp16/bf16: tensor cores from 9 taps across, on any map. Kernel
  // A/B on the H200 (bf16, ms, split -> tensor cores): k = 9 on 64x32x32x1536 1.29 ->
  // 0.67, on 128x32x32x1024 1.70 -> 0.86, on 128x64x64x256 1.02 -> 0.73, on
  // 128x14x14x512 0.22 -> 0.14; k = 13 on 64x7x7x1024 0.32 -> 0.08; k = 31 on 128^4
  // 4.52 -> 3.30. Below 9 taps the 16-tap M tile is mostly padding: from 5 taps it
  // gave 0.94-0.98 at k = 7 on 56- to 128-wide maps (0.90 on 64x14x14x384) but 1.07
  // on 64x7x7x768 and 1.44 at k = 5 on 128x64x64x256. So k = 7 goes to tensor cores
  // on outputs at least 14 wide (ahead of the row-stream kernel), narrower filters
  // stay on the CUDA-core kernels. Against the kernels it displaced at k = 7 (ms):
  // bf16 128x64x64x256 0.696 -> 0.651, 128^4 1.295 -> 1.267, 64x56x56x96 0.138 ->
  // 0.128, 64x28x28x192 0.091 -> 0.081, 64x14x14x384 0.066 -> 0.048; it lost 1% on
  // 128x32x32x1024 (0.709 -> 0.717) and 2% in fp16 on 128x64x64x256 (0.638 ->
  // 0.651), where the row-stream kernel converts fp16 faster than bf16. One rule for
  // both half types keeps the choice a function of the shape.
  int64_t bwd_filter_mma_min_kernel_w = 9;
  int64_t bwd_filter_mma_kw7_kernel_w = 7;
  int64_t bwd_filter_mma_kw7_min_out_w = 14;
  // Filter-gradient row-stream kernel (KW 3, 5, 7, stride 1, atomic mode). Against the
  // split kernel on the H200 (kernel-level A/B) it took 0.74-0.97x the time at the 9
  // bf16 paper points with k <= 7 and 0.62-0.82x in fp32, but 1.41x on 64x56x56x96
  // (1.5 channel blocks), 1.00x on 28x28, 1.29x on 14x14 and 1.97x on 7x7 (few rows to
  // pipeline), so it takes whole channel blocks, outputs at least 32 wide, and the
  // filter heights that were timed (KH <= 7; the kernel itself handles up to 16).
  int64_t bwd_filter_rowstream_min_out_w = 32;
  int64_t bwd_filter_rowstream_max_kernel_h = 7;
  // Filter-gradient, fp32 at stride 1: the forward-as-filter-gradient GEMV kernel from
  // 27 taps across. Kernel-level A/B on the H200 (ms, split with filter rows -> gemv;
  // maps 128x64x64x256, 128^4, 128x32x32x1024): k = 51 47.24 -> 22.73, 85.46 -> 51.46,
  // 44.67 -> 20.40; k = 31 10.87 -> 8.93, 19.26 -> 18.71, 12.69 -> 8.42; k = 27 11.72
  // -> 7.87, 20.04 -> 16.51, 13.48 -> 7.18. Below, its KH x KW outputs fill too few of
  // the 8-wide thread tiles and 4-row warps, and the split kernel's rows per thread
  // win on most maps: k = 21 5.00 -> 6.25, 9.72 -> 13.63, 6.16 -> 6.10; k = 17 4.25 ->
  // 5.18, 7.64 -> 10.54, 5.22 -> 5.61; k = 9 1.54 -> 2.46, 1.66 -> 2.49. k = 13 gains
  // on the two narrower maps (2.94 -> 2.70, 3.63 -> 2.74) but not on 128^4 (5.33 ->
  // 5.89); 22-26 taps were not timed.
  int64_t bwd_filter_gemv_min_kernel_w = 27;
  // Filter-gradient small-filter kernel (square 3x3 and 5x5, stride 1 or 2, atomic
  // mode; bwd_filter/small.cuh): 1 = it runs ahead of the row-stream kernel where both
  // can. Where the row-stream kernel cannot (C not a multiple of its 64 half or 32
  // fp32 channels, outputs below 32 wide, stride 2) it replaces the split kernel,
  // which ran 0.41-0.81x XLA on the H100's MobileNet and EfficientNet layers; in its
  // place this kernel ran them at 0.67-2.72x (bf16, H100: 64x112x112x32 0.072 ms
  // against the split kernel's 0.197; docs/performance.md, Real-model layers). Against
  // the row-stream kernel the order is set from the design, not measured: fp16/bf16
  // ahead (the row-stream kernel's 64-wide strips leave 14- and 28-wide maps half
  // idle), fp32 behind (the row-stream kernel already moves 93% of the read rate at
  // fp32 3x3 on 128^4).
  int64_t bwd_filter_small_half_over_rowstream = 1;
  int64_t bwd_filter_small_f32_over_rowstream = 0;
  // fp16/bf16 filters at least this tall and at most this wide, at stride 1 without
  // dilation, run as the transposed problem (jax_flashdwc/conv.py): the fast kernels
  // are keyed on the filter width, and SLaK's 51x5 strips found the row-stream kernel
  // closed (KH > 16) and the tensor-core kernels too narrow; as 5x51 they take the
  // tensor-core ones. SLaK-T's bf16 training step at batch 64 took 36.55 ms against
  // 40.79 ms direct on the H200 (docs/design-notes.md).
  int64_t tall_filter_min_kernel_h = 13;
  int64_t tall_filter_max_kernel_w = 6;
};

inline constexpr PlanThresholds kPlanThresholds{};

// The table by name, for Python (plan_thresholds()).
template <typename Fn>
void for_each_threshold(Fn&& fn) {
  const PlanThresholds& t = kPlanThresholds;
  fn("fwd_mma_min_kernel_w", t.fwd_mma_min_kernel_w);
  fn("fwd_mma_kw5_kernel_w", t.fwd_mma_kw5_kernel_w);
  fn("fwd_mma_kw5_min_out_w", t.fwd_mma_kw5_min_out_w);
  fn("fwd_wgmma_min_kernel", t.fwd_wgmma_min_kernel);
  fn("fwd_wgmma_min_out_w", t.fwd_wgmma_min_out_w);
  fn("fwd_wgmma_narrow_min_kernel", t.fwd_wgmma_narrow_min_kernel);
  fn("fwd_regfilter_max_idle_lanes_pct", t.fwd_regfilter_max_idle_lanes_pct);
  fn("fwd_regfilter_fp32_max_out_w", t.fwd_regfilter_fp32_max_out_w);
  fn("bwd_filter_mma_min_kernel_w", t.bwd_filter_mma_min_kernel_w);
  fn("bwd_filter_mma_kw7_kernel_w", t.bwd_filter_mma_kw7_kernel_w);
  fn("bwd_filter_mma_kw7_min_out_w", t.bwd_filter_mma_kw7_min_out_w);
  fn("bwd_filter_rowstream_min_out_w", t.bwd_filter_rowstream_min_out_w);
  fn("bwd_filter_rowstream_max_kernel_h", t.bwd_filter_rowstream_max_kernel_h);
  fn("bwd_filter_gemv_min_kernel_w", t.bwd_filter_gemv_min_kernel_w);
  fn("bwd_filter_small_half_over_rowstream", t.bwd_filter_small_half_over_rowstream);
  fn("bwd_filter_small_f32_over_rowstream", t.bwd_filter_small_f32_over_rowstream);
  fn("tall_filter_min_kernel_h", t.tall_filter_min_kernel_h);
  fn("tall_filter_max_kernel_w", t.tall_filter_max_kernel_w);
}

}  // namespace flashdwc
