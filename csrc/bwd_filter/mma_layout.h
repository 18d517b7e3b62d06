// The filter-gradient tensor-core kernel's block layout (bwd_filter/mma.cuh): its
// fixed sizes, the per-problem grid the host computes, and the shared memory a grid
// takes. Host code that needs no CUDA headers, so that the plan (plan/bwd_filter.cc)
// checks the kernel's shared memory on a CPU-only build too.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/params.h"

namespace flashdwc {

struct MmaBwdFilterTraits {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockChannels = 8;
  static constexpr int kWarpChannels = kBlockChannels / kWarps;  // 2
  static constexpr int kMaxTiles = 4;
  static constexpr int kMaxKernelW = 16 * kMaxTiles;  // at most 4 M tiles, one N tile
};

// Problem-derived values computed once on the host (make_mma_bwd_filter_grid, for
// plan/bwd_filter_launch.cc).
struct MmaBwdFilterGrid {
  int m_tiles;      // ceil(KW / 16)
  int n_per_group;  // N tiles (8 filter rows each) per block, m_tiles * n_per_group <= kMaxTiles
  int groups;       // ceil(ceil(KH / 8) / n_per_group): blockIdx.x
  int k_tiles;      // ceil(Wo / 16)
  int stage_rows;   // input rows staged together (one image, consecutive)
  int ring_rows;    // dy rows the ring holds: 8 * n_per_group + stage_rows - 1
  int x_words;      // 32-bit words per input-plane copy, 16 mod 32 (the two copies' A reads hit disjoint banks)
  int dy_words;     // 32-bit words per ring row, 4 mod 32 (a B read's 8 rows hit disjoint banks)
  int dy_offset;    // byte offset of the ring in shared memory (after stage_rows input-row slots)
  int64_t rows;            // N * H input rows
  int64_t rows_per_split;  // input rows per chunk (blockIdx.z)
  bool atomic;             // merge by atomicAdd into slice 0, else store into slice z
};

// Blocks the kernel aims for in atomic mode, as the split kernel (plan/bwd_filter_launch.cc).
inline constexpr int64_t kMmaBwdFilterTargetBlocks = 2048;
// Input rows a chunk takes at least: each chunk first stages every dy row of its
// group, so a chunk much shorter than the ring would mostly stage.
inline constexpr int64_t kMmaBwdFilterMinRowsPerRingRow = 2;
// K tiles (16 output columns each) a stage of input rows aims for: 8 rows on maps
// at most 32 columns wide, 4 at 64, 2 at 128, one from 256. Against 8 K tiles (half
// the rows, so 6 blocks an SM fit on 32-column maps instead of 4), the H200 timed
// 1.00-1.02 on 32-column maps and 1.02-1.15 slower elsewhere (k = 31 on 128^4 3.30 ->
// 3.71 ms; docs/design-notes.md).
inline constexpr int kMmaBwdFilterStageKTiles = 16;
inline constexpr int kMmaBwdFilterMaxStageRows = 8;

inline int64_t mma_bwd_filter_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The smallest n >= at_least with n % 32 == residue.
inline int round_up_mod32(int64_t at_least, int residue) {
  const int64_t n = at_least + ((residue - at_least) % 32 + 32) % 32;
  return int(n);
}

// The input planes, the dy ring, and one row of zeros after it.
inline int64_t mma_bwd_filter_smem_bytes(const MmaBwdFilterGrid& g) {
  using Tr = MmaBwdFilterTraits;
  return int64_t(g.dy_offset) + (int64_t(Tr::kBlockChannels) * g.ring_rows + 1) * g.dy_words * 4;
}

// n_per_group as wide as the tile budget allows, halved until the ring fits
// `max_smem` (then one input row a stage); `slices` row chunks (deterministic), or
// as many as fill the GPU (slices == 0, atomic).
inline MmaBwdFilterGrid make_mma_bwd_filter_grid(const DwConvParams& p, int64_t slices, int64_t max_smem) {
  using Tr = MmaBwdFilterTraits;
  MmaBwdFilterGrid g;
  g.m_tiles = int(mma_bwd_filter_ceil_div(p.kernel_w, 16));
  const int n_total = int(std::min<int64_t>(mma_bwd_filter_ceil_div(p.kernel_h, 8), INT32_MAX / 8));
  g.k_tiles = int(mma_bwd_filter_ceil_div(p.out_w, 16));
  // Words per plane copy: 16 (K + M) elements cover every A read (see the kernel).
  g.x_words = round_up_mod32(8 * (int64_t(g.k_tiles) + g.m_tiles), 16);
  g.dy_words = round_up_mod32(8 * int64_t(g.k_tiles), 4);
  g.stage_rows = std::clamp(kMmaBwdFilterStageKTiles / g.k_tiles, 1, kMmaBwdFilterMaxStageRows);
  g.n_per_group = std::max(1, std::min(Tr::kMaxTiles / g.m_tiles, n_total));
  for (;;) {
    g.ring_rows = 8 * g.n_per_group + g.stage_rows - 1;
    g.dy_offset = g.stage_rows * Tr::kBlockChannels * 2 * g.x_words * 4;
    if (mma_bwd_filter_smem_bytes(g) <= max_smem || (g.n_per_group == 1 && g.stage_rows == 1)) break;
    if (g.n_per_group > 1) {
      g.n_per_group /= 2;
    } else {
      g.stage_rows = 1;
    }
  }
  g.groups = int(mma_bwd_filter_ceil_div(n_total, g.n_per_group));
  g.rows = p.batch * p.in_h;
  if (slices > 0) {
    // Chunks past the rows (slices > N * H) run no row and store zeros.
    g.rows_per_split = mma_bwd_filter_ceil_div(g.rows, slices);
    g.atomic = false;
  } else {
    const int64_t blocks_xy = int64_t(g.groups) * mma_bwd_filter_ceil_div(p.channels, Tr::kBlockChannels);
    int64_t splits = mma_bwd_filter_ceil_div(kMmaBwdFilterTargetBlocks, blocks_xy);
    splits = std::min(splits, mma_bwd_filter_ceil_div(g.rows, kMmaBwdFilterMinRowsPerRingRow * g.ring_rows));
    splits = std::clamp<int64_t>(splits, 1, 65535);
    g.rows_per_split = mma_bwd_filter_ceil_div(g.rows, splits);
    g.atomic = true;
  }
  return g;
}

}  // namespace flashdwc
