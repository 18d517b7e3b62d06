// Index math of the stride-2 polyphase input-gradient kernel (bwd_data/phase.cuh),
// shared by its launcher (the grid) and the kernel (a thread's block and taps); the
// numpy model tests/cuda/bwd_data_phase_model.py mirrors it line for line.
//
// With stride 2 and dilation 1, dx row ih gets the taps kh with ih + pad_top - kh
// even. Writing t = ih + pad_top = 2r + e (e in {0, 1}), those are kh = e + 2a from dy
// row r - a, a = 0, 1, ... while kh < K. The two dx rows 2r - pad_top and
// 2r + 1 - pad_top (phases e = 0, 1) therefore read only dy rows r - J .. r, J =
// (K - 1) / 2, and between them every filter row once; the same holds for columns
// with u = iw + pad_left = 2s + f. A thread owns the 2x2 dx block (r, s) of one
// channel group and walks down a run of r: each step brings one new dy row of J + 1
// columns and writes four dx positions.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "common/params.h"

namespace flashdwc {

// floor(a / 2) for either sign (the padding may be negative: a crop).
FLASHDWC_HOST_DEVICE FLASHDWC_FORCEINLINE int64_t floor_half(int64_t a) { return a >= 0 ? a / 2 : -((1 - a) / 2); }

// The phase rows (or columns) whose 2x2 blocks hold dx indices [0, size): r from
// floor(pad / 2) to floor((size - 1 + pad) / 2).
struct PhaseRange {
  int64_t first = 0;
  int64_t count = 0;
};
FLASHDWC_HOST_DEVICE FLASHDWC_FORCEINLINE PhaseRange phase_range(int64_t size, int64_t pad) {
  if (size <= 0) return {};
  const int64_t first = floor_half(pad);
  return {first, floor_half(size - 1 + pad) - first + 1};
}

// Threads a block.
inline constexpr int kBwdDataPhaseThreads = 128;

// The kernel's grid: blockIdx.y over images (a grid-stride loop past 65535), x over
// an image's slots, channel group fastest, then the phase column, then the run of
// rows_per_thread phase rows.
struct BwdDataPhaseGrid {
  int64_t r_first, r_count;  // phase rows
  int64_t s_first, s_count;  // phase columns
  int64_t rows_per_thread;   // phase rows a thread walks (a run)
  int64_t runs;              // runs down the image
  int64_t groups;            // channel groups of `width` channels
  int64_t slots;             // runs * s_count * groups: threads an image
};

inline BwdDataPhaseGrid make_bwd_data_phase_grid(const DwConvParams& p, int64_t width, int64_t rows_per_thread) {
  BwdDataPhaseGrid g{};
  const PhaseRange rows = phase_range(p.in_h, p.pad_top), cols = phase_range(p.in_w, p.pad_left);
  g.r_first = rows.first;
  g.r_count = rows.count;
  g.s_first = cols.first;
  g.s_count = cols.count;
  g.rows_per_thread = rows_per_thread < 1 ? 1 : rows_per_thread;
  g.runs = (g.r_count + g.rows_per_thread - 1) / g.rows_per_thread;
  g.groups = p.channels / width;
  g.slots = g.runs * g.s_count * g.groups;
  return g;
}

// Rows a thread walks: about one thread for each of an SM's 2048 thread slots
// (positions / (2048 * sms)), at least one row and at most kMaxRows. At the kernel's
// register counts an SM holds 384-512 threads (3-4 blocks of 128), so that is 4-5
// waves. A run re-reads
// the J dy rows above it that the run above also read (through L2): a run of R rows
// loads (R + J) / R of the dy rows it needs, so longer runs read less and shorter ones
// give more threads to hide latency with. MobileNetV2's 64x112x112x96 layer (bf16,
// 8 channels a thread) gets 9 rows, a 14x14 layer 1.
inline int64_t bwd_data_phase_rows_per_thread(const DwConvParams& p, int64_t width, int64_t sms) {
  constexpr int64_t kMaxRows = 16;
  const PhaseRange rows = phase_range(p.in_h, p.pad_top), cols = phase_range(p.in_w, p.pad_left);
  const int64_t positions = p.batch * rows.count * cols.count * (p.channels / width);
  const int64_t target = 2048 * (sms > 0 ? sms : 132);
  const int64_t r = positions / target;
  return r < 1 ? 1 : (r > kMaxRows ? kMaxRows : r);
}

}  // namespace flashdwc
