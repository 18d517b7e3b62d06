// Filter gradient for 3x3 and 5x5 filters at stride 1 or 2 (square, no dilation),
// atomic mode, for the small maps and channel counts of MobileNet / EfficientNet
// layers:
//   dw[kh, kw, c] = sum over (n, oh, ow) of dy[n, oh, ow, c] * x[n, s*oh + kh - pad_top, s*ow + kw - pad_left, c]
//
// Why: on the H100 (bf16, batch 64) these layers ran on the split kernel at 0.41-0.81x
// XLA (benchmarks/results/layers_h100_80gb_hbm3.csv): 64x56x56x144 3x3 took 0.143 ms
// for 115.6 MB, 0.81 TB/s. The row-stream kernel, which reaches 93% of the read rate
// on large maps, takes only whole 64-channel (half) blocks and 32/64-wide strips: C =
// 32, 72, 144, 240 and 14- or 28-wide maps fall outside it. This kernel took the
// 56x56x144 layer in 0.078 ms (H100, bf16; XLA 0.111 in that run) and runs 1.16-2.72x
// XLA on maps of 56x56 and larger; on 28x28 and smaller ones and at 5x5 with symmetric
// padding it stays below XLA (0.67-1.04x), where jax_flashdwc/routing.py sends the pass.
//
// Each thread owns one output column and `width` channels (bwd_filter_small_width)
// for a run of output rows, and keeps all KH x KW taps of them in fp32 registers, so
// that x and dy pass through the block once. A block is `groups` channel groups x
// `cols` output columns (bwd_filter_small_grid.h picks them so that C = 144 or a
// 14-wide map leaves few of the 128 threads idle) and walks a run of m-steps of the
// image sequence. At stride s, input row q = s*m + r (padded numbering, r < s) meets
// dy row m - j through filter row kh = r + s*j, j < J = ceil(KH / s); so step m
// copies dy row m and input rows s*m .. s*m + s - 1, and a thread holds the last J
// dy rows (its column and channels, fp32) in a register ring. An image takes
// Ho + J - 1 steps: the last J - 1 have no dy row and only finish the earlier ones.
// Rows reach shared memory by cp.async, kBwdFilterSmallStages - 1 steps ahead, zero-
// filled outside the image and past C; one barrier a step.
//
// A run owns the dy rows of its steps [S0, S1) and runs J - 1 more steps to meet them
// with their later input rows. Ring slot j holds a dy row that counts only if it is
// owned and real (below Ho): a bit mask, the same for the whole block, selects the
// slots, so that an input row never meets a dy row of another run or image and an
// infinite x there makes no NaN.
//
// At the end the cols threads of each channel are summed through shared memory in
// column order, and the block adds KH x KW x its channels to the fp32 workspace with
// atomicAdd (one per tap and channel a block).
#pragma once

#include <cstdint>
#include <type_traits>

#include "bwd_filter/small_grid.h"
#include "common/cp_async.cuh"
#include "common/cuda_types.cuh"
#include "common/params.h"
#include "common/static_for.cuh"

namespace flashdwc {

template <typename T, int kK, int kStride>
struct BwdFilterSmallTraits {
  static constexpr int kThreads = kBwdFilterSmallThreads;
  static constexpr int kWidth = bwd_filter_small_width(!std::is_same_v<T, float>, kK);
  static constexpr int kCopyBytes = kWidth * int(sizeof(T));  // 16, or 8 for half 5x5
  using Vec = std::conditional_t<kWidth == 8, Vec16<T>, Vec4<T>>;
  static constexpr int kRing = bwd_filter_small_ring(kK, kStride);
  static constexpr int kStages = bwd_filter_small_stages(kCopyBytes);
  // Copy passes of the x rows: stride x x_cols x groups vectors over 128 threads, with
  // groups <= 32 and groups x cols <= 128 (bwd_filter/small_grid.h).
  static constexpr int kXPasses =
      (kStride * (kStride * kThreads + (kK - kStride) * kBwdFilterSmallMaxGroups) + kThreads - 1) / kThreads;
};

// 3 resident blocks of 128 threads cap the registers at 168: fp16/bf16 3x3 holds 72
// sums and a 24-register ring, 5x5 100 sums and a 12- to 20-register ring.
template <typename T, int kK, int kStride>
__global__ void __launch_bounds__(kBwdFilterSmallThreads, 3)
dwconv_bwd_filter_small_kernel(const T* __restrict__ x, const T* __restrict__ dy, float* __restrict__ ws,
                               DwConvParams p, BwdFilterSmallGrid grid) {
  using Tr = BwdFilterSmallTraits<T, kK, kStride>;
  constexpr int kWidth = Tr::kWidth;
  constexpr int kRing = Tr::kRing;
  constexpr int kThreads = Tr::kThreads;
  using Vec = typename Tr::Vec;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* stages = reinterpret_cast<T*>(smem_raw);  // (kStages, [dy: cols, groups, width], [x: s, x_cols, groups, width])

  const int groups = grid.groups;
  const int group_elems = groups * kWidth;
  const int64_t channel_block = int64_t(blockIdx.x) % grid.channel_blocks;
  const int64_t spatial = int64_t(blockIdx.x) / grid.channel_blocks;
  const int64_t col_block = spatial % grid.col_blocks;
  const int64_t run = spatial / grid.col_blocks;
  const int64_t channel_base = channel_block * group_elems;
  const int64_t ow_begin = col_block * grid.cols;
  const int64_t iw_begin = kStride * ow_begin - p.pad_left;
  const int64_t step_begin = run * grid.steps_per_run;
  const int owned = int(min(step_begin + grid.steps_per_run, grid.sequence_steps) - step_begin);
  const int steps = int(min(int64_t(owned) + kRing - 1, grid.sequence_steps - step_begin));

  // Copy offsets, set once: dy element t is (col t / groups, group t % groups); x
  // element e = t + pass * 128 is (row e / (x_cols * groups), col, group), the stage's
  // own layout, so that the destination is e * width. -1: outside the row or past C.
  const int t = threadIdx.x;
  int dy_offset = -1;
  if (t < grid.cols * groups) {
    const int64_t ow = ow_begin + t / groups;
    const int64_t c = channel_base + (t % groups) * kWidth;
    if (ow < p.out_w && c < p.channels) dy_offset = int(ow * p.channels + c);
  }
  const int x_row_elems = grid.x_cols * groups;
  int x_offset[Tr::kXPasses];
  unsigned x_row_bits = 0;  // bit pass: the pass's element is in the stage's row 1 (stride 2)
#pragma unroll
  for (int pass = 0; pass < Tr::kXPasses; ++pass) {
    const int e = t + pass * kThreads;
    x_offset[pass] = -1;
    if (e < kStride * x_row_elems) {
      const int r = e / x_row_elems;
      const int rest = e - r * x_row_elems;
      const int64_t iw = iw_begin + rest / groups;
      const int64_t c = channel_base + (rest % groups) * kWidth;
      if (iw >= 0 && iw < p.in_w && c < p.channels) x_offset[pass] = int(iw * p.channels + c);
      if (r) x_row_bits |= 1u << pass;
    }
  }
  const int64_t dy_stage_elems = int64_t(grid.cols) * group_elems;

  // Issue side: the step whose rows are copied next, kept by increments.
  // Step counts fit an int (can_implement_bwd_filter_small): fewer registers beside
  // 5x5's 100 sums.
  const int image_steps = int(grid.image_steps);
  int copy_image = int(step_begin / image_steps);
  int copy_m = int(step_begin % image_steps);
  int copy_step = 0, copy_slot = 0;
  auto copy_next = [&]() {
    if (copy_step < steps) {
      T* stage = stages + int64_t(copy_slot) * grid.stage_elems;
      // Drain steps (past the owned ones) and the image's last J - 1 steps have no dy row.
      const bool dy_row = copy_step < owned && copy_m < p.out_h;
      const T* dy_src = dy + (int64_t(copy_image) * p.out_h + (dy_row ? copy_m : 0)) * p.out_w * p.channels;
      const bool dy_valid = dy_row && dy_offset >= 0;
      if (t < grid.cols * groups) {
        cp_async<Tr::kCopyBytes>(stage + t * kWidth, dy_valid ? dy_src + dy_offset : dy, dy_valid);
      }
      // Row r of the stage (r < stride) and its base; selected, not indexed, so that
      // they stay in registers.
      const int64_t ih0 = int64_t(kStride) * copy_m - p.pad_top;
      const bool row0 = ih0 >= 0 && ih0 < p.in_h;
      const bool row1 = kStride == 2 && ih0 + 1 >= 0 && ih0 + 1 < p.in_h;
      const int64_t image_row = int64_t(copy_image) * p.in_h;
      const T* x_row0 = x + (image_row + (row0 ? ih0 : 0)) * p.in_w * p.channels;
      const T* x_row1 = x + (image_row + (row1 ? ih0 + 1 : 0)) * p.in_w * p.channels;
      T* x_stage = stage + dy_stage_elems;
#pragma unroll
      for (int pass = 0; pass < Tr::kXPasses; ++pass) {
        const int e = t + pass * kThreads;
        if (e < kStride * x_row_elems) {
          const bool second = kStride == 2 && (x_row_bits >> pass & 1u);
          const bool valid = x_offset[pass] >= 0 && (second ? row1 : row0);
          cp_async<Tr::kCopyBytes>(x_stage + int64_t(e) * kWidth, valid ? (second ? x_row1 : x_row0) + x_offset[pass] : x,
                                   valid);
        }
      }
    }
    ++copy_step;
    copy_slot = copy_slot + 1 == Tr::kStages ? 0 : copy_slot + 1;
    if (++copy_m == image_steps) copy_m = 0, ++copy_image;
  };

  // Commit groups 0 .. kStages - 2 hold steps 0 .. kStages - 2; iteration l commits
  // step l + kStages - 1 (an empty group past the last), so step l is complete once
  // at most kStages - 2 groups are pending.
  for (int j = 0; j < Tr::kStages - 1; ++j) {
    copy_next();
    cp_async_commit();
  }

  const int group = t % groups;
  const int col = t / groups;
  const bool active = dy_offset >= 0;  // a real column and channel group
  float acc[kK][kK][kWidth];
#pragma unroll
  for (int kh = 0; kh < kK; ++kh)
#pragma unroll
    for (int kw = 0; kw < kK; ++kw)
#pragma unroll
      for (int i = 0; i < kWidth; ++i) acc[kh][kw][i] = 0.0f;
  float ring[kRing][kWidth];
#pragma unroll
  for (int j = 0; j < kRing; ++j)
#pragma unroll
    for (int i = 0; i < kWidth; ++i) ring[j][i] = 0.0f;

  const int dy_read = (col * groups + group) * kWidth;
  const int x_read = (kStride * col * groups + group) * kWidth;  // column s * col of row 0
  int m = int(step_begin % image_steps);
  unsigned counts = 0;  // bit j: ring slot of the dy row j steps back counts
  int slot = 0;
  // Step l (slot = l % kStages): its dy row goes to ring slot l % kRing, given as a
  // constant u by the unrolled loop below, and its input rows meet slots (u - j) % kRing.
  auto step = [&](auto u_const, int l) {
    constexpr int u = decltype(u_const)::value;
    cp_async_wait<Tr::kStages - 2>();
    // Makes step l's copies visible, and ends every thread's reads of step l - 1,
    // whose stage the next copies reuse.
    __syncthreads();
    copy_next();
    cp_async_commit();
    const bool real = l < owned && m < p.out_h;
    counts = ((counts << 1) | (real ? 1u : 0u)) & ((1u << kRing) - 1u);
    if (++m == image_steps) m = 0;
    const T* stage = stages + int64_t(slot) * grid.stage_elems;
    slot = slot + 1 == Tr::kStages ? 0 : slot + 1;
    if (!active || counts == 0) return;
    if (real) Vec::load_shared(stage + dy_read, ring[u]);
    const T* x_stage = stage + dy_stage_elems + x_read;
    auto rows = [&](auto all) {  // all: every slot counts (the run's middle), no per-slot test
#pragma unroll
      for (int r = 0; r < kStride; ++r) {
#pragma unroll
        for (int kw = 0; kw < kK; ++kw) {
          float xv[kWidth];
          Vec::load_shared(x_stage + (int64_t(r) * x_row_elems + kw * groups) * kWidth, xv);
#pragma unroll
          for (int j = 0; j < kRing; ++j) {
            const int kh = r + kStride * j;
            if (kh >= kK) continue;
            if (!decltype(all)::value && !(counts >> j & 1u)) continue;
            constexpr int kSlotBase = u + kRing;  // (u - j) mod kRing, j < kRing
#pragma unroll
            for (int i = 0; i < kWidth; ++i)
              acc[kh][kw][i] = fmaf(xv[i], ring[(kSlotBase - j) % kRing][i], acc[kh][kw][i]);
          }
        }
      }
    };
    if (counts == (1u << kRing) - 1u) {
      rows(std::true_type{});
    } else {
      rows(std::false_type{});
    }
  };
  int l = 0;
  for (; l + kRing <= steps; l += kRing) {
    static_for<0, kRing>([&](auto u) { step(u, l + decltype(u)::value); });
  }
  static_for<0, kRing - 1>([&](auto u) {
    if (l + decltype(u)::value < steps) step(u, l + decltype(u)::value);
  });
  // No copy may be in flight when the stages become the partial sums.
  cp_async_wait<0>();
  __syncthreads();

  // Partials (tap, col, group, width), then each (tap, channel) of the block summed
  // over its columns in order by one thread.
  float* partials = reinterpret_cast<float*>(smem_raw);
  const int64_t tap_elems = int64_t(grid.cols) * group_elems;
  if (t < grid.cols * groups) {
#pragma unroll
    for (int kh = 0; kh < kK; ++kh)
#pragma unroll
      for (int kw = 0; kw < kK; ++kw)
#pragma unroll
        for (int i = 0; i < kWidth; ++i) partials[(kh * kK + kw) * tap_elems + dy_read + i] = acc[kh][kw][i];
  }
  __syncthreads();
  const int cols_inside = int(min(int64_t(grid.cols), p.out_w - ow_begin));
  for (int o = t; o < kK * kK * group_elems; o += kThreads) {
    const int tap = o / group_elems;
    const int channel = o - tap * group_elems;
    if (channel_base + channel >= p.channels) continue;
    const float* src = partials + tap * tap_elems + channel;
    float sum = 0.0f;
    for (int c = 0; c < cols_inside; ++c) sum += src[int64_t(c) * group_elems];
    atomicAdd(ws + int64_t(tap) * p.channels + channel_base + channel, sum);
  }
}

}  // namespace flashdwc
