// The forward GEMV kernel's (fwd/gemv.cuh) per-problem grid, computed on the host by
// the plan (plan/fwd_launch.cc). Plain C++, so that the plan builds without CUDA.
#pragma once

#include <cstdint>

namespace flashdwc {

struct GemvFwdGrid {
  // Width segments of kTM outputs per output row: ceil(Wo / kTM).
  int64_t segments_per_row;
  // N * Ho output rows.
  int64_t rows;
  // Segments numbered in whole groups of kRowsPerWarp rows: ceil(rows / 4) * 4 * segments_per_row.
  int64_t segments;
  // Filter rows per shared-memory stage (kFwdGemvStageBytes, plan/fwd_launch.h).
  int64_t rows_per_stage;
};

}  // namespace flashdwc
