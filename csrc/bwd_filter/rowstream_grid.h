// The row-stream filter-gradient kernel's (bwd_filter/rowstream.cuh) per-problem grid
// and shared memory, computed on the host: the plan (plan/bwd_filter_launch.cc) sets
// all but the row runs, which the launcher sets from the kernel's occupancy
// (bwd_filter/launch.cuh). Plain C++, so that the plan builds without CUDA; the
// kernel's traits are static_asserted against the sizes here.
#pragma once

#include <cstdint>

namespace flashdwc {

// Threads a block, channels a block (8 groups of 16 bytes), workers a block (16
// column segments of 8 threads), rows copied ahead, dy-ring rows.
inline constexpr int kBwdFilterRowStreamThreads = 128;
constexpr int64_t bwd_filter_rowstream_block_channels(int64_t elem_bytes) { return 8 * (16 / elem_bytes); }
inline constexpr int kBwdFilterRowStreamWorkers = 16;
inline constexpr int kBwdFilterRowStreamPrefetchRows = 2;
inline constexpr int kBwdFilterRowStreamDyRing = kBwdFilterRowStreamPrefetchRows + 1;

struct BwdFilterRowStreamGrid {
  int64_t strips;          // ceil(Wo / kStrip)
  int image_rows;          // rows of one image in the sequence: Ho + KH - 1
  int64_t sequence_rows;   // output rows of the sequence: N * image_rows - (KH - 1)
  int64_t rows_per_block;  // sequence rows per block (the last block may have fewer)
  int64_t row_blocks;      // ceil(sequence_rows / rows_per_block)
  int x_ring;              // input-row slots: KH + kPrefetchRows
  int segments;            // column segments of the strip: 16 / KH
  int64_t channel_blocks;  // C / kBlockChannels, the fastest-varying part of blockIdx.x
};

// Bytes of dynamic shared memory: the input-row ring, then the dy-row ring; after
// the last row the same bytes hold the workers' partial sums.
constexpr int64_t bwd_filter_rowstream_smem_bytes(int64_t elem_bytes, int64_t strip, int64_t kernel_w,
                                                  int64_t kernel_h) {
  const int64_t channel_bytes = bwd_filter_rowstream_block_channels(elem_bytes) * elem_bytes;
  const int64_t rings = (kernel_h + kBwdFilterRowStreamPrefetchRows) * (strip + kernel_w - 1) * channel_bytes +
                        kBwdFilterRowStreamDyRing * strip * channel_bytes;
  const int64_t partials = int64_t(kBwdFilterRowStreamWorkers) * kernel_w *
                           bwd_filter_rowstream_block_channels(elem_bytes) * int64_t(sizeof(float));
  return rings > partials ? rings : partials;
}

}  // namespace flashdwc
