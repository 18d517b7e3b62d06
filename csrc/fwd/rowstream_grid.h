// The forward row-stream kernel's (fwd/rowstream.cuh) per-problem grid and shared
// memory, computed on the host by the plan (plan/fwd_launch.cc). Plain C++, so that
// the plan builds without CUDA; the kernel's traits are static_asserted against the
// sizes here (fwd/launch.cu).
#pragma once

#include <cstdint>

namespace flashdwc {

// Threads a block, channels a block (8 groups of 16 bytes), output columns a thread
// group's strip (16 column threads x TM), and input rows in flight ahead.
inline constexpr int kFwdRowStreamThreads = 128;
constexpr int64_t fwd_rowstream_block_channels(int64_t elem_bytes) { return 8 * (16 / elem_bytes); }
constexpr int64_t fwd_rowstream_strip_width(int64_t tm) { return 16 * tm; }
inline constexpr int kFwdRowStreamPrefetchRows = 2;

struct RowStreamGrid {
  // Output-column strips per image: ceil(Wo / kStripWidth).
  int64_t strips;
  // Output rows per block (the last block of an image may have fewer).
  int64_t rows_per_block;
  // Blocks per image and strip: ceil(Ho / rows_per_block).
  int64_t row_blocks;
  // Ring slots: KH + kPrefetchRows.
  int ring_rows;
  // ceil(C / kBlockChannels); the fastest-varying part of blockIdx.x.
  int64_t channel_blocks;
};

// Bytes of dynamic shared memory: the ring of input rows, then the filter slice
// (always fp32, see the kernel). `images`: images side by side in a strip.
constexpr int64_t fwd_rowstream_smem_bytes(int64_t elem_bytes, int64_t tm, int64_t images, int64_t kernel_h,
                                           int64_t kernel_w) {
  const int64_t block_channels = fwd_rowstream_block_channels(elem_bytes);
  const int64_t row_bytes = (fwd_rowstream_strip_width(tm) + images * (kernel_w - 1)) * block_channels * elem_bytes;
  return (kernel_h + kFwdRowStreamPrefetchRows) * row_bytes +
         kernel_h * kernel_w * block_channels * int64_t(sizeof(float));
}

}  // namespace flashdwc
