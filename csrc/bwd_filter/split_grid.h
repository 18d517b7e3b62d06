// The split filter-gradient kernel's (bwd_filter/split.cuh) per-problem grid,
// computed on the host by the plan (plan/bwd_filter_launch.cc). Plain C++, so that the
// plan builds without CUDA; the kernel's traits are static_asserted against the sizes
// here (bwd_filter/launch.cuh).
#pragma once

#include <cstdint>

namespace flashdwc {

// Threads a block; channels a block and tile slots a block for `width` channels a
// thread (1: one channel a lane, 32 groups; 4 and 8: 8 groups of a 16- or 8-byte load).
inline constexpr int kBwdFilterSplitThreads = 128;
constexpr int64_t bwd_filter_split_block_channels(int width) { return width == 8 ? 64 : 32; }
constexpr int bwd_filter_split_slots(int width) { return width == 1 ? 4 : 16; }

struct BwdFilterGrid {
  int64_t kw_tiles;        // ceil(KW / kTM)
  int64_t tiles;           // ceil(KH / kRows) * kw_tiles
  int tiles_per_block;     // min(16, tiles)
  int lanes;               // 16 / tiles_per_block: rows of a chunk walked side by side
  int64_t rows_per_image;  // Ho + kRows - 1
  int64_t rows;            // N * rows_per_image
  int64_t rows_per_split;  // rows of one chunk (blockIdx.z)
  bool atomic;             // merge by atomicAdd into slice 0, else store into slice z
};

inline int64_t bwd_filter_splits(const BwdFilterGrid& g) {
  return (g.rows + g.rows_per_split - 1) / g.rows_per_split;
}

}  // namespace flashdwc
