// Flash-DWC forward kernel on tensor cores (paper section 4), stride 1 and
// dilation 1, fp16/bf16 in, fp32 accumulation, for any filter size.
//
// Where it runs (plan/fwd.cc): fp16/bf16 with KW >= 6, and KW = 5 where the output
// is over 64 wide or C is not a multiple of 64. At KW = 7 it takes 0.59-0.69 of the
// CUDA-core kernels' time and at KW = 6 0.34-0.55 of the GEMV kernel's; at KW = 3
// tensor cores took 1.75-1.91x, so small filters stay on CUDA cores
// (docs/design-notes.md, "Which kernel runs").
//
// GEMV to GEMM. For one channel and one filter row kh, the 8 outputs
// y[col0 + 8m + t], t < 8, against fragment f of that row (taps 8f .. 8f + 7, and
// 8f + 8 for the last fragment) read 16 consecutive inputs x[col0 + 8m + 8f + j]:
//   y[8m + t] += sum_j A[m][j] * B[j][t],  A[m][j] = x[8m + 8f + j],
//   B[j][t] = w[kh][8f + j - t] when 0 <= j - t < span (8, or 9 for the last
//   fragment) and 8f + j - t < KW, else 0.
// Stacking the 16 segments m of a 128-wide output strip gives one m16n8k16 MMA
// per (output row, kh, f); B is a banded Toeplitz matrix (50% dense, 56% for the
// last fragment). The paper's fragments are 9 taps each (all 56% dense); with
// starts 8 apart every A row begins on a 16-byte boundary, so the A fragment is one
// ldmatrix.x4 instead of four 32-bit loads, or eight loads and four byte permutes
// where 9f is odd, and F = max(1, ceil((KW - 1) / 8)) is ceil(KW / 9) for every
// paper size but 51 (7 fragments against 6). Measured in docs/design-notes.md.
//
// Row reuse. A warp owns 8 output rows r of a strip and keeps their 8 C
// fragments in registers. Output row r at filter row kh reads tile row r + kh,
// so the A fragment of (r, kh) is the one of (r + 1, kh - 1): a ring of 8 A
// fragments (one per tile row) needs one new fragment per kh step, which then
// feeds 8 MMAs that share one B fragment. The kh loop is unrolled in chunks of
// 8 so that every ring slot index is a compile-time constant.
//
// Block: 8 warps, 16 channels (each pixel's 16 channels are one 32-byte
// sector), each warp 2 channels; an output tile is 8 output rows x 128 output
// columns x 16 channels, and a block computes tiles_per_block tiles stacked
// down the image, one after the other. Filter rows are processed in chunks of
// 8 (9 for a 9-row filter with several tiles a block, below, and for taller
// filters where 9-row chunks take fewer stages; 4 where 8-row ones would leave a
// block alone on its SM: plan/fwd_mma_grid.cc, choose_mma_fwd_grid); each chunk's
// input rows (chunk + 7 halo rows) and filter rows are staged into
// shared memory, input rows in a ring (tile_rows slots) so that rows shared by
// consecutive chunks, and by consecutive tiles of a block, are loaded once:
//   x tile: [channel 16][ring slot][tile column], zero outside the image and for
//           channels >= C, channels 8-15 kOctetGapWords after channels 0-7's
//           planes; staged through registers to transpose NHWC. Ring
//           rows are numbered from the block's first tile: tile j, output row
//           r, filter row kh reads ring row 8j + r + kh, in slot row % tile_rows.
//   filter: [chunk row][channel 16][copy 2][WP], WP = 8F + 16,
//           element kFilterPad + k = tap k, zero outside [0, KW); copy 1
//           is copy 0 shifted by one element so that every (even or odd) pair
//           of adjacent taps is one aligned 32-bit load. Where the second copy
//           alone keeps a second block off the SM (MmaFwdGrid::filter_copies),
//           there is one copy, and a pair starting at an odd tap is two words
//           and a byte permute.
// Every shared-memory element an MMA reads has been staged (zeros included):
// B's zero entries multiply real inputs, and 0 * NaN garbage would be NaN.
// For the same reason an Inf or NaN in x spreads to outputs up to 15 columns
// away whose windows do not contain it (0 * Inf = NaN); finite inputs are exact
// up to fp32 summation order.
// The output tile goes back through shared memory, so that global stores are
// 16-byte vectors of 8 channels. It aliases the 8 ring slots after the resident
// rows (below), whose old rows the next tile of the block never reads: with the
// whole filter as one chunk (KH <= kMaxMultiTileKernelH, make_mma_fwd_grid) those
// are the slots of rows 8j .. 8j + 7, and the next tile starts at row 8j + 8. The
// next tile's new rows, which take those same slots, are staged only after the
// output tile has been read back (the barrier at the top of the tile loop).
//
// Tiles per block. Staging costs about as much as the MMAs at small filters:
// bf16 k = 9 on 128x128x128x128 took 1.68 ms where the k = 31 and k = 51 times
// put the MMA work at 0.40 ms. A block that walks down T tiles stages 8 new
// input rows per tile instead of KH + 7, and the filter once, in one chunk (one
// staging pass and one barrier pair per tile; at KH = 9 and 13 there were two).
// Measured on the H200, bf16 k = 9, 15-30% faster (docs/design-notes.md). Four
// staging items in flight per thread instead of one were measured too: 6-9%
// slower at k = 9 and 11% at k = 13 and 17, so staging keeps one.
// Where the whole filter does not fit with two blocks an SM, tiles keep the one-tile
// chunks (8 or 9 rows, a ring of chunk + 7 slots) and odd tiles run their chunks in
// reverse order, so that a tile starts with the chunk its predecessor ended with: its
// filter rows are still staged and all but 8 of its input rows are in the ring (k =
// 17, chunks of 9 and 8: 16 rows and one filter chunk a tile instead of 24 rows and
// two). The ring's resident rows are an exact interval that a chunk extends down or
// up, and the output tile takes the slots of the 8 rows after it, whose old rows the
// next tile does not read. Measured on the H200: 0.96-0.985 of the one-tile time
// where the L2 holds the blocks' windows (plan/fwd_mma_grid.cc, chunked_multi_tile_grid).
//
// Narrow maps. Where the output is at most 64 (32) columns wide, a strip holds 2
// (4) images side by side at the same output rows: segments 0-7 and 8-15 (or
// four runs of 4) are the same columns of images n, n + 1 (..., n + 3). Each
// image's columns are a sub-row of the x tile, with its own halo; the images share
// the filter, so B and the A ring over filter rows are unchanged, and only the A
// addresses, the staging and the final store know the image. With one image per
// strip, a 64-wide map left half of every MMA on columns past the image (bf16
// k = 31: 63.9 TFLOP/s on 128x64x64x256 against 104.9 on 128x128x128x128) and a
// 32-wide map three quarters (35.8).
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/cuda_types.cuh"
#include "common/mma_sync.cuh"
#include "common/ring_slot.cuh"
#include "common/static_for.cuh"
#include "common/epilogue.h"
#include "common/params.h"
#include "fwd/mma_layout.h"

namespace flashdwc {


namespace mma_fwd {

// This block's output tile. Recomputed from blockIdx in each phase (a few
// 32-bit divisions) rather than kept live across the compute phase, which
// needs 96 of its 128 registers for the accumulators and the A ring.
struct BlockTile {
  int64_t n, oh0, col0, channel_base;
  // Tile j of the block (j = 0: the block's first, whose input rows number the ring).
  // kNarrow: more than one image per strip; with one, n needs no multiply by split.
  __device__ __forceinline__ static uint32_t spatial_block() { return blockIdx.z * gridDim.y + blockIdx.y; }
  template <bool kNarrow>
  __device__ __forceinline__ static BlockTile current(const MmaFwdGrid& g, int j) {
    const uint32_t spatial = spatial_block();
    const uint32_t rest = spatial / g.tiles_w;
    BlockTile t;
    t.col0 = int64_t(spatial - rest * g.tiles_w) * MmaFwdTraits::kStripW;
    t.oh0 = (int64_t(rest % g.tile_blocks_h) * g.tiles_per_block + j) * MmaFwdTraits::kRows;
    t.n = int64_t(rest / g.tile_blocks_h) * (kNarrow ? g.split : 1);  // the first of the strip's images
    t.channel_base = first_channel();
    return t;
  }
  __device__ __forceinline__ static int64_t first_channel() {
    return int64_t(blockIdx.x) * MmaFwdTraits::kBlockChannels;
  }
  // Output tiles of this block: tiles_per_block, fewer in the last tile block.
  __device__ __forceinline__ static int count(const MmaFwdGrid& g) {
    const uint32_t b = (spatial_block() / g.tiles_w) % g.tile_blocks_h;
    return int(min(uint32_t(g.tiles_per_block), g.tiles_h - b * uint32_t(g.tiles_per_block)));
  }
};

// threadIdx.x through volatile asm: the compiler can neither hoist nor keep it
// live across loops, so per-lane constants derived from it are recomputed (a
// few integer ops per fragment) instead of holding registers through the
// compute phase, where 128 registers are just enough.
__device__ __forceinline__ unsigned thread_index() {
  unsigned t;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
  return t;
}

// Per-lane constants of the fragment layouts (g = lane / 4, tig = lane % 4).
struct LaneConsts {
  int warp;
  int word;          // A word of column 2tig in segment g: 4g + tig
  int h0;            // filter element of B[2tig][g] in fragment 0: kFilterPad + 2tig - g (>= 1)
  uint32_t mask0;    // halves of b0 inside the band (either span)
  uint32_t mask1;    // halves of b1 inside the band of an 8-tap fragment
  uint32_t mask1_last;  // halves of b1 inside the band of the 9-tap last fragment
  __device__ __forceinline__ static LaneConsts make() {
    const unsigned tid = thread_index();
    const int lane = tid % 32, gid = lane / 4, tig = lane % 4;
    // B[j][g] for j = 2tig + {0, 1, 8, 9} is tap 8f + d with d = 2tig - g + {0, 1, 8, 9};
    // it is inside the band when 0 <= d < span (8, or 9 for the last fragment). d0 =
    // 2tig - g is in [-7, 6], so the conditions reduce to these (constant per lane: the
    // MMA sees no divergence).
    const int d0 = 2 * tig - gid;
    LaneConsts c;
    c.warp = tid / 32;
    c.word = 4 * gid + tig;
    c.h0 = MmaFwdTraits::kFilterPad + d0;
    c.mask0 = (d0 >= 0 ? 0x0000ffffu : 0u) | (d0 >= -1 ? 0xffff0000u : 0u);
    c.mask1 = (d0 <= -1 ? 0x0000ffffu : 0u) | (d0 <= -2 ? 0xffff0000u : 0u);
    c.mask1_last = (d0 <= 0 ? 0x0000ffffu : 0u) | (d0 <= -1 ? 0xffff0000u : 0u);
    return c;
  }
  // The x-tile word at which this lane's ldmatrix row starts, in fragment 0: lane l
  // gives row l % 8 of matrix l / 8, and the four 8x8 matrices of the A fragment are
  // (segments 0-7 | 8-15) x (columns 0-7 | 8-15), matrix i holding segments
  // 8 (i % 2) + [0, 8) and columns 8 (i / 2) + [0, 8). Segment m is segment
  // m mod (16 / split) of image m / (16 / split), whose sub-row starts sub_pairs
  // words on; its column 0 is 8 columns (4 words) past the previous segment's.
  __device__ __forceinline__ static int ldsm_word(const MmaFwdGrid& g) {
    const int lane = int(thread_index() % 32), matrix = lane / 8;
    const int m = lane % 8 + 8 * (matrix & 1);
    return (m >> g.sub_shift) * g.sub_pairs + 4 * (m & ((1 << g.sub_shift) - 1)) + 4 * (matrix >> 1);
  }
};

// Filter rows [kh_begin, kh_end) and fragments [f_begin, f_end) that touch the
// image for at least one output of this block. Output row oh0 + r (r < 8) at
// filter row kh reads input row oh0 - pad_top + r + kh; fragment f reads input
// columns col0 - pad_left + 8f + [0, 135].
struct ActiveRange {
  int kh_begin, kh_end, f_begin, f_end;
  __device__ __forceinline__ static ActiveRange make(const DwConvParams& p, const MmaFwdGrid& g, int tile) {
    using Tr = MmaFwdTraits;
    const BlockTile t = BlockTile::current<false>(g, tile);  // n is not read
    const int64_t ih0 = t.oh0 - p.pad_top, iw0 = t.col0 - p.pad_left;
    constexpr int64_t kSpan = Tr::kStripW + 7;  // last column a fragment reads: 8 * 15 + 15
    ActiveRange a;
    a.kh_begin = int(min(max(-ih0 - (Tr::kRows - 1), int64_t(0)), p.kernel_h));
    a.kh_end = int(max(min(p.in_h - ih0, p.kernel_h), int64_t(a.kh_begin)));
    // f >= ceil((-iw0 - kSpan) / 8) and f <= floor((in_w - 1 - iw0) / 8), clamped to [0, F].
    const int64_t lo = -iw0 - kSpan;
    const int64_t f_lo = lo <= 0 ? 0 : (lo + Tr::kPitch - 1) / Tr::kPitch;
    const int64_t hi = p.in_w - 1 - iw0;
    const int64_t f_hi = hi < 0 ? 0 : hi / Tr::kPitch + 1;
    a.f_begin = int(min(f_lo, int64_t(g.frags)));
    a.f_end = int(max(min(f_hi, int64_t(g.frags)), int64_t(a.f_begin)));
    return a;
  }
};

// Block-uniform state in shared memory, reread after each barrier, instead of
// taking registers the compute phase needs.
struct BlockState {
  ActiveRange active;  // of the current tile
  // Ring rows [ring_lo, ring_hi) are in their slots (ring_hi - ring_lo <= tile_rows).
  int ring_lo, ring_hi;
  // Filter rows [filter_k0, filter_k0 + filter_rows) are in the stage.
  int filter_k0, filter_rows;
};
static_assert(sizeof(BlockState) == kMmaFwdBlockStateBytes, "mma_fwd_smem_bytes counts it");

// The low and high halves of a word packed by pack2.
template <typename T>
__device__ __forceinline__ T unpack_lo(uint32_t v) {
  const uint16_t bits = uint16_t(v & 0xffffu);
  return *reinterpret_cast<const T*>(&bits);
}
template <typename T>
__device__ __forceinline__ T unpack_hi(uint32_t v) {
  const uint16_t bits = uint16_t(v >> 16);
  return *reinterpret_cast<const T*>(&bits);
}

// The prologue (epilogue.h) on word k of an item (channels 2k, 2k + 1 of the
// octet) of an input element inside the image, rounded back to T as the tensor
// cores take it. `a` holds the octet's 8 scales and shifts.
template <typename T>
__device__ __forceinline__ uint32_t prologue_word(const ChannelAffine<8>& a, Activation activation, uint32_t v, int k) {
  const float lo = FwdPrologue::transform_compact(activation, to_float(unpack_lo<T>(v)), a.scale[2 * k], a.shift[2 * k]);
  const float hi =
      FwdPrologue::transform_compact(activation, to_float(unpack_hi<T>(v)), a.scale[2 * k + 1], a.shift[2 * k + 1]);
  return pack2<T>(lo, hi);
}

// The look-ahead buffer (fwd/mma_stream.cuh) holds input pixels as they lie in
// NHWC: unit (row, tile column, octet) is the 16 bytes of 8 channels, units in that
// order. Its byte offset has bits 4 and 5 flipped where bit 7 (the column's bit 2) is
// set, so that neither reader meets a 16-byte bank group twice in a quarter-warp:
// transpose_raw_rows' ldmatrix reads one octet of 8 consecutive columns (bit 4
// separates columns c..c + 3 from c + 4..c + 7), and stage_input one octet of columns
// 2q for four consecutive q, both octets (bit 5 separates q, q + 1 from q + 2, q + 3);
// where stage_input's Q is not a multiple of 4, a quarter-warp whose four words span
// two row phases may meet one twice.
__device__ __forceinline__ int raw_unit(const MmaFwdGrid& g, int row, int col, int octet) {
  return (row * g.tile_cols + col) * MmaFwdTraits::kOctets + octet;
}
__device__ __forceinline__ int raw_unit_byte(int unit) {
  const int b = unit * 16;
  return b ^ ((b >> 3) & 16) ^ ((b >> 2) & 32);
}
__device__ __forceinline__ void load_raw_unit(const unsigned char* raw, int unit, bool valid, uint32_t (&v)[4]) {
  uint4 u = make_uint4(0u, 0u, 0u, 0u);
  if (valid) u = *reinterpret_cast<const uint4*>(raw + raw_unit_byte(unit));
  v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
}

// Ring rows [row_begin, row_end) (ring row i is input row oh0 - pad_top + i,
// oh0 the block's first output row; tile column q is input column
// col0 - pad_left + q) into slots i % tile_rows; row_end - row_begin <= tile_rows.
// An item is two adjacent columns x 8 channels (word q of a tile row): two 16-byte
// loads, then per channel one 32-bit store of the column pair (the transpose from
// NHWC). kPrologue: the prologue is applied to the elements inside the image.
// kNarrow: more than one image per strip.
//
// Thread tid stages channel octet tid % kOctets. Its lane tid / kOctets is row phase
// lane / Q and word lane % Q: it stages rows phase + i x P, P = 128 / Q phases, and in
// each the words lane % Q + m x Q; lanes from P x Q on stage nothing. Rows are the
// outer loop, so a row's bounds, source pointer and ring slot are found once a row;
// along a row each item steps its word, image, source pointer and destination by
// constants and tests its column with two unsigned compares: about 55 SASS
// instructions an item at bf16 with 2 images a strip (a loop turn of 2 items is 109,
// 16 of them PRMT and 16 STS), where items 256 apart in row-major order, the row and
// word carried from item to item, took about 78 with one image and 100 with 2 or 4
// (the image of each word found again, 64-bit offsets; docs/design-notes.md). Two items of a row are loaded before
// either is stored. Against that loop: 0.95-0.98 at k = 9-31 on the 32- and 64-wide
// maps (bf16; 1.00 at fp16 k = 7 on the 32-wide one), 0.97 and 0.99 at k = 17 and 31
// on 128x128x128x128, 1.03 at k = 7 there (the streaming kernel, which stages this
// way only its first tile).
// Q gives each phase ceil(rows / 16) rows, capped at the image's sub-row words so
// that a step of Q crosses at most one image boundary: within 1% of the best Q in
// [8, 128] on average over F <= 17, 1-4 images and 1-20 rows. Powers of two alone
// left lanes idle where 128 / Q does not divide the rows (9-row stages of 112-word
// rows: 14 items a thread against 8, and k = 21 on a 32-wide map at 1.06 of the
// previous loop's time).
//
// kFromRaw: the rows' pixels are read from the look-ahead buffer `raw`, where
// issue_raw_rows copied them (raw row r = staged row r), instead of from x; the
// items outside the image are zeros either way.
template <typename T, bool kVec, bool kPrologue, bool kNarrow, bool kFromRaw = false>
__device__ __forceinline__ void stage_input(uint32_t* xs, const uint16_t* __restrict__ x, const DwConvParams& p,
                                            const MmaFwdGrid& g, int row_begin, int row_end,
                                            const FwdPrologue& prologue, const unsigned char* raw = nullptr) {
  using Tr = MmaFwdTraits;
  constexpr int kLanes = Tr::kThreads / Tr::kOctets;
  const BlockTile t = BlockTile::current<kNarrow>(g, 0);
  const int pairs = g.tile_cols / 2;
  const int plane_w = g.x_plane / 2;
  const int rows = row_end - row_begin;
  const int octet = int(threadIdx.x % Tr::kOctets);
  const int64_t c = t.channel_base + 8 * octet;
  const bool channel_ok = c < p.channels;
  // Staged row r is input row ih_first + r; its rows [row_lo, row_hi) are in the image.
  const int64_t ih_first = t.oh0 - p.pad_top + row_begin;
  const int row_lo = int(min(max(-ih_first, int64_t(0)), int64_t(rows)));
  const int row_hi = int(max(min(p.in_h - ih_first, int64_t(rows)), int64_t(row_lo)));
  // Word j of an image's sub-row holds input columns iw0 + 2j and iw0 + 2j + 1; the
  // first is in the image for j in [lo0, lo0 + n0), the second for j in [lo1, lo1 + n1)
  // (>> 1 is floor division by 2 on the signed values).
  const int64_t iw0 = t.col0 - p.pad_left;
  auto clamp_word = [&](int64_t j) { return int(min(max(j, int64_t(0)), int64_t(g.sub_pairs))); };
  const int lo0 = clamp_word(-(iw0 >> 1)), lo1 = clamp_word(-((iw0 + 1) >> 1));
  const unsigned n0 = unsigned(max(clamp_word(((p.in_w - 1 - iw0) >> 1) + 1) - lo0, 0));
  const unsigned n1 = unsigned(max(clamp_word(((p.in_w - 2 - iw0) >> 1) + 1) - lo1, 0));
  // Images of the strip that exist (kNarrow: the last strip may hold fewer).
  const int images = kNarrow ? int(min(p.batch - t.n, int64_t(4))) : 1;
  const int64_t row_stride = p.in_w * p.channels;
  const int64_t pair_stride = 2 * p.channels;

  // Phases: the rows, or half of them (rounded up) above 16; rows <= tile_rows <= 20
  // here, and more rows would only narrow Q. The quotients by runtime values are
  // floor((a + 0.5) / b) by the approximate float division, exact where a < 2^8 and
  // b <= 2^8: (a + 0.5) / b is at least 0.5 / b from an integer, more than its error
  // (the three integer divisions had cost about 70 instructions a call).
  auto quotient = [](int a, int b) { return int(__fdividef(float(a) + 0.5f, float(b))); };
  const int phases = max(rows <= 16 ? rows : (rows + 1) >> 1, 1);
  const int col_step = min(quotient(kLanes, phases), g.sub_pairs);
  const int row_step = quotient(kLanes, col_step);
  const int lane = int(threadIdx.x / Tr::kOctets);
  const int phase = quotient(lane, col_step), q0 = lane - phase * col_step;
  const int r0 = phase < row_step ? phase : rows;
  const int slot_begin = row_begin % g.tile_rows;
  // Source of word q0 of image t.n, row r0, channel c (outside the tensor for rows and
  // columns outside the image, where nothing is read), and the steps from it.
  const uint16_t* row_src = x + (((t.n * p.in_h + ih_first + r0) * p.in_w + iw0 + 2 * q0) * p.channels + c);
  const int64_t row_src_step = row_step * row_stride;
  const int64_t col_src_step = col_step * pair_stride;
  const int64_t image_src_step = p.in_h * row_stride - g.sub_pairs * pair_stride;
  ChannelAffine<8> affine;
  if constexpr (kPrologue) affine.load(prologue, c, p.channels);

  struct Item {
    uint32_t v0[4], v1[4];
    bool ok0, ok1;
    uint32_t* dst;
  };
#pragma unroll 1
  for (int r = r0; r < rows; r += row_step, row_src += row_src_step) {
    const bool row_ok = channel_ok && r >= row_lo && r < row_hi;
    uint32_t* dst = xs + octet * g.octet_w + wrap_slot(slot_begin + r, g.tile_rows) * pairs + q0;
    const uint16_t* src = row_src;
    int j = q0, sub = 0;  // word q of the row is word j of image t.n + sub
    // The current item's loads (word q); the stores wait in store().
    auto load = [&](Item& item, int q) {
      const bool ok = row_ok && (!kNarrow || sub < images);
      item.ok0 = ok && unsigned(j - lo0) < n0;
      item.ok1 = ok && unsigned(j - lo1) < n1;
      if constexpr (kFromRaw) {
        const int unit = raw_unit(g, r, 2 * q, octet);
        load_raw_unit(raw, unit, item.ok0, item.v0);
        load_raw_unit(raw, unit + Tr::kOctets, item.ok1, item.v1);
      } else {
        load8<kVec>(src, item.ok0, p.channels - c, item.v0);
        load8<kVec>(src + p.channels, item.ok1, p.channels - c, item.v1);
      }
      item.dst = dst;
    };
    auto step = [&]() {
      j += col_step;
      src += col_src_step;
      dst += col_step;
      if (kNarrow && j >= g.sub_pairs) {
        j -= g.sub_pairs;
        ++sub;
        src += image_src_step;
      }
    };
    auto store = [&](Item& item) {
      if constexpr (kPrologue) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          if (item.ok0) item.v0[k] = prologue_word<T>(affine, prologue.activation, item.v0[k], k);
          if (item.ok1) item.v1[k] = prologue_word<T>(affine, prologue.activation, item.v1[k], k);
        }
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) item.dst[k * plane_w] = pack_channel(item.v0, item.v1, k);
    };
    int q = q0;
#pragma unroll 1
    for (; q + col_step < pairs; q += 2 * col_step) {
      Item a, b;
      load(a, q);
      step();
      load(b, q + col_step);
      step();
      store(a);
      store(b);
    }
    if (q < pairs) {
      Item a;
      load(a, q);
      store(a);
    }
  }
}

// Filter rows [k0, k0 + rows) into the stage, with both copies unless kOneCopy
// (see the file comment). An item is word i of a row copy for 8 channels: copy-0
// elements 2i and 2i + 1 (taps 2i - kFilterPad and the next) and copy-1 elements 2i
// and 2i + 1 (the next two taps), from three 16-byte tap loads (the third only with
// two copies), stored as one 32-bit word per channel and copy. Copy 1's last element,
// tap wp - kFilterPad >= KW + 7, is a zero. With an item of one tap and 16-bit stores
// this loop took about 100 SASS instructions a tap, 10% of the kernel's instructions
// and of its stall samples at bf16 k = 17 on 128x128x128x128 (Nsight Compute);
// by words, 0.97-0.995 of that loop's kernel time at k = 7-51 (bf16 and fp16 on the
// H200; docs/design-notes.md). Holding a batch of tap loads in
// registers across stage_input instead was 4-18% slower at every point.
template <bool kVec, bool kOneCopy>
__device__ __forceinline__ void stage_filter(uint16_t* fs, const uint16_t* __restrict__ w, const DwConvParams& p,
                                             const MmaFwdGrid& g, int64_t k0, int rows) {
  constexpr int kCopies = kOneCopy ? 1 : 2;
  using Tr = MmaFwdTraits;
  const int64_t channel_base = BlockTile::first_channel();
  const int words = g.filter_row / 2;  // wp is a multiple of 8
  const int items = rows * words * Tr::kOctets;
  uint32_t* fw = reinterpret_cast<uint32_t*>(fs);
#pragma unroll 1
  for (int it = threadIdx.x; it < items; it += Tr::kThreads) {
    const int octet = it % Tr::kOctets;
    const int rest = it / Tr::kOctets;
    const int i = rest % words;
    const int s = rest / words;
    const int64_t c = channel_base + 8 * octet;
    const int64_t kw0 = 2 * i - Tr::kFilterPad;
    uint32_t v[kCopies + 1][4];
#pragma unroll
    for (int d = 0; d <= kCopies; ++d) {
      const int64_t kw = kw0 + d;
      const bool ok = kw >= 0 && kw < p.kernel_w && c < p.channels;
      const uint16_t* src = ok ? w + filter_tap(p, k0 + s, kw) * p.channels + c : w;
      load8<kVec>(src, ok, p.channels - c, v[d]);
    }
    uint32_t* row = fw + (s * Tr::kBlockChannels + 8 * octet) * kCopies * words + i;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      row[k * kCopies * words] = pack_channel(v[0], v[1], k);
      if (!kOneCopy) row[k * kCopies * words + words] = pack_channel(v[1], v[kCopies], k);
    }
  }
}

// One chunk of kSteps filter rows, fragment f, one channel: the A ring is
// filled with ring rows 8j + k0 .. 8j + k0 + 6, then step s loads ring row
// 8j + k0 + s + 7 and runs the 8 MMAs of filter row k0 + s.
//   xa: shared-memory byte address of this lane's ldmatrix row in the slot of ring
//       row 8j + k0, fragment f applied (LaneConsts::ldsm_word + 4f words);
//   xa_wrap: the same address one row past the last ring slot; the slots are
//       row_bytes apart and wrap around after ring_bytes (tile_rows slots);
//   fb: this lane's B word for chunk row 0 (pair starting at tap 8f + 2tig - g;
//       with kOneCopy, the word holding that tap, and b_select the byte permute
//       that takes the pair from it and the next word); chunk rows are
//       filter_stride_w words apart.
// The row address advances by one add and a wrap test per load instead of
// precomputed per-row offsets, which would hold 15 registers the accumulators
// and the ring need.
template <typename T, int kSteps, bool kOneCopy>
__device__ __forceinline__ void mma_chunk(float (&acc)[MmaFwdTraits::kRows][4], uint32_t xa, uint32_t xa_wrap,
                                          uint32_t row_bytes, uint32_t ring_bytes, const uint32_t* fb,
                                          int filter_stride_w, uint32_t mask0, uint32_t mask1, uint32_t b_select) {
  using Tr = MmaFwdTraits;
  constexpr int R = Tr::kRows;
  uint32_t ring[R][4];
  // ldmatrix.x4 hands lane (g, tig) row g, columns 2tig..+1 of each of the four
  // matrices, which is the m16n8k16 row-major A layout (registers 0-3 = segments
  // g and g + 8, columns 2tig and 2tig + 8) given the matrix order of ldsm_word.
  auto load_a = [&](uint32_t(&a)[4]) {
    ldmatrix_x4(a, xa);
    xa += row_bytes;
    if (xa >= xa_wrap) xa -= ring_bytes;
  };
#pragma unroll
  for (int i = 0; i < R - 1; ++i) load_a(ring[i]);
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    load_a(ring[(s + R - 1) % R]);
    // B fragment: b0 = rows 2tig, 2tig+1 of column g; b1 = rows 2tig+8, 2tig+9.
    uint32_t b0, b1;
    if constexpr (kOneCopy) {
      b0 = __byte_perm(fb[0], fb[1], b_select) & mask0;
      b1 = __byte_perm(fb[4], fb[5], b_select) & mask1;
    } else {
      b0 = fb[0] & mask0;
      b1 = fb[4] & mask1;
    }
    fb += filter_stride_w;
#pragma unroll
    for (int r = 0; r < R; ++r) mma_16816<T>(acc[r], ring[(s + r) % R], b0, b1);
  }
}

// Word offset of channel ch's plane in the x tile (two octets of 8 planes,
// kOctetGapWords apart).
__device__ __forceinline__ int channel_word(const MmaFwdGrid& g, int ch) {
  return (ch / 8) * g.octet_w + (ch % 8) * (g.x_plane / 2);
}

__device__ __forceinline__ void zero_accumulators(
    float (&acc)[MmaFwdTraits::kWarpChannels][MmaFwdTraits::kRows][4]) {
#pragma unroll
  for (int cc = 0; cc < MmaFwdTraits::kWarpChannels; ++cc)
#pragma unroll
    for (int r = 0; r < MmaFwdTraits::kRows; ++r)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[cc][r][e] = 0.0f;
}

// The MMAs of one chunk of a tile, every active fragment and both of the warp's
// channels: filter rows [k0, k0 + steps) over ring rows need_begin = 8 tile + k0
// onwards, the chunk's rows from stage row filter_row0 on. The active fragments are
// reread from the block state rather than held.
template <typename T, bool kOneCopy>
__device__ __forceinline__ void mma_tile(float (&acc)[MmaFwdTraits::kWarpChannels][MmaFwdTraits::kRows][4],
                                         const MmaFwdGrid& g, const uint32_t* xs, const uint16_t* fs,
                                         const BlockState* state, int need_begin, int steps, int filter_row0) {
  using Tr = MmaFwdTraits;
  const int row_w = g.tile_cols / 2;
  const int wp = g.filter_row;
  // Words per chunk row: 16 channels x copies x wp / 2.
  const int filter_stride_w = kOneCopy ? Tr::kBlockChannels * (wp / 2) : Tr::kBlockChannels * wp;
  const int slot0 = need_begin % g.tile_rows;
  for (int f = state->active.f_begin; f < state->active.f_end; ++f) {
    const LaneConsts lc = LaneConsts::make();
    // Offsets of this lane's A row and B word within a channel's planes.
    const int f_word = (Tr::kPitch * f) >> 1;
    const int a_word = LaneConsts::ldsm_word(g) + f_word;
    const uint32_t row_bytes = 4u * uint32_t(row_w);
    const uint32_t ring_bytes = row_bytes * uint32_t(g.tile_rows);
    const uint32_t a_off = 4u * uint32_t(a_word + slot0 * row_w);
    const uint32_t wrap_off = 4u * uint32_t(a_word + g.tile_rows * row_w);
    // Pair (h, h + 1): copy 0 at word h / 2 when h is even, copy 1 (shifted
    // by one element, wp / 2 words on) at word (h - 1) / 2 when h is odd; with
    // one copy, the high half of word (h - 1) / 2 and the low half of the next.
    const int h = lc.h0 + Tr::kPitch * f;
    const int b_off = (h >> 1) + (kOneCopy ? 0 : (h & 1) * (wp / 2));
    const uint32_t b_select = kOneCopy && (h & 1) ? 0x5432u : 0x3210u;  // (unused with two copies)
    const uint32_t mask1 = f == g.frags - 1 ? lc.mask1_last : lc.mask1;
#pragma unroll
    for (int cc = 0; cc < Tr::kWarpChannels; ++cc) {
      const int ch = lc.warp * Tr::kWarpChannels + cc;
      const uint32_t xc = shared_address(xs + channel_word(g, ch));
      const uint32_t* fb = reinterpret_cast<const uint32_t*>(fs) + filter_row0 * filter_stride_w +
                           ch * (kOneCopy ? wp / 2 : wp) + b_off;  // chunk row 0
      if (steps == Tr::kChunk) {
        mma_chunk<T, Tr::kChunk, kOneCopy>(acc[cc], xc + a_off, xc + wrap_off, row_bytes, ring_bytes, fb,
                                           filter_stride_w, lc.mask0, mask1, b_select);
      } else if (steps == Tr::kTallChunk) {
        mma_chunk<T, Tr::kTallChunk, kOneCopy>(acc[cc], xc + a_off, xc + wrap_off, row_bytes, ring_bytes, fb,
                                               filter_stride_w, lc.mask0, mask1, b_select);
      } else {
        static_for<1, Tr::kChunk>([&](auto k) {
          if (steps == k.value) {
            mma_chunk<T, k.value, kOneCopy>(acc[cc], xc + a_off, xc + wrap_off, row_bytes, ring_bytes, fb,
                                            filter_stride_w, lc.mask0, mask1, b_select);
          }
        });
      }
    }
  }
}

// The tile's accumulators to y through shared memory (the first 128 columns of the
// 8 slots from out_slot0 on, wrapping, whose rows the next tile of the block does not
// read: see dwconv_fwd_mma_kernel), with the epilogue; the warp's own reads of those
// slots must be done.
template <typename T, bool kVec, bool kNarrow>
__device__ __forceinline__ void store_tile(
    const float (&acc)[MmaFwdTraits::kWarpChannels][MmaFwdTraits::kRows][4], uint32_t* xs,
    uint16_t* __restrict__ y, const DwConvParams& p, const MmaFwdGrid& g, int tile, int out_slot0,
    const FwdEpilogue& epilogue) {
  using Tr = MmaFwdTraits;
  constexpr int R = Tr::kRows;
  const int row_w = g.tile_cols / 2;
  const int plane_w = g.x_plane / 2;
  // Accumulators to the output tile: output row r of channel ch goes to the
  // first 128 columns of slot out_slot0 + r (wrapping) in ch's plane. C fragment
  // registers 0, 1 are (row g, columns 2tig, 2tig + 1), registers 2, 3 the same
  // columns of row g + 8, i.e. output columns 8g + 2tig (+1) and 64 + 8g + 2tig (+1).
  // The warp's two channels are adjacent planes of one octet; the slot's offset is
  // carried from row to row (one wrap at most).
  const int ring_w = g.tile_rows * row_w;
  {
    const LaneConsts lc = LaneConsts::make();
    uint32_t* dst0 = xs + channel_word(g, lc.warp * Tr::kWarpChannels) + lc.word;
    static_assert(Tr::kWarpChannels == 2 && Tr::kBlockChannels % 8 == 0, "a warp's channels share an octet");
    uint32_t* dst1 = dst0 + plane_w;
    int off = out_slot0 * row_w;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      dst0[off] = pack2<T>(acc[0][r][0], acc[0][r][1]);
      dst0[off + 32] = pack2<T>(acc[0][r][2], acc[0][r][3]);
      dst1[off] = pack2<T>(acc[1][r][0], acc[1][r][1]);
      dst1[off + 32] = pack2<T>(acc[1][r][2], acc[1][r][3]);
      off += row_w;
      if (off >= ring_w) off -= ring_w;
    }
  }
  __syncthreads();

  // Output tile to NHWC: an item is two adjacent columns x 8 channels. A thread's
  // items are kThreads apart, which keeps its octet and column pair and steps the
  // row by kRowStep, so the bounds, the bias and the addresses are found once.
  const BlockTile t = BlockTile::current<kNarrow>(g, tile);
  constexpr int kPairs = Tr::kStripW / 2;
  constexpr int kRowStep = Tr::kThreads / (Tr::kOctets * kPairs);
  static_assert(Tr::kThreads % (Tr::kOctets * kPairs) == 0 && R % kRowStep == 0, "whole rows a pass");
  const int octet = int(threadIdx.x) % Tr::kOctets;
  const int q = (int(threadIdx.x) / Tr::kOctets) % kPairs;
  const int r0 = int(threadIdx.x) / (Tr::kOctets * kPairs);
  // Strip column 2q is column 2q mod (128 / split) of image t.n + 2q / (128 / split).
  const int sub_shift_cols = g.sub_shift + 3;  // log2 of the columns per image
  const int sub = kNarrow ? (2 * q) >> sub_shift_cols : 0;
  const int64_t n = t.n + sub;
  const int64_t ow = t.col0 + 2 * q - (sub << sub_shift_cols);
  const int64_t c = t.channel_base + 8 * octet;
  if ((kNarrow && n >= p.batch) || ow >= p.out_w || c >= p.channels) return;
  const int rows = int(min(int64_t(R), p.out_h - t.oh0));
  const bool second = ow + 1 < p.out_w;
  float bias[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const T* bias_ptr = static_cast<const T*>(epilogue.bias);
    bias[k] = bias_ptr != nullptr && c + k < p.channels ? to_float(bias_ptr[c + k]) : 0.0f;
  }
  const uint32_t* src0 = xs + octet * g.octet_w + q;
  uint16_t* dst = y + ((n * p.out_h + t.oh0 + r0) * p.out_w + ow) * p.channels + c;
  const int64_t dst_step = kRowStep * p.out_w * p.channels;
  int off = wrap_slot(out_slot0 + r0, g.tile_rows) * row_w;
  const int off_step = kRowStep * row_w;
#pragma unroll 2
  for (int r = r0; r < rows; r += kRowStep) {
    const uint32_t* src = src0 + off;
    off += off_step;
    if (off >= ring_w) off -= ring_w;
    uint32_t v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = src[k * plane_w];
    if (epilogue.active()) {
      // Bias and activation (epilogue.h) here rather than on the accumulators,
      // which would cost the compute phase registers it has none of (128): the
      // pre-activation is rounded to T first, as an unfused bias + activation would.
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        v[k] = pack2<T>(apply_activation(epilogue.activation, to_float(unpack_lo<T>(v[k])) + bias[k]),
                        apply_activation(epilogue.activation, to_float(unpack_hi<T>(v[k])) + bias[k]));
      }
    }
    if constexpr (kVec) {
      uint4 lo, hi;
      lo.x = __byte_perm(v[0], v[1], 0x5410), hi.x = __byte_perm(v[0], v[1], 0x7632);
      lo.y = __byte_perm(v[2], v[3], 0x5410), hi.y = __byte_perm(v[2], v[3], 0x7632);
      lo.z = __byte_perm(v[4], v[5], 0x5410), hi.z = __byte_perm(v[4], v[5], 0x7632);
      lo.w = __byte_perm(v[6], v[7], 0x5410), hi.w = __byte_perm(v[6], v[7], 0x7632);
      store8(dst, lo);
      if (second) store8(dst + p.channels, hi);
    } else {
      const int64_t valid = p.channels - c;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if (k < valid) {
          dst[k] = uint16_t(v[k]);
          if (second) dst[p.channels + k] = uint16_t(v[k] >> 16);
        }
      }
    }
    dst += dst_step;
  }
}

// kNarrow: more than one image per strip (MmaFwdGrid::split > 1).
// kOneCopy: one filter copy (MmaFwdGrid::filter_copies == 1).
// kLongChunks: chunks of more than kTallChunk filter rows (several tiles a block at
// KH 10-13, MmaFwdGrid::filter_rows > 9), run as MMA runs of at most 9; a separate
// instantiation, since the run loop alone raised the hot kernels' spills (12/28 ->
// 20/56 bytes) and cost 1-2% at k = 9 on 128x64x64x256.
template <typename T, bool kVec, bool kPrologue, bool kNarrow, bool kOneCopy, bool kLongChunks = false>
__global__ void __launch_bounds__(MmaFwdTraits::kThreads, 2)
dwconv_fwd_mma_kernel(const T* __restrict__ x_ptr, const T* __restrict__ w_ptr, T* __restrict__ y_ptr,
                      DwConvParams p, MmaFwdGrid g, FwdEpilogue epilogue, FwdPrologue prologue) {
  using Tr = MmaFwdTraits;
  constexpr int R = Tr::kRows;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint32_t* xs = reinterpret_cast<uint32_t*>(smem_raw);
  uint16_t* fs = reinterpret_cast<uint16_t*>(smem_raw + g.x_bytes);
  const uint16_t* x = reinterpret_cast<const uint16_t*>(x_ptr);
  const uint16_t* w = reinterpret_cast<const uint16_t*>(w_ptr);
  uint16_t* y = reinterpret_cast<uint16_t*>(y_ptr);

  // The grid's last row of y may run past the spatial blocks (plan_fwd_mma_launch, plan/fwd_launch.cc).
  if (BlockTile::spatial_block() >= g.spatial_blocks) return;
  BlockState* state = reinterpret_cast<BlockState*>(smem_raw + g.meta_offset);
  if (threadIdx.x == 0) {
    state->ring_lo = state->ring_hi = 0;
    state->filter_k0 = state->filter_rows = -1;
  }
  for (int tile = 0; tile < BlockTile::count(g); ++tile) {
    // Filter rows and fragments that read only padding for every output of the
    // tile add nothing: skip them (whole chunks and fragments, block-uniform).
    if (threadIdx.x == 0) state->active = ActiveRange::make(p, g, tile);
    // Also orders the previous tile's reads of its output slots before this
    // tile's staging overwrites them.
    __syncthreads();

    float acc[Tr::kWarpChannels][R][4];
    zero_accumulators(acc);

    // Chunks in reverse order on odd tiles: a tile then starts with the chunk the
    // previous one ended with, whose filter rows are still staged and whose input rows
    // but the 8 new ones are still in the ring (see the file comment, several tiles a
    // block with chunks).
    const int chunks = (state->active.kh_end - state->active.kh_begin + g.filter_rows - 1) / g.filter_rows;
    for (int i = 0; i < chunks; ++i) {
      const int k0 = state->active.kh_begin + ((tile & 1) ? chunks - 1 - i : i) * g.filter_rows;
      const int steps = min(g.filter_rows, state->active.kh_end - k0);
      // The chunk reads ring rows [need_begin, need_end). Those already in their
      // slots (loaded by an earlier chunk or tile) are not staged again; new rows go
      // to the slots of rows tile_rows away, which this chunk does not read.
      const int need_begin = R * tile + k0, need_end = need_begin + steps + R - 1;
      const int ring_lo = state->ring_lo, ring_hi = state->ring_hi;
      int row_begin, row_end, next_lo, next_hi;
      if (need_begin >= ring_lo && need_begin <= ring_hi) {  // down from ring_hi (or none)
        row_begin = ring_hi;
        row_end = max(need_end, ring_hi);
        next_hi = row_end;
        next_lo = max(ring_lo, row_end - g.tile_rows);
      } else if (need_end >= ring_lo && need_end <= ring_hi) {  // up from ring_lo
        row_begin = need_begin;
        row_end = ring_lo;
        next_lo = need_begin;
        next_hi = min(ring_hi, need_begin + g.tile_rows);
      } else {
        row_begin = next_lo = need_begin;
        row_end = next_hi = need_end;
      }
      const bool filter_staged = state->filter_k0 == k0 && state->filter_rows == steps;
      stage_input<T, kVec, kPrologue, kNarrow>(xs, x, p, g, row_begin, row_end, prologue);
      if (!filter_staged) stage_filter<kVec, kOneCopy>(fs, w, p, g, k0, steps);
      __syncthreads();
      // Every thread has read the state above; the next read follows the barrier
      // below the compute.
      if (threadIdx.x == 0) {
        state->ring_lo = next_lo;
        state->ring_hi = next_hi;
        state->filter_k0 = k0;
        state->filter_rows = steps;
      }

      if constexpr (kLongChunks) {
        // Runs of at most 9 steps over the resident rows: each refills the A ring (7
        // ldmatrix a fragment and channel), and no mma_chunk longer than 9 is compiled.
        for (int s0 = 0; s0 < steps; s0 += Tr::kTallChunk) {
          mma_tile<T, kOneCopy>(acc, g, xs, fs, state, need_begin + s0, min(Tr::kTallChunk, steps - s0), s0);
        }
      } else {
        mma_tile<T, kOneCopy>(acc, g, xs, fs, state, need_begin, steps, 0);
      }
      // The next chunk's staging overwrites ring slots and the filter stage; the
      // output rows below alias ring slots.
      __syncthreads();
    }

    // The output goes to the slots of the 8 rows after the resident ones, which hold
    // rows ring_hi - tile_rows onwards: the next tile starts 8 rows further down with
    // the chunk this one ended with (or its only chunk), so it reads none of them and
    // stages its new rows into those slots.
    const int ring_hi = state->ring_hi;
    if (threadIdx.x == 0) state->ring_lo = max(state->ring_lo, ring_hi - g.tile_rows + R);
    store_tile<T, kVec, kNarrow>(acc, xs, y, p, g, tile, ring_hi % g.tile_rows, epilogue);
  }
}

}  // namespace mma_fwd
}  // namespace flashdwc
