// The GEMV filter-gradient kernel's (bwd_filter/gemv.cuh) per-problem grid, computed
// on the host by the plan (plan/bwd_filter_launch.cc). Plain C++, so that the plan
// builds without CUDA.
#pragma once

#include <cstdint>

namespace flashdwc {

// A block is kRowsPerWarp filter rows (the lane groups of a warp, as in the forward)
// by `warps` segments of kTM taps (one a warp), so that the block's rows are whole:
// at each dy row it reads 4 x rows over warps * kTM + Wo - 1 columns, and more
// segments a block share more of those columns. Before, blocks were 4 warps of 16
// segments numbered across rows; at KW = 51 (7 segments a row) a block read up to 8
// x rows, and none of it stayed in L1 from one dy row to the next on 128-wide maps
// (137 GB of L1 misses at fp32 128^4 k = 51 on the H200, 58.5% L1 hits, 26.8
// TFLOP/s; 69.5% and 29.9 TFLOP/s on the 64-wide map).
inline constexpr int kBwdFilterGemvMaxWarps = 8;

struct BwdFilterGemvGrid {
  int64_t segments_per_row;  // ceil(KW / kTM)
  int warps;                 // segments a block: min(segments_per_row, kBwdFilterGemvMaxWarps)
  int64_t segment_blocks;    // blocks along a row group: ceil(segments_per_row / warps)
  int64_t rows_per_stage;    // dy rows per shared-memory stage
  int64_t stages_per_image;  // ceil(Ho / rows_per_stage)
  int64_t images_per_chunk;  // images one block sums (grid.z chunks; the last may have fewer or none)
  bool atomic;               // merge by atomicAdd into slice 0, else store into slice z
};

}  // namespace flashdwc
