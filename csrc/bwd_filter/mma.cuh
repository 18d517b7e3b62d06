// Filter gradient on tensor cores, fp16/bf16, stride 1, no dilation. The paper
// (section 5.1) runs this pass on CUDA cores; here it is a GEMM. Where it runs
// (plan/bwd_filter.cc): KW >= 9, and KW = 7 where the output is at least 14 wide:
// 2.1-5.1x the split kernel from k = 13, and 0.73-0.98 of the row-stream kernel's
// time at k = 7 on 14- to 128-wide maps (docs/design-notes.md). For one channel
// and one input row ih, what that row adds to the filter gradient is
//   C[kw, kh] += sum over ow of A[kw, ow] * B[ow, kh], with
//   A[kw, ow] = x[ih, ow + kw - pad_left]   (a Toeplitz matrix of the input row),
//   B[ow, kh] = dy[ih + pad_top - kh, ow]   (the output-gradient rows that meet ih),
// and dw[kh, kw, c] = sum over all input rows of C[kw, kh]. Each m16n8k16 MMA covers
// 16 taps kw (M), 8 filter rows kh (N) and 16 output columns (K); a block keeps its
// C tiles in registers through all the input rows of its chunk and merges them into
// the fp32 workspace once, as the split kernel does (atomic or one slice per chunk).
//
// Block: 4 warps, 8 channels (one 16-byte group per pixel), 2 channels per warp, and
// the tiles of all kw for a group of filter rows: kMTiles x kNTiles <= kMaxTiles
// (M tile, N tile) pairs, at most 2 x 4 x 4 = 32 accumulator registers per lane. Per
// stage of up to stage_rows consecutive input rows of one image the block stages the
// rows' 8 channel planes and the dy rows that enter a ring holding the dy rows of the
// group's filter rows for all the stage's input rows; then for each input row every
// warp runs, for each 16 output columns and each of its channels, one MMA per tile,
// loading A once per M tile and B once per N tile (5.8-8.6 SASS instructions per MMA
// in the loop; with the tile count a runtime value and a select per B load, 16).
//
// Staging was the cost, not the MMAs. Nsight Compute, bf16 64x32x32x1536 k = 9: 35
// warp instructions per MMA, 58% of issue slots busy, when the stages wrote every
// word of every plane one 16-bit column at a time and each row's B pointers took a
// 64-bit remainder; the SASS spent 175 instructions per staged x word. Now a staged
// item is one 32-bit word of all 8 planes (two columns, packed by byte permutes),
// only the words the A and B loads read are staged (24 of 48 x words and 16 of 36
// dy words on a 32-column map), and the ring slots come from one remainder per
// stage: 23 instructions per MMA, and against the split kernel, kernel level,
// 1.29 -> 0.67 ms on that map (docs/design-notes.md).
//
// A is Toeplitz (A[r][c] depends on r + c), so a lane's four A registers are the
// column pairs starting at e, e + 8, e + 8 and e + 16 of the input plane, with
// e = 16 kb + 16 m + g + 2 tig: three 32-bit loads. For odd g the pair starts at an
// odd element; the plane is staged twice, the second copy shifted by one element,
// so every pair is one aligned word (as the forward kernel does for its filter).
// Rows past the filter (kw >= KW, kh past the group) compute values that are never
// stored; dy columns past Wo and x columns outside the image are staged as zeros.
#pragma once

#include <cstdint>

#include "common/cuda_types.cuh"
#include "common/mma_sync.cuh"
#include "common/ring_slot.cuh"
#include "bwd_filter/mma_layout.h"
#include "common/params.h"

namespace flashdwc {

namespace mma_bwd_filter {

// Ring slot of dy row oh (oh may be negative: rows above the image stage zeros).
__device__ __forceinline__ int ring_slot(int64_t oh, int ring_rows) {
  const int s = int(oh % ring_rows);
  return s < 0 ? s + ring_rows : s;
}

// Words of one input-row slot: 8 channel planes, 2 copies each.
__device__ __forceinline__ int x_slot_words(const MmaBwdFilterGrid& g) {
  return MmaBwdFilterTraits::kBlockChannels * 2 * g.x_words;
}

// Row r and word w of a stage's flattened item index (r * words + w), moved on by
// kThreads items with one compare: the quotient and remainder of kThreads by words
// are taken once per stage, not a division per item.
struct ItemCursor {
  int r, w, rows_per_step, words_per_step, words;
  __device__ __forceinline__ ItemCursor(int first, int words_) : words(words_) {
    r = first / words, w = first - r * words;
    rows_per_step = MmaBwdFilterTraits::kThreads / words;
    words_per_step = MmaBwdFilterTraits::kThreads - rows_per_step * words;
  }
  __device__ __forceinline__ void advance() {
    r += rows_per_step, w += words_per_step;
    if (w >= words) w -= words, ++r;
  }
};

// Input rows (n, ih0 + r), r < count, into slot r, both copies of the 8 channel
// planes: word w of copy 0 holds input columns 2 w - pad_left and 2 w + 1 - pad_left,
// word w of copy 1 columns 2 w + 1 - pad_left and 2 w + 2 - pad_left. One item is one
// word of every plane: three pixels loaded, 16 word stores (16-bit stores of single
// columns took twice the store instructions and wavefronts). Only the words < `used`
// that the A loads read are written (8 (k_tiles + m_tiles) of the plane's x_words,
// 24 of 48 on a 32-column map).
template <bool kVec>
__device__ __forceinline__ void stage_x_rows(uint32_t* xs32, const uint16_t* __restrict__ x, const DwConvParams& p,
                                             const MmaBwdFilterGrid& g, int used, int64_t n, int64_t ih0,
                                             int count, int64_t channel_base) {
  const int words = g.x_words;
  const int64_t channels_left = p.channels - channel_base;
  for (ItemCursor at(int(threadIdx.x), used); at.r < count; at.advance()) {
    const int r = at.r, w = at.w;
    const int64_t ih = ih0 + r;
    const bool row_inside = ih >= 0 && ih < p.in_h;
    const int64_t iw0 = 2 * w - p.pad_left;
    // Pixel (ih, iw0) of this channel block, and the item's next two pixels one
    // pixel stride on each: one 64-bit index product per item (with the offset of
    // every pixel written out, the SASS computed three).
    const uint16_t* pixel = x + (((n * p.in_h + ih) * p.in_w + iw0) * p.channels + channel_base);
    uint32_t v[3][4];
#pragma unroll
    for (int q = 0; q < 3; ++q, pixel += p.channels) {
      const bool ok = row_inside && uint64_t(iw0 + q) < uint64_t(p.in_w);
      load8<kVec>(ok ? pixel : x, ok, channels_left, v[q]);
    }
    uint32_t* slot = xs32 + r * x_slot_words(g);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      uint32_t* plane = slot + k * 2 * words;
      plane[w] = pack_channel(v[0], v[1], k);
      plane[words + w] = pack_channel(v[1], v[2], k);
    }
  }
}

// dy rows (n, oh), oh in [oh_first, oh_last], into their ring slots of the 8 channel
// planes, word w holding output columns 2 w and 2 w + 1; zeros outside the image and
// past Wo. Only the words < `used` that the B loads read are written (8 k_tiles of
// dy_words). The rows are at most ring_rows, so their slots run from oh_first's on
// with one wrap at most.
template <bool kVec>
__device__ __forceinline__ void stage_dy_rows(uint32_t* ds32, const uint16_t* __restrict__ dy, const DwConvParams& p,
                                              const MmaBwdFilterGrid& g, int used, int64_t n, int64_t oh_first,
                                              int64_t oh_last, int64_t channel_base) {
  const int plane = g.ring_rows * g.dy_words;  // words from one channel's ring to the next
  const int rows = int(oh_last - oh_first + 1);
  const int first_slot = ring_slot(oh_first, g.ring_rows);
  const int64_t channels_left = p.channels - channel_base;
  for (ItemCursor at(int(threadIdx.x), used); at.r < rows; at.advance()) {
    const int r = at.r, w = at.w;
    const int64_t oh = oh_first + r;
    const bool row_inside = oh >= 0 && oh < p.out_h;
    const uint16_t* pixel = dy + (((n * p.out_h + oh) * p.out_w + 2 * w) * p.channels + channel_base);
    uint32_t v[2][4];
#pragma unroll
    for (int q = 0; q < 2; ++q, pixel += p.channels) {
      const bool ok = row_inside && 2 * w + q < p.out_w;
      load8<kVec>(ok ? pixel : dy, ok, channels_left, v[q]);
    }
    uint32_t* dst = ds32 + wrap_slot(first_slot + r, g.ring_rows) * g.dy_words + w;
#pragma unroll
    for (int k = 0; k < 8; ++k) dst[k * plane] = pack_channel(v[0], v[1], k);
  }
}

}  // namespace mma_bwd_filter

// kMTiles x kNTiles: the block's (M tile, N tile) grid, m_tiles x n_per_group. The
// last group of filter rows may have fewer N tiles; its rows past KH read the zero
// row and are never stored. kKTiles: k_tiles as a constant (1 or 2, maps at most 16
// or 32 columns wide), or 0 for g.k_tiles. On a 32-column map the runtime loop ran
// its unrolled-by-4 body never and its remainder twice: about 140 SASS instructions
// per warp and input row for 8 MMAs, against 36 loads and MMAs.
template <typename T, bool kVec, int kMTiles, int kNTiles, int kKTiles>
__global__ void __launch_bounds__(MmaBwdFilterTraits::kThreads)
dwconv_bwd_filter_mma_kernel(const T* __restrict__ x_ptr, const T* __restrict__ dy_ptr, float* __restrict__ ws,
                             DwConvParams p, MmaBwdFilterGrid g) {
  using Tr = MmaBwdFilterTraits;
  using namespace mma_bwd_filter;
  static_assert(kMTiles * kNTiles <= Tr::kMaxTiles, "accumulators: 2 channels x 4 tiles x 4 registers");
  const uint16_t* x = reinterpret_cast<const uint16_t*>(x_ptr);
  const uint16_t* dy = reinterpret_cast<const uint16_t*>(dy_ptr);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint32_t* xs32 = reinterpret_cast<uint32_t*>(smem_raw);               // (slot, channel, copy, x_words)
  uint32_t* ds32 = reinterpret_cast<uint32_t*>(smem_raw + g.dy_offset);  // (channel, ring slot, dy_words)
  // One row of zeros after the ring: B rows of filter rows past the group read it,
  // so that no lane selects per load.
  uint32_t* zero_row = ds32 + Tr::kBlockChannels * g.ring_rows * g.dy_words;
  for (int j = threadIdx.x; j < g.dy_words; j += Tr::kThreads) zero_row[j] = 0u;

  const int k_tiles = kKTiles > 0 ? kKTiles : g.k_tiles;
  const int64_t channel_base = int64_t(blockIdx.y) * Tr::kBlockChannels;
  const int kh_begin = int(blockIdx.x) * kNTiles * 8;
  const int kh_end = int(min(int64_t(kh_begin + kNTiles * 8), p.kernel_h));
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  const int gid = lane / 4, tig = lane % 4;
  const int parity = gid & 1;

  float acc[Tr::kWarpChannels][kMTiles][kNTiles][4];
#pragma unroll
  for (int c = 0; c < Tr::kWarpChannels; ++c)
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[c][m][nt][i] = 0.0f;

  const int64_t row_begin = int64_t(blockIdx.z) * g.rows_per_split;
  const int64_t row_end = min(row_begin + g.rows_per_split, g.rows);
  for (int64_t row0 = row_begin; row0 < row_end;) {
    const int64_t n = row0 / p.in_h, ih0 = row0 % p.in_h;
    const int count = int(min(min(int64_t(g.stage_rows), row_end - row0), p.in_h - ih0));
    // Input row ih reads dy rows ih + pad_top - kh for kh in [kh_begin, kh_end): all
    // of the stage's at the start of a chunk or an image, else the count that enter.
    // The ring holds the kh_end - kh_begin + count - 1 rows one stage reads.
    const int64_t oh_top = ih0 + count - 1 + p.pad_top - kh_begin;
    const int64_t oh_first = row0 == row_begin || ih0 == 0 ? ih0 + p.pad_top - kh_end + 1 : oh_top - count + 1;
    __syncthreads();  // the previous stage's MMAs have read the slots about to change
    stage_x_rows<kVec>(xs32, x, p, g, 8 * (k_tiles + kMTiles), n, ih0, count, channel_base);
    stage_dy_rows<kVec>(ds32, dy, p, g, 8 * k_tiles, n, oh_first, oh_top, channel_base);
    __syncthreads();
    row0 += count;

    // Ring slot of dy row ih + pad_top - kh_begin (the group's first filter row) for
    // the stage's first input row; each next row's is one on, and filter row
    // kh_begin + j's is j before it (j < 8 n_per_group < ring_rows): one modulo a
    // stage, none per row (a 64-bit remainder per B pointer and row was 4 calls
    // of the division routine per row in the SASS).
    const int first_top = ring_slot(ih0 + p.pad_top - kh_begin, g.ring_rows);
    for (int r = 0; r < count; ++r) {
      const int top = wrap_slot(first_top + r, g.ring_rows);
      // This lane's A words (slot r, plane copy by the parity of gid; element 16 m +
      // gid + 2 tig) and B words (ring row of kh = kh_begin + 8 nt + gid; element 2 tig),
      // for 16 output columns from column 0; each next 16 columns are 8 words on.
      const uint32_t* a_ptr[Tr::kWarpChannels][kMTiles];
      const uint32_t* b_ptr[Tr::kWarpChannels][kNTiles];
#pragma unroll
      for (int c = 0; c < Tr::kWarpChannels; ++c) {
        const int channel = warp * Tr::kWarpChannels + c;
#pragma unroll
        for (int m = 0; m < kMTiles; ++m)
          a_ptr[c][m] = xs32 + r * x_slot_words(g) + (2 * channel + parity) * g.x_words +
                        ((16 * m + gid + 2 * tig) >> 1);
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
          const int kh = kh_begin + 8 * nt + gid;
          const int slot = top - 8 * nt - gid < 0 ? top - 8 * nt - gid + g.ring_rows : top - 8 * nt - gid;
          b_ptr[c][nt] = kh < kh_end ? ds32 + (channel * g.ring_rows + slot) * g.dy_words + tig : zero_row + tig;
        }
      }
      // Every (channel, tile) accumulator in turn, so that consecutive MMAs do not
      // wait on each other; A is loaded once per M tile, B once per N tile.
      auto k_tile = [&](int kb) {
#pragma unroll
        for (int c = 0; c < Tr::kWarpChannels; ++c) {
          uint32_t a[kMTiles][4], b[kNTiles][2];
#pragma unroll
          for (int m = 0; m < kMTiles; ++m) {
            const uint32_t* w = a_ptr[c][m] + 8 * kb;
            a[m][0] = w[0];
            a[m][1] = a[m][2] = w[4];
            a[m][3] = w[8];
          }
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt) {
            const uint32_t* w = b_ptr[c][nt] + 8 * kb;
            b[nt][0] = w[0];
            b[nt][1] = w[4];
          }
#pragma unroll
          for (int m = 0; m < kMTiles; ++m)
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt) mma_16816<T>(acc[c][m][nt], a[m], b[nt][0], b[nt][1]);
        }
      };
      if constexpr (kKTiles > 0) {
#pragma unroll
        for (int kb = 0; kb < kKTiles; ++kb) k_tile(kb);
      } else {
        for (int kb = 0; kb < g.k_tiles; ++kb) k_tile(kb);
      }
    }
  }

  // C tile element (r, col) of lane: r = gid or gid + 8 (kw = 16 m + r), col = 2 tig
  // or 2 tig + 1 (kh = kh_begin + 8 nt + col).
  const int64_t slice = g.atomic ? 0 : int64_t(blockIdx.z) * p.kernel_h * p.kernel_w * p.channels;
#pragma unroll
  for (int c = 0; c < Tr::kWarpChannels; ++c) {
    const int64_t channel = channel_base + warp * Tr::kWarpChannels + c;
    if (channel >= p.channels) continue;
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int64_t kw = 16 * m + gid + (i >= 2 ? 8 : 0);
          const int64_t kh = kh_begin + 8 * nt + 2 * tig + (i & 1);
          if (kw >= p.kernel_w || kh >= kh_end) continue;
          float* dst = ws + slice + (kh * p.kernel_w + kw) * p.channels + channel;
          if (g.atomic) {
            atomicAdd(dst, acc[c][m][nt][i]);
          } else {
            *dst = acc[c][m][nt][i];
          }
        }
  }
}

}  // namespace flashdwc
