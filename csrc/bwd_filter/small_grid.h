// Host-side geometry of the small-filter filter-gradient kernel (bwd_filter/small.cuh):
// the channels a thread holds, the block's split into channel groups and output
// columns, and the row runs of the launch. Plain C++, so that the plan and the numpy
// model (tests/cuda/bwd_filter_small_model.py, which mirrors these functions) agree.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/params.h"

namespace flashdwc {

inline constexpr int kBwdFilterSmallThreads = 128;
// At most this many channel groups a block: a wider block leaves Cols at 1-3 and the
// x stage repeats KW - 1 halo columns for every 1-3 it keeps, and the copy passes
// (bwd_filter/small.cuh, kXPasses) stay within 2 at stride 1 and 6 at stride 2.
inline constexpr int kBwdFilterSmallMaxGroups = 32;
// Pipeline stages in shared memory: 3 steps copied ahead of the one being summed, 5
// for 8-byte copies (fp16/bf16 5x5), whose stages carry half the bytes. Sized so that
// 3 blocks an SM keep about 30 KB or more of new x and dy in flight (an H100 needs
// about 3.35 TB/s x 0.7 us / 132 SMs = 18 KB).
constexpr int bwd_filter_small_stages(int copy_bytes) { return copy_bytes == 16 ? 4 : 6; }
// Fewest m-steps a block's run owns. Every block ends with KH x KW x channels atomic
// adds and re-reads (J - 1) x stride halo rows, so short runs pay both; too long a
// floor leaves small maps few blocks. Kernel harness (H100, bf16,
// benchmarks/cuda/time_bwd_filter_small.cu): against 24, a floor of 8 took 0.58-0.85
// of the time on the registry layers that had launched under about 250 blocks
// (InceptionNeXt-T's 7x7x96 3x3: 24 -> 72 blocks, 0.0185 -> 0.0114 ms) and the same on
// those at 374-396; 6 and 4 were no better overall (docs/design-notes.md).
inline constexpr int64_t kBwdFilterSmallMinRunSteps = 8;

// Channels a thread holds: the kernel keeps KH x KW x width fp32 sums in registers,
// 72 for fp16/bf16 3x3 (one 16-byte copy a group); 5x5 holds 4 channels (100 sums:
// 8 would be 200, past the 168 registers that 3 blocks of 128 threads leave); fp32
// holds 4 (16 bytes).
constexpr int bwd_filter_small_width(bool half_precision, int64_t kernel_w) {
  return half_precision && kernel_w == 3 ? 8 : 4;
}

// Dy-row slots a thread keeps: ceil(KH / stride). Input row q = stride * m + r of an
// image (padded numbering, r < stride) meets dy rows m - j with kh = r + stride * j.
constexpr int bwd_filter_small_ring(int64_t kernel_h, int64_t stride) {
  return int((kernel_h + stride - 1) / stride);
}

struct BwdFilterSmallGrid {
  int groups;               // channel groups a block: its channels are groups x width
  int cols;                 // output columns a block
  int x_cols;               // input columns of a staged x row: stride * (cols - 1) + KW
  int64_t channel_blocks;   // ceil(C / width / groups), fastest in blockIdx.x
  int64_t col_blocks;       // ceil(Wo / cols)
  int64_t image_steps;      // m-steps an image: Ho + J - 1
  int64_t sequence_steps;   // N x image_steps
  int64_t steps_per_run;    // m-steps a block owns (the last run may own fewer)
  int64_t runs;             // ceil(sequence_steps / steps_per_run)
  int64_t stage_elems;      // elements of T in one pipeline stage: dy row, then stride x rows
  int64_t smem_bytes;       // max(the stages, the partial sums: KH x KW x cols x groups x width floats)
};

// The split of a block's 128 threads into (groups, cols), thread t = col x groups +
// group: the fewest blocks a row of the output (channel blocks x column blocks), then
// the most groups (a block's threads read one contiguous run of a pixel's channels);
// then cols as even as the column blocks allow.
// min_run_steps: the fewest m-steps a run owns (the library's kBwdFilterSmallMinRunSteps;
// benchmarks/cuda/time_bwd_filter_small.cu times others).
inline BwdFilterSmallGrid make_bwd_filter_small_grid(const DwConvParams& p, int width, int elem_bytes,
                                                     int64_t resident_blocks,
                                                     int64_t min_run_steps = kBwdFilterSmallMinRunSteps) {
  BwdFilterSmallGrid g{};
  const int64_t all_groups = std::max<int64_t>((p.channels + width - 1) / width, 1);
  const int64_t out_w = std::max<int64_t>(p.out_w, 1);
  int64_t best = INT64_MAX;
  for (int groups = 1; groups <= std::min<int64_t>(all_groups, kBwdFilterSmallMaxGroups); ++groups) {
    const int64_t cols = std::min<int64_t>(kBwdFilterSmallThreads / groups, out_w);
    const int64_t blocks = (all_groups + groups - 1) / groups * ((out_w + cols - 1) / cols);
    if (blocks <= best) best = blocks, g.groups = groups;  // ties: the later, larger group count
  }
  g.channel_blocks = (all_groups + g.groups - 1) / g.groups;
  const int64_t most_cols = std::min<int64_t>(kBwdFilterSmallThreads / g.groups, out_w);
  g.col_blocks = (out_w + most_cols - 1) / most_cols;
  g.cols = int((out_w + g.col_blocks - 1) / g.col_blocks);
  g.x_cols = int(p.stride_w * (g.cols - 1) + p.kernel_w);
  const int ring = bwd_filter_small_ring(p.kernel_h, p.stride_h);
  g.image_steps = p.out_h + ring - 1;
  g.sequence_steps = p.batch * g.image_steps;
  const int64_t per_row = g.channel_blocks * g.col_blocks;
  int64_t runs = std::max<int64_t>(resident_blocks / per_row, 1);
  runs = std::min(runs, std::max<int64_t>(g.sequence_steps / std::max<int64_t>(min_run_steps, 1), 1));
  g.steps_per_run = std::max<int64_t>((g.sequence_steps + runs - 1) / runs, 1);
  g.runs = (g.sequence_steps + g.steps_per_run - 1) / g.steps_per_run;
  const int64_t group_elems = int64_t(g.groups) * width;
  g.stage_elems = (int64_t(g.cols) + p.stride_h * g.x_cols) * group_elems;
  const int64_t partial_bytes = p.kernel_h * p.kernel_w * g.cols * group_elems * int64_t(sizeof(float));
  g.smem_bytes = std::max(bwd_filter_small_stages(width * elem_bytes) * g.stage_elems * elem_bytes, partial_bytes);
  return g;
}

}  // namespace flashdwc
