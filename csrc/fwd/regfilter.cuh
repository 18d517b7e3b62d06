// Forward kernel for square filters at stride 1, on CUDA cores, with the filter in
// registers. The library builds it for 3x3 and 5x5 (fwd/regfilter.cu): in fp16/bf16,
// where it beat the row-stream and tensor-core kernels, and in fp32 on maps under 32
// columns, where the row-stream kernel is bound by its small grid; and for dilated
// 7x7, whose residue classes it reads in place (below) where the tensor-core kernel
// would need them copied out into sub-grids.
//
// Why. At k = 5 the row-stream kernel reads each filter tap from shared memory for
// every 32 FMAs, which makes it shared-memory bound at about two thirds of the FMA
// rate, and the tensor-core kernels run at about twice their byte floor, bound by
// their bookkeeping instructions (the NHWC-to-planes transposes, the output through
// shared memory, the per-tile set-up; docs/design-notes.md). A
// thread that holds one channel pair's whole filter in registers spends most of its
// issue slots on FMAs: at k = 5 and 4 outputs a row, 200 FMAs a row against 2 copies
// (16 bytes a lane), 8 loads, 16 conversions and the stores. Measured on the H200
// (kernel A/B): at 5x5, 0.830 and 0.871 of the row-stream
// kernel's time in bf16 and 0.846 and 0.919 in fp16 on 128x64x64x256 and
// 128x32x32x1024, and 0.946 and 0.881 of the tensor-core kernel's on 128^4; at 3x3,
// with 8 outputs a thread, 0.95-0.99 of the row-stream kernel's on the three maps;
// both 0.38-0.87 of it on maps under 32 columns. An earlier build with a 4-byte copy a word
// took 1.07-1.12 of the row-stream kernel's time at 3x3 and
// about 1.9 of the tensor-core kernel's at 7x7 (the filter and accumulators of 7x7
// fit only 2 outputs a thread).
//
// Dataflow. A thread owns one 32-bit word of each pixel (a channel pair in fp16/bf16,
// one channel in fp32; its value in registers is a float2 or a float) and kTW
// adjacent output columns, and walks down the rows of its block's row range. Each
// input row it reads once, kTW + K - 1 words, and adds it into the K output rows
// that read it: K rolling accumulator rows, with row o in slot o % K. The row loop is
// unrolled K times so that every slot index is a compile-time constant; slot o is
// zeroed when input row o (output row o's first) arrives, so the partial sums for
// output rows above the block that the first K - 1 rows make fall into slots that are
// zeroed before they are read.
//
// Copies. The 32 lanes of a warp hold 32 consecutive words of one pixel, so a window
// column of the warp is 128 contiguous bytes. The warp copies its kTW + K - 1 columns
// with cp.async into a shared-memory ring kRowsAhead rows ahead of their use, 16 bytes
// a lane, and each lane reads its own words back after a warp barrier. The halo
// columns the neighbouring strip reads too come from L2. Where a pixel's words are not
// a multiple of 32 (they must be one of 4: C a multiple of 8 in fp16/bf16, of 4 in
// fp32), they are padded to a multiple of 32 lanes: the padding lanes copy nothing
// (their 16-byte chunks start at or past the pixel's last word, so a chunk is wholly
// inside or wholly outside the pixel), compute on the zeros the ring then holds, and
// store nothing.
//
// Dilation. A thread's residue class of rows and columns (RegFilterGrid) is an undilated
// image read in place: input rows and window columns d apart, outputs stored d apart.
// At d = 1 the pitches are one row and one pixel, and the walk is the undilated one.
//
// Padding. Input rows outside the image are skipped (no loads, no FMAs): the row
// range is the same for every thread of a block, so the branch is uniform. Columns
// outside the image are skipped too, not multiplied as zeros, as in the other
// CUDA-core kernels (a non-finite tap over the padding leaves the output finite:
// README, "differs from XLA"); a warp whose window lies inside the image takes a path
// without the column tests.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/cp_async.cuh"
#include "common/epilogue.h"
#include "common/params.h"
#include "fwd/regfilter_grid.h"

namespace flashdwc {

struct RegFilterTraits {
  static constexpr int kThreads = 128;
  // Input rows in flight ahead of the row being summed, and the ring slots they take
  // (one more: the slot of the row just read is refilled a turn later). 3 rows ahead
  // measured the same as 6: the kernel is issue-bound, not waiting on memory.
  static constexpr int kRowsAhead = 3;
  static constexpr int kRingSlots = kRowsAhead + 1;
};

namespace regfilter {

// A word's value in registers: a channel pair as float2 (fp16/bf16), a channel as float.
template <typename T>
using WordValue = std::conditional_t<std::is_same_v<T, float>, float, float2>;

template <typename T>
__device__ __forceinline__ WordValue<T> unpack(uint32_t v) {
  if constexpr (std::is_same_v<T, float>) {
    return __uint_as_float(v);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
  } else {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  }
}

template <typename T>
__device__ __forceinline__ uint32_t pack(WordValue<T> v) {
  if constexpr (std::is_same_v<T, float>) {
    return __float_as_uint(v);
  } else if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(v.x, v.y);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(v.x, v.y);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// Out of line: the four activations inlined at each of the unrolled loop's stores
// would multiply its code several times over.
__device__ __noinline__ float2 apply_epilogue(Activation activation, float2 r, float2 bias) {
  return make_float2(apply_activation(activation, r.x + bias.x), apply_activation(activation, r.y + bias.y));
}
__device__ __noinline__ float apply_epilogue(Activation activation, float r, float bias) {
  return apply_activation(activation, r + bias);
}

__device__ __forceinline__ void fma_word(float2& acc, float2 x, float2 w) {
  acc.x = fmaf(x.x, w.x, acc.x);
  acc.y = fmaf(x.y, w.y, acc.y);
}
__device__ __forceinline__ void fma_word(float& acc, float x, float w) { acc = fmaf(x, w, acc); }

__device__ __forceinline__ float2 mul_word(float2 x, float2 w) { return make_float2(x.x * w.x, x.y * w.y); }
__device__ __forceinline__ float mul_word(float x, float w) { return x * w; }

template <typename V>
__device__ __forceinline__ V zero_word() {
  if constexpr (std::is_same_v<V, float>) {
    return 0.0f;
  } else {
    return make_float2(0.0f, 0.0f);
  }
}

// The walk down the rows. kEdge: some window column lies outside the image, and
// col_ok (bit c: window column c is inside) is tested per column. `ring` is this
// thread's slots of the block's look-ahead ring (kRingSlots x kWin words, kThreads
// apart).
// copy_ok: this lane's 16-byte chunk of a window column lies inside the pixel's C / 2
// words; out_cols: outputs of this thread's strip inside the map, 0 for a padding lane.
template <typename T, int kK, int kTW, bool kEpilogue, bool kEdge>
__device__ __forceinline__ void walk_rows(const uint32_t* __restrict__ x, uint32_t* __restrict__ y, uint32_t* ring,
                                          const WordValue<T> (&wf)[kK][kK], const DwConvParams& p,
                                          const RegFilterGrid& g, int64_t x_offset, int64_t y_offset,
                                          int64_t ih_first, int rows, int64_t col_step, unsigned col_ok,
                                          bool copy_ok, int out_cols, WordValue<T> bias,
                                          const FwdEpilogue& epilogue) {
  using Tr = RegFilterTraits;
  using V = WordValue<T>;
  constexpr int kWin = kTW + kK - 1;
  constexpr int kSlotWords = kWin * Tr::kThreads;
  // Words between the residue's input rows and output rows (dilation_h image rows);
  // col_step: between its window columns and outputs (dilation_w pixels).
  const int64_t x_row = p.dilation_h * p.in_w * g.words;
  const int64_t y_row = p.dilation_h * p.out_w * g.words;
  const int total = rows + kK - 1;  // input rows the block reads
  // Rows [j_lo, j_hi) are inside the image (32-bit tests a row, not 64-bit): row j is
  // image row ih_first + dilation_h * j.
  const int64_t dh = p.dilation_h;
  const int64_t below = ih_first < 0 ? (-ih_first + dh - 1) / dh : 0;
  const int64_t above = p.in_h > ih_first ? (p.in_h - ih_first + dh - 1) / dh : 0;
  const int j_lo = int(min(below, int64_t(total)));
  const int j_hi = int(max(min(above, int64_t(total)), int64_t(j_lo)));
  auto row_inside = [&](int j) { return j >= j_lo && j < j_hi; };
  // The warp's window of a row is kWin runs of 32 words (128 bytes), one a column; lane
  // l copies 16 bytes of column 4i + l / 8 in copy i, where copying its own kWin words
  // one by one took kWin 4-byte copies with their 64-bit addresses a row. Offsets in
  // words from this thread's own word, in x and in the ring.
  constexpr int kCopies = (kWin + 3) / 4;
  const int lane = int(threadIdx.x % 32);
  const int copy_col = lane / 8;
  const int64_t copy_src = copy_col * col_step + 4 * (lane % 8) - lane;
  const int copy_dst = copy_col * Tr::kThreads + 4 * (lane % 8) - lane;
  // Row j's copy source, carried: issue_row runs once a row, in order.
  const uint32_t* next_src = x + x_offset + copy_src;
  // Input row j's window into ring slot `slot` (one commit group, empty where the row
  // is outside the image: the wait below counts groups).
  auto issue_row = [&](int j, int slot) {
    if (row_inside(j)) {
      const uint32_t* src = next_src;
      uint32_t* dst = ring + slot * kSlotWords + copy_dst;
#pragma unroll
      for (int i = 0; i < kCopies; ++i) {
        const int c = 4 * i + copy_col;
        const bool ok = copy_ok && (!kEdge || ((col_ok >> c) & 1u));
        if (c < kWin) cp_async<16>(dst + 4 * i * Tr::kThreads, ok ? src + 4 * i * col_step : x, ok);
      }
    }
    cp_async_commit();
    next_src += x_row;
  };

  V acc[kK][kTW];
  // Output row 0's words; carried from row to row, and from column to column by adds,
  // where indexing each store took 64-bit multiplies (PTX of the first build).
  uint32_t* out_row = y + y_offset;
#pragma unroll
  for (int j = 0; j < Tr::kRowsAhead; ++j) issue_row(j, j);
  int read_slot = 0, write_slot = Tr::kRowsAhead;
  for (int j0 = 0; j0 < total; j0 += kK) {
#pragma unroll
    for (int u = 0; u < kK; ++u) {
      const int j = j0 + u;
      if (j >= total) break;
      // Rows up to j + kRowsAhead - 1 are committed; this thread's copies of row j
      // have landed.
      cp_async_wait<Tr::kRowsAhead - 1>();
      // The other lanes' copies of row j have landed too, and every lane has read the
      // slot of row j - 1, which issue_row refills below.
      __syncwarp();
      uint32_t cur[kWin];
      const bool inside = row_inside(j);
      if (inside) {
#pragma unroll
        for (int c = 0; c < kWin; ++c) cur[c] = ring[read_slot * kSlotWords + c * Tr::kThreads];
      }
      // Row j + kRowsAhead goes to the slot of row j - 1, read in the last turn.
      issue_row(j + Tr::kRowsAhead, write_slot);
      read_slot = read_slot + 1 == Tr::kRingSlots ? 0 : read_slot + 1;
      write_slot = write_slot + 1 == Tr::kRingSlots ? 0 : write_slot + 1;
      // Output row j starts here (slot j % kK = u): its first product (column t, tap
      // (0, 0)) is a multiply where every column is read, else the slot is zeroed.
      if (kEdge || !inside) {
#pragma unroll
        for (int t = 0; t < kTW; ++t) acc[u][t] = zero_word<V>();
      }
      if (inside) {
#pragma unroll
        for (int c = 0; c < kWin; ++c) {
          if (kEdge && !((col_ok >> c) & 1u)) continue;
          const V v = unpack<T>(cur[c]);
#pragma unroll
          for (int kw = 0; kw < kK; ++kw) {
            const int t = c - kw;
            if (t < 0 || t >= kTW) continue;
            // Output row j - kh reads this row at filter row kh.
#pragma unroll
            for (int kh = 0; kh < kK; ++kh) {
              V& a = acc[(u - kh + kK) % kK][t];
              if (!kEdge && kh == 0 && kw == 0) {
                a = mul_word(v, wf[0][0]);
              } else {
                fma_word(a, v, wf[kh][kw]);
              }
            }
          }
        }
      }
      // Output row j - (K - 1) has all K of its rows: slot (u + 1) % K.
      if (j >= kK - 1) {
        uint32_t* dst = out_row;
#pragma unroll
        for (int t = 0; t < kTW; ++t, dst += col_step) {
          if (t >= out_cols) break;
          V r = acc[(u + 1) % kK][t];
          if constexpr (kEpilogue) r = apply_epilogue(epilogue.activation, r, bias);
          *dst = pack<T>(r);
        }
        out_row += y_row;
      }
    }
  }
  // No copy may be left in flight when the thread exits.
  cp_async_wait<0>();
}

}  // namespace regfilter

// x, w, y as 32-bit words (channel pairs, or fp32 channels): C a multiple of 8 (4 in
// fp32) and the buffers aligned (can_implement_fwd_regfilter, fwd_regfilter_aligned).
template <typename T, int kK, int kTW, int kMinBlocks, bool kEpilogue>
__global__ void __launch_bounds__(RegFilterTraits::kThreads, kMinBlocks)
dwconv_fwd_regfilter_kernel(const T* __restrict__ x_ptr, const T* __restrict__ w_ptr, T* __restrict__ y_ptr,
                            DwConvParams p, RegFilterGrid g, FwdEpilogue epilogue) {
  using Tr = RegFilterTraits;
  constexpr int kWin = kTW + kK - 1;
  __shared__ uint32_t ring_words[Tr::kRingSlots * kWin * Tr::kThreads];
  const int64_t i = int64_t(blockIdx.x) * Tr::kThreads + threadIdx.x;
  if (i >= g.columns) return;
  const uint32_t* x = reinterpret_cast<const uint32_t*>(x_ptr);
  const uint32_t* w = reinterpret_cast<const uint32_t*>(w_ptr);
  uint32_t* y = reinterpret_cast<uint32_t*>(y_ptr);
  const int64_t lane_word = i % g.lane_words;
  const int64_t rest = i / g.lane_words;
  // A padding lane (lane_word >= the pixel's words) reads the filter and bias of the
  // last word and stores nothing; it still copies its chunk of the warp's window where
  // that chunk lies inside the pixel.
  const bool active = lane_word < g.words;
  const int64_t word = active ? lane_word : g.words - 1;
  // The warp's first word (lanes are aligned to 32 within lane_words) plus this lane's
  // chunk, 4 words at 4 * (lane % 8): inside the pixel, or wholly past it.
  const bool copy_ok = lane_word - int64_t(threadIdx.x % 32) + 4 * int64_t(threadIdx.x % 8) < g.words;
  const int64_t strip = rest % g.strips;
  const int64_t rw = rest / g.strips % p.dilation_w;  // column residue
  const int64_t n = rest / g.strips / p.dilation_w;
  const int64_t rh = blockIdx.y / g.row_blocks;  // row residue
  // The residue's rows are d_h q + r_h < out_h, q in [q_begin, q_begin + rows); a row
  // block past a short residue's last row has none (the whole block returns).
  const int64_t q_begin = int64_t(blockIdx.y % g.row_blocks) * g.rows_per_block;
  const int64_t residue_rows = (p.out_h - rh + p.dilation_h - 1) / p.dilation_h;
  const int rows = int(min(g.rows_per_block, residue_rows - q_begin));
  if (rows <= 0) return;
  // Likewise the residue's columns d_w s + r_w < out_w; a strip past them is a whole
  // warp's (a warp's lanes are one pixel's words), which returns.
  const int64_t residue_cols = (p.out_w - rw + p.dilation_w - 1) / p.dilation_w;
  const int64_t s0 = strip * kTW;
  if (s0 >= residue_cols) return;

  using V = regfilter::WordValue<T>;
  V wf[kK][kK];
#pragma unroll
  for (int kh = 0; kh < kK; ++kh)
#pragma unroll
    for (int kw = 0; kw < kK; ++kw) {
      wf[kh][kw] = regfilter::unpack<T>(__ldg(w + filter_tap(p, kh, kw) * g.words + word));
    }
  V bias = regfilter::zero_word<V>();
  if (epilogue.bias != nullptr) {
    bias = regfilter::unpack<T>(__ldg(static_cast<const uint32_t*>(epilogue.bias) + word));
  }

  // Output column ow0 and window column c's image column iw0 + d_w c.
  const int64_t ow0 = p.dilation_w * s0 + rw;
  const int64_t iw0 = ow0 - p.pad_left;
  unsigned col_ok = 0;
#pragma unroll
  for (int c = 0; c < kWin; ++c) {
    const int64_t iw = iw0 + p.dilation_w * c;
    col_ok |= (iw >= 0 && iw < p.in_w ? 1u : 0u) << c;
  }
  // Outputs of this strip inside the residue; none stored by a padding lane.
  const int out_cols = active ? int(min(int64_t(kTW), residue_cols - s0)) : 0;
  const int64_t oh_begin = p.dilation_h * q_begin + rh;
  const int64_t ih_first = oh_begin - p.pad_top;
  // Word offsets of input row ih_first's window column 0 and of output row oh_begin's
  // column ow0; only in-image words are read, so iw0 < 0 is harmless.
  // x is addressed from lane_word, not word: the copies are laid out by the warp's first
  // word (lane_word - lane), and a padding lane may copy a chunk inside the pixel.
  const int64_t x_offset = ((n * p.in_h + ih_first) * p.in_w + iw0) * g.words + lane_word;
  const int64_t y_offset = ((n * p.out_h + oh_begin) * p.out_w + ow0) * g.words + word;
  const int64_t col_step = p.dilation_w * g.words;
  constexpr unsigned kAllColumns = (1u << kWin) - 1;
  if (col_ok == kAllColumns) {
    regfilter::walk_rows<T, kK, kTW, kEpilogue, false>(x, y, ring_words + threadIdx.x, wf, p, g, x_offset,
                                                       y_offset, ih_first, rows, col_step, col_ok, copy_ok,
                                                       out_cols, bias, epilogue);
  } else {
    regfilter::walk_rows<T, kK, kTW, kEpilogue, true>(x, y, ring_words + threadIdx.x, wf, p, g, x_offset,
                                                      y_offset, ih_first, rows, col_step, col_ok, copy_ok,
                                                      out_cols, bias, epilogue);
  }
}

}  // namespace flashdwc
