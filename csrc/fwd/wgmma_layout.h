// The Hopper forward kernel's layout (fwd/wgmma.cuh): its fixed sizes, the planar
// copies of x and y it works on, and their bytes in the workspace. Host code that
// needs no CUDA headers, so that the plan and the lowering's workspace query run on a
// CPU-only build too.
//
// The kernel reads a channel-planar, column-padded copy of x, xt[c][n][ih][wpad], and
// writes yt[c][n][oh][wy]; two transposes move x into xt and yt into y (NHWC). Both
// copies live in one workspace that the custom call receives from XLA: xt first, yt
// after it at a 256-byte boundary.
#pragma once

#include <cstdint>

#include "common/params.h"

namespace flashdwc {

struct WgmmaFwdTraits {
  static constexpr int kThreads = 128;     // one warpgroup a block
  static constexpr int kUnits = 8;         // (image, 64-column strip) units a block: M = 64 segments of 8
  static constexpr int kUnitW = 64;        // output columns a unit
  static constexpr int kRows = 16;         // output rows a tile (the wgmma's N, 8 columns a row)
  static constexpr int kStagedAhead = 8;   // input rows staged ahead by cp.async
  static constexpr int kSlots = kStagedAhead + 1;
  static constexpr int kBrickBytes = 256;  // one 16 x 8 Toeplitz block of B, two 8x8 core matrices
  static constexpr int kMaxQ = 4;          // k-steps a filter row: KW <= 16 * 4 - 7 = 57
  static constexpr int kTransposeChannels = 64;
  static constexpr int kTransposeThreads = 256;
  // The transposes' shared tile [64 channels][pitch] of 2-byte elements stays within
  // the 48 KB a block gets without opting in: W <= 374.
  static constexpr int64_t kTransposeMaxSmem = 48 * 1024;
};

// k-steps of 16 input columns that cover a filter row of KW taps for 8 outputs.
constexpr int64_t wgmma_fwd_nq(int64_t kernel_w) { return (kernel_w + 7 + 15) / 16; }
// Input columns a unit stages per row.
constexpr int64_t wgmma_fwd_stage_w(int64_t nq) { return WgmmaFwdTraits::kUnitW - 8 + 16 * nq; }
// Output rows a wgmma covers (its N over 8): 16 rows from three k-steps a filter row.
// With each row's A in its own register buffer, 16 rows ran the kernel alone at k = 31
// 1.04-1.06x the single-buffer kernel's best on the 128- and 64-wide paper maps (253.4
// against 241.6 TFLOP/s at 128x128x128x128) and 0.98x on the 32-wide one; at k = 51,
// 1.04-1.05x (H100, benchmarks/cuda/time_fwd_wgmma.cu). 8 rows at two k-steps (k = 17:
// 81.6 against 83.1 at 16 before the double buffer, H200).
constexpr int wgmma_fwd_rows_per_mma(int64_t nq) { return nq >= 3 ? 16 : 8; }

struct WgmmaFwdGrid {
  int64_t strips = 0;    // 64-column strips a row (WT)
  int64_t x_pitch = 0;   // xt's row pitch, elements: 64 WT + 16 NQ - 8
  int64_t y_pitch = 0;   // yt's row pitch: 64 WT
  int64_t nq = 0;
  int rows_per_mma = 8;  // RN
  int64_t xt_bytes = 0, yt_offset = 0, workspace_bytes = 0;
  int64_t smem_bytes = 0;            // the conv kernel's dynamic shared memory
  int64_t transpose_smem_bytes = 0;  // each transpose's
};

constexpr int64_t wgmma_fwd_transpose_pitch(int64_t width) { return (width + 7) / 8 * 8 + 2; }

// The conv kernel's dynamic shared memory at NQ k-steps and RN rows a wgmma: the B
// bricks with RN - 1 zero rows on each side and RN zero bricks, the staging ring, the
// taps.
inline int64_t wgmma_fwd_smem_bytes(const DwConvParams& p, int64_t nq, int64_t rn) {
  using Tr = WgmmaFwdTraits;
  const int64_t bricks = (nq * (p.kernel_h + 2 * (rn - 1)) + rn) * Tr::kBrickBytes;
  const int64_t ring = int64_t(Tr::kSlots) * Tr::kUnits * wgmma_fwd_stage_w(nq) * 2;
  const int64_t taps = (p.kernel_h * p.kernel_w * 2 + 15) / 16 * 16;
  return bricks + ring + taps;
}

// The grid and workspace of a problem the kernel can run (can_implement_fwd_wgmma,
// plan/fwd.h): the output is as large as the input, 2-byte elements.
inline WgmmaFwdGrid make_wgmma_fwd_grid(const DwConvParams& p) {
  using Tr = WgmmaFwdTraits;
  WgmmaFwdGrid g;
  g.nq = wgmma_fwd_nq(p.kernel_w);
  g.rows_per_mma = wgmma_fwd_rows_per_mma(g.nq);
  g.strips = (p.out_w + Tr::kUnitW - 1) / Tr::kUnitW;
  g.x_pitch = Tr::kUnitW * g.strips + 16 * g.nq - 8;
  g.y_pitch = Tr::kUnitW * g.strips;
  const int64_t planes = p.channels * p.batch * p.in_h;
  g.xt_bytes = planes * g.x_pitch * 2;
  g.yt_offset = (g.xt_bytes + 255) / 256 * 256;
  g.workspace_bytes = g.yt_offset + p.channels * p.batch * p.out_h * g.y_pitch * 2;
  g.smem_bytes = wgmma_fwd_smem_bytes(p, g.nq, g.rows_per_mma);
  g.transpose_smem_bytes = Tr::kTransposeChannels * wgmma_fwd_transpose_pitch(p.in_w) * 2;
  return g;
}

}  // namespace flashdwc
