// Index math of the stride-2 forward kernel (fwd/stride2.cuh), shared by the plan
// (plan/fwd.cc: can it run), the launcher (the grid) and the kernel (a thread's column,
// run of rows and window slots); the numpy model tests/cuda/fwd_stride2_model.py
// mirrors it line for line.
//
// With stride 2 and dilation 1, output row o reads input rows 2o - pad_top + k, k = 0
// .. K - 1, and output row o + 1 the K - 2 last of them and two more. A thread owns one
// output column ow of one channel group and walks down a run of output rows; its
// window is the K x K input block of the current row (columns 2ow - pad_left + j),
// held as K row slots. Counting the input rows a run walks from t = 0 (input row
// 2 o_begin - pad_top + t), row t lives in slot t % K: step i reads rows t = 2i ..
// 2i + K - 1, and once it has used rows 2i and 2i + 1 their slots take rows 2i + K and
// 2i + K + 1, the next step's two new rows. Slots are constants after unrolling the
// walk by K steps (2i % K repeats with period K, K odd).
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "common/params.h"

namespace flashdwc {

// Channels a thread: 16-byte vectors at 3x3 (8 fp16/bf16, 4 fp32), 8-byte ones at
// 5x5 (4, 2), whose window (25 vectors) and filter (25 taps x width fp32) would not
// fit the register cap at 16 bytes.
constexpr int64_t fwd_stride2_width(int64_t kernel, bool half_precision) {
  return kernel == 3 ? (half_precision ? 8 : 4) : (half_precision ? 4 : 2);
}

// Threads a block.
inline constexpr int kFwdStride2Threads = 128;

// The kernel's grid: blockIdx.y over images (a grid-stride loop past 65535), x over
// an image's slots, channel group fastest, then the output column, then the run of
// rows_per_thread output rows.
struct FwdStride2Grid {
  int64_t rows_per_thread;  // output rows a thread walks (a run)
  int64_t runs;             // runs down the image
  int64_t groups;           // channel groups of `width` channels
  int64_t slots;            // runs * out_w * groups: threads an image
};

inline FwdStride2Grid make_fwd_stride2_grid(const DwConvParams& p, int64_t width, int64_t rows_per_thread) {
  FwdStride2Grid g{};
  g.rows_per_thread = rows_per_thread < 1 ? 1 : rows_per_thread;
  g.runs = p.out_h <= 0 ? 0 : (p.out_h + g.rows_per_thread - 1) / g.rows_per_thread;
  g.groups = p.channels / width;
  g.slots = g.runs * (p.out_w < 0 ? 0 : p.out_w) * g.groups;
  return g;
}

// Rows a thread walks: about one thread for each of an SM's 2048 thread slots
// (positions / (2048 * sms)), at least one row and at most kMaxRows, as the stride-2
// input gradient (bwd_data/phase_index.h). A run of R output rows loads 2R + K - 2
// input rows for the 2R it advances over, so the K - 2 rows shared with the run above
// are read twice (through L2): 1/16 more at MobileNetV2's 64x112x112x96 layer (bf16,
// 12 channel groups: 8 rows a thread), all of it at R = 1 (14x14 layers).
inline int64_t fwd_stride2_rows_per_thread(const DwConvParams& p, int64_t width, int64_t sms) {
  constexpr int64_t kMaxRows = 16;
  const int64_t positions = p.batch * p.out_h * p.out_w * (p.channels / width);
  const int64_t target = 2048 * (sms > 0 ? sms : 132);
  const int64_t r = positions / target;
  return r < 1 ? 1 : (r > kMaxRows ? kMaxRows : r);
}

}  // namespace flashdwc
