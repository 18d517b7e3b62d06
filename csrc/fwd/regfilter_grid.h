// The forward register-filter kernel's (fwd/regfilter.cuh) per-problem grid, computed
// on the host by the plan (plan/fwd_launch.cc). Plain C++, so that the plan builds
// without CUDA.
#pragma once

#include <cstdint>

namespace flashdwc {

struct RegFilterGrid {
  int64_t words;           // 32-bit words of a pixel: C / 2 channel pairs (fp16/bf16), C (fp32)
  int64_t lane_words;      // words rounded up to 32: the fastest part of a thread's index
  int64_t strips;          // ceil(out_w / kTW)
  int64_t columns;         // batch * strips * lane_words: threads of one row block
  int64_t rows_per_block;  // output rows of a row block (blockIdx.y)
};

}  // namespace flashdwc
