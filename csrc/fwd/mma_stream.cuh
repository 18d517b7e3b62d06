// The tensor-core forward (fwd/mma.cuh) for filters at most 9 rows tall with
// several output tiles a block, with the next tile's input rows in flight during
// this tile's MMAs.
//
// Why. dwconv_fwd_mma_kernel stages a tile's new input rows through registers
// (the NHWC-to-planes transpose) and only then computes, so at k = 7-9, where a
// tile's MMAs are short, the block waits on its global loads once a tile:
// Nsight Compute at bf16 k = 9 on 128^4 (0.64 ms) showed DRAM at 1.79 TB/s (37%)
// and a quarter of the stall samples on the staged items' stores.
//
// How. Tile j > 0 adds ring rows [8j + KH - 1, 8j + KH + 7), which go to the slots
// of tile j - 1's output rows. Right after tile j's rows are in the ring, the block
// issues cp.async copies of tile j + 1's 8 new rows, pixel-major as they lie in x,
// into a look-ahead buffer (cp.async cannot transpose); they fly during tile j's
// MMAs and output store, and are then transposed from shared memory into the
// planes, a few tens of cycles away instead of a DRAM round trip: on sm_90 by
// ldmatrix.trans and stmatrix, 8x8 blocks at a time (transpose_raw_rows), and with
// the prologue or before sm_90 (no stmatrix) through registers by stage_input. The filter (KH rows, one
// stage) is staged once a block, and a block takes up to 16 tiles (the other
// kernel 4). Needs 16-byte pixels (C % 8 == 0 and aligned pointers: kVec).
//
// Measured on the H200 (docs/design-notes.md): 0.90-0.97 of
// the time before at k = 7-9 on 128^4, of which the look-ahead itself is 0-2.5% and
// the rest the 8 tiles a block and the output store; the kernel is bound by its
// bookkeeping instructions more than by the loads. On maps 64 wide and narrower (2
// or 4 images a strip) it was 1.00-1.06 of the other kernel's time, so the launcher
// uses it with one image a strip only (plan/fwd_mma_grid.cc, stream_grid).
#pragma once

#include <cstdint>

#include "common/cp_async.cuh"
#include "fwd/mma.cuh"

namespace flashdwc {
namespace mma_fwd {

// cp.async copies of ring rows [row_begin, row_end) (at most kRows) into the
// look-ahead buffer, unit raw_unit(row - row_begin, column, octet); units outside the
// image or past C are zeros, stored directly, so that transpose_raw_rows moves every
// unit unchecked. A thread keeps one octet and the columns kThreads / kOctets apart
// (up to three: tile_cols = 8F + 128, F <= 17) and walks down the rows with one
// pointer add a copy: walking units kThreads apart instead took 49 instructions a
// copy (Nsight Compute, bf16 k = 9 on 128^4, 16% of the kernel's instructions;
// docs/design-notes.md).
__device__ __forceinline__ void issue_raw_rows(unsigned char* raw, const uint16_t* __restrict__ x,
                                               const DwConvParams& p, const MmaFwdGrid& g, int row_begin,
                                               int row_end) {
  using Tr = MmaFwdTraits;
  constexpr int kColStep = Tr::kThreads / Tr::kOctets;
  const BlockTile t = BlockTile::current<false>(g, 0);
  const int octet = int(threadIdx.x % Tr::kOctets);
  const int64_t c = t.channel_base + 8 * octet;
  const int rows = row_end - row_begin;
  const int64_t ih_first = t.oh0 - p.pad_top + row_begin;
  // Rows [row_lo, row_hi) are in the image (none past C).
  const int row_lo = c < p.channels ? int(min(max(-ih_first, int64_t(0)), int64_t(rows))) : rows;
  const int row_hi = int(max(min(p.in_h - ih_first, int64_t(rows)), int64_t(row_lo)));
  const int64_t iw0 = t.col0 - p.pad_left;
  const int64_t row_stride = p.in_w * p.channels;
  const int unit_step = g.tile_cols * Tr::kOctets;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll 1
  for (int col = int(threadIdx.x) / Tr::kOctets; col < g.tile_cols; col += kColStep) {
    const int64_t iw = iw0 + col;
    const bool col_ok = iw >= 0 && iw < p.in_w;
    const int lo = col_ok ? row_lo : rows, hi = col_ok ? row_hi : rows;
    int unit = raw_unit(g, 0, col, octet);
    for (int r = 0; r < lo; ++r, unit += unit_step) {
      *reinterpret_cast<uint4*>(raw + raw_unit_byte(unit)) = zero;
    }
    const uint16_t* src = x + ((t.n * p.in_h + ih_first + lo) * p.in_w + iw) * p.channels + c;
#pragma unroll 4
    for (int r = lo; r < hi; ++r, unit += unit_step) {
      cp_async<16>(raw + raw_unit_byte(unit), src, true);
      src += row_stride;
    }
    for (int r = hi; r < rows; ++r, unit += unit_step) {
      *reinterpret_cast<uint4*>(raw + raw_unit_byte(unit)) = zero;
    }
  }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The 8 look-ahead rows (issue_raw_rows, all of their units written) into the x tile's
// channel planes as ring rows row0 .. row0 + 7, warp w taking row w. An 8x8 block of
// 8 columns x one octet's 8 channels is one ldmatrix matrix (with .trans, lane (g,
// tig) gets channel g of columns 2tig and 2tig + 1: the plane word) and one stmatrix
// matrix (row g = channel g's 8 columns, 16 bytes of its plane); one x4 pair moves
// 4 of them, 256 elements, where stage_input's transpose through registers took
// about 70 instructions a thread for 16 (Nsight Compute, bf16 k = 7 on 128^4: 14% of
// the kernel's instructions; docs/design-notes.md). Matrix m =
// 4k + i of step k is column group 2k + i / 2, octet i % 2, so a lane's two
// addresses advance by constants; a row with an odd number of column groups repeats
// its last group's two matrices in the last step (the same values to the same
// addresses).
__device__ __forceinline__ void transpose_raw_rows(uint32_t* xs, const unsigned char* raw, const MmaFwdGrid& g,
                                                   int row0) {
  using Tr = MmaFwdTraits;
  static_assert(Tr::kWarps == Tr::kRows, "one look-ahead row a warp");
  constexpr int kStepRawBytes = 2 * 8 * Tr::kOctets * 16;  // two column groups of both octets
  constexpr int kStepPlaneBytes = 2 * 8 * 2;                // two column groups of a plane row
  const unsigned tid = thread_index();
  const int warp = int(tid / 32), lane = int(tid % 32);
  const int i = lane / 8, r = lane % 8;
  const int groups = g.tile_cols / 8;
  const int steps = (2 * groups + 3) / 4;
  const int slot = (row0 + warp) % g.tile_rows;
  // Unswizzled offsets of a multiple of 256 bytes keep raw_unit_byte's bits 4-7.
  uint32_t src = shared_address(raw) + uint32_t(raw_unit_byte(raw_unit(g, warp, 8 * (i / 2) + r, i % 2)));
  uint32_t dst = shared_address(xs) +
                 4u * uint32_t(channel_word(g, 8 * (i % 2) + r) + slot * (g.tile_cols / 2)) + 16u * uint32_t(i / 2);
#pragma unroll 1
  for (int k = 0; k < steps; ++k) {
    const bool repeat = 2 * k + i / 2 >= groups;  // past the row: the group before
    uint32_t v[4];
    ldmatrix_x4_trans(v, repeat ? src - kStepRawBytes / 2 : src);
    stmatrix_x4(repeat ? dst - kStepPlaneBytes / 2 : dst, v);
    src += kStepRawBytes;
    dst += kStepPlaneBytes;
  }
}
#endif

// One image a strip; kOneCopy: one filter copy (fwd/mma.cuh).
template <typename T, bool kPrologue, bool kOneCopy>
__global__ void __launch_bounds__(MmaFwdTraits::kThreads, 2)
dwconv_fwd_mma_stream_kernel(const T* __restrict__ x_ptr, const T* __restrict__ w_ptr, T* __restrict__ y_ptr,
                             DwConvParams p, MmaFwdGrid g, FwdEpilogue epilogue, FwdPrologue prologue) {
  using Tr = MmaFwdTraits;
  constexpr int R = Tr::kRows;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint32_t* xs = reinterpret_cast<uint32_t*>(smem_raw);
  uint16_t* fs = reinterpret_cast<uint16_t*>(smem_raw + g.x_bytes);
  unsigned char* raw = smem_raw + g.raw_offset;
  const uint16_t* x = reinterpret_cast<const uint16_t*>(x_ptr);
  const uint16_t* w = reinterpret_cast<const uint16_t*>(w_ptr);
  uint16_t* y = reinterpret_cast<uint16_t*>(y_ptr);

  if (BlockTile::spatial_block() >= g.spatial_blocks) return;
  BlockState* state = reinterpret_cast<BlockState*>(smem_raw + g.meta_offset);
  const int tiles = BlockTile::count(g);
  const int kh = int(p.kernel_h);  // <= 9: all filter rows are one stage
  // Tile j > 0 adds ring rows [first_new(j), first_new(j) + 8).
  auto first_new = [&](int j) { return R * j + kh - 1; };
  if (tiles > 1) issue_raw_rows(raw, x, p, g, first_new(1), first_new(1) + R);
  cp_async_commit();
  stage_filter<true, kOneCopy>(fs, w, p, g, 0, kh);
  stage_input<T, true, kPrologue, false>(xs, x, p, g, 0, kh + R - 1, prologue);
  for (int tile = 0; tile < tiles; ++tile) {
    if (tile > 0) {
      cp_async_wait<0>();
      // The copies are visible to every thread, and the previous tile's output
      // reads of the slots the new rows take are done.
      __syncthreads();
      const int row0 = first_new(tile);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if constexpr (!kPrologue) {
        transpose_raw_rows(xs, raw, g, row0);
      } else {
        stage_input<T, true, kPrologue, false, true>(xs, x, p, g, row0, row0 + R, prologue, raw);
      }
#else
      stage_input<T, true, kPrologue, false, true>(xs, x, p, g, row0, row0 + R, prologue, raw);
#endif
    }
    // Skipped filter rows and fragments as in dwconv_fwd_mma_kernel. The previous
    // tile's reads of the state were before its output barrier.
    if (threadIdx.x == 0) state->active = ActiveRange::make(p, g, tile);
    // The ring rows and the state are in place; the look-ahead buffer is free.
    __syncthreads();
    if (tile + 1 < tiles) {
      issue_raw_rows(raw, x, p, g, first_new(tile + 1), first_new(tile + 1) + R);
      cp_async_commit();
    }

    float acc[Tr::kWarpChannels][R][4];
    zero_accumulators(acc);
    const int k0 = state->active.kh_begin, steps = state->active.kh_end - k0;
    if (steps > 0) mma_tile<T, kOneCopy>(acc, g, xs, fs, state, R * tile + k0, steps, k0);
    // A warp reads and writes only its own channels' planes, so its output rows may
    // overwrite ring slots once its own reads are done.
    __syncwarp();
    store_tile<T, true, false>(acc, xs, y, p, g, tile, R * tile % g.tile_rows, epilogue);
  }
}

}  // namespace mma_fwd
}  // namespace flashdwc
