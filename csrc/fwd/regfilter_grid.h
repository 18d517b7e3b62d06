// The forward register-filter kernel's (fwd/regfilter.cuh) per-problem grid, computed
// on the host by the plan (plan/fwd_launch.cc). Plain C++, so that the plan builds
// without CUDA.
#pragma once

#include <cstdint>

namespace flashdwc {

// With dilation d the kernel runs each of the d_h x d_w residue classes of the output
// (rows d_h * q + r_h, columns d_w * s + r_w) as its own undilated image: output row
// d_h * q + r_h reads input rows d_h * (q + kh) + r_h - pad_top, so consecutive rows of
// one residue share K - 1 input rows exactly as consecutive rows do at d = 1. The
// residues are addressed in place (row and column pitches of d), not copied out.
struct RegFilterGrid {
  int64_t words;           // 32-bit words of a pixel: C / 2 channel pairs (fp16/bf16), C (fp32)
  int64_t lane_words;      // words rounded up to 32: the fastest part of a thread's index
  int64_t strips;          // ceil(ceil(out_w / dilation_w) / kTW): strips of a column residue
  int64_t columns;         // batch * dilation_w * strips * lane_words: threads of one row block
  int64_t rows_per_block;  // output rows of a row block, counted in one row residue's rows
  int64_t row_blocks;      // row blocks of a row residue: blockIdx.y = residue * row_blocks + block
};

}  // namespace flashdwc
