// The tensor-core forward's grid (plan/fwd_mma_grid.h).
#include "plan/fwd_mma_grid.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace flashdwc {
namespace {

// Filter rows a stage holds where a block of 8-row stages would be alone on its SM.
constexpr int kShortChunk = 4;

// Most output tiles a block of the streaming kernel computes (fwd/mma_stream.cuh):
// its first tile stages KH + 7 rows with nothing in flight, the others 8 rows
// each behind a look-ahead.
constexpr int kMaxStreamTilesPerBlock = 16;

// The streaming kernel's layout (fwd/mma_stream.cuh): g's, with a look-ahead buffer
// of raw_rows pixel-major tile rows (tile_cols x 32 bytes each) after the filter stage,
// and channel planes an odd number of 16-byte units long, so that the 8 planes rows of
// one stmatrix (transpose_raw_rows) fall on distinct bank groups (8 more elements a
// plane at most).
MmaFwdGrid with_look_ahead(MmaFwdGrid g, int raw_rows) {
  if ((g.x_plane / 8) % 2 == 0) {
    const int old_bytes = g.x_bytes;
    set_x_planes(g, g.x_plane + 8);
    g.meta_offset += g.x_bytes - old_bytes;
  }
  g.raw_rows = raw_rows;
  g.raw_offset = g.meta_offset;
  g.meta_offset += raw_rows * g.tile_cols * MmaFwdTraits::kOctets * 16;
  return g;
}

int64_t grid_blocks(const DwConvParams& p, const MmaFwdGrid& g) {
  return mma_fwd_ceil_div(p.batch, g.split) * g.tile_blocks_h * g.tiles_w * mma_fwd_ceil_div(p.channels, MmaFwdTraits::kBlockChannels);
}

// Blocks of `smem_bytes` each that one SM holds at once: two by the launch bounds,
// fewer where shared memory runs out.
int resident_blocks(const DeviceLimits& d, size_t smem_bytes) {
  return int(std::clamp<int64_t>(d.smem_per_sm / int64_t(smem_bytes + d.smem_reserved_per_block), 1, 2));
}

// With one tile a block (KH > 9), stages of 9 filter rows (kTallChunk, a 16-row x
// ring) instead of 8 where that takes fewer stages and keeps the SM's resident
// blocks: k = 17 in 2 stages instead of 3, k = 25-27 in 3 instead of 4, k = 51 in 6
// instead of 7. A stage costs a staging pass, a barrier pair and an A-ring fill per
// fragment, whatever its row count.
MmaFwdGrid with_nine_row_chunks(const DwConvParams& p, const DeviceLimits& d, const MmaFwdGrid& g) {
  using Tr = MmaFwdTraits;
  if (g.filter_rows != Tr::kChunk || mma_fwd_ceil_div(p.kernel_h, Tr::kTallChunk) >= mma_fwd_ceil_div(p.kernel_h, Tr::kChunk)) {
    return g;
  }
  const MmaFwdGrid nine = make_mma_fwd_grid(p, g.split, 1, g.filter_copies, Tr::kTallChunk);
  const size_t smem = mma_fwd_smem_bytes(nine);
  if (smem > size_t(d.smem_per_block) || resident_blocks(d, smem) < resident_blocks(d, mma_fwd_smem_bytes(g))) {
    return g;
  }
  return nine;
}

// The streaming kernel for KH <= 9 (fwd/mma_stream.cuh) with `tiles` tiles a block
// and an 8-row look-ahead, with two filter copies or else one, where that keeps two
// blocks on an SM. One image a strip only: on maps 64 wide and narrower (2 or 4
// images a strip, longer tile rows) it took 1.00-1.06 of dwconv_fwd_mma_kernel's
// time at k = 7 and 9, with 8 look-ahead rows or the 6 and 4 that fit there
// (docs/design-notes.md).
std::optional<MmaFwdGrid> stream_grid(const DwConvParams& p, const DeviceLimits& d, int split, int tiles) {
  if (split != 1) return std::nullopt;
  for (int copies : {2, 1}) {
    const MmaFwdGrid g = with_look_ahead(make_mma_fwd_grid(p, split, tiles, copies), MmaFwdTraits::kRows);
    const size_t smem = mma_fwd_smem_bytes(g);
    if (smem <= size_t(d.smem_per_block) && resident_blocks(d, smem) == 2) return g;
  }
  return std::nullopt;
}

// Several tiles a block for a filter 10 to 13 rows tall, with 16-byte pixels (vec) and
// one image a strip (the kernel's kLongChunks form): the most (up to
// kMaxTilesPerBlock) that keep the SM's resident blocks of one-tile grid g and leave
// at least `waves` waves, with two filter copies or else one (at k = 13 and F = 2 the
// second copy alone keeps a second block off the SM; with 2 or 4 images a strip even
// one does not). tiles > 0 fixes the count (tests), where it fits in a block's shared
// memory.
std::optional<MmaFwdGrid> tall_multi_tile_grid(const DwConvParams& p, const DeviceLimits& d, const MmaFwdGrid& g,
                                               int tiles, int64_t waves, bool vec) {
  if (!vec || g.split != 1) return std::nullopt;
  const int resident = resident_blocks(d, mma_fwd_smem_bytes(g));
  const int most = tiles > 0 ? tiles : MmaFwdTraits::kMaxTilesPerBlock, least = tiles > 0 ? tiles : 2;
  for (int t = most; t >= least; --t) {
    for (int copies : {2, 1}) {
      const MmaFwdGrid candidate = make_mma_fwd_grid(p, g.split, t, copies);
      const size_t smem = mma_fwd_smem_bytes(candidate);
      if (smem > size_t(d.smem_per_block)) continue;
      if (tiles > 0) return candidate;
      if (resident_blocks(d, smem) == resident && grid_blocks(p, candidate) >= waves * resident * d.sms) {
        return candidate;
      }
    }
  }
  return std::nullopt;
}

// Share of the L2 that the input windows of the resident blocks may take for
// chunked_multi_tile_grid, in tenths.
constexpr int64_t kChunkedTilesL2Tenths = 6;

// One-tile grid g (chunks of at most 9 filter rows) with several tiles a block,
// the chunks' layout unchanged: the kernel runs odd tiles' chunks in reverse order,
// so that a tile after the first starts with the chunk its predecessor ended with
// (its filter rows staged, all but 8 of its input rows in the ring). The most tiles
// (up to kMaxTilesPerBlock) that leave at least `waves` waves of blocks; tiles > 0
// fixes the count (tests).
// Only where the resident blocks' input windows (KH + 7 rows of the x tile each) take
// at most 6/10 of the L2 (60 MiB on the H200: 37.7 MB). A tile's other chunks read
// rows that its block read a tile earlier; with one tile a block those rows come from
// the L2 because the blocks running at the same time are vertical neighbours, with T
// tiles a block they are T tiles apart and the rows must stay in the L2 for a tile's
// time. Measured on the H200 (bf16 and fp16, 4 tiles a block against one;
// docs/design-notes.md): 0.96-0.985 of the time at 27-36 MB of
// windows (k = 13 on the 32- and 64-wide maps, 17 on the 64- and 128-wide ones, 21 on
// the 128-wide one), 1.00-1.01 at 39 MB, 1.03 at 42-53 MB (k = 21 on the narrow maps,
// 31 on the 128-wide one).
MmaFwdGrid chunked_multi_tile_grid(const DwConvParams& p, const DeviceLimits& d, const MmaFwdGrid& g, int tiles,
                                   int64_t waves) {
  auto with_tiles = [&](int t) {
    MmaFwdGrid c = g;
    set_tiles_per_block(p, t, c);
    return c;
  };
  if (tiles > 0) return with_tiles(tiles);
  const int resident = resident_blocks(d, mma_fwd_smem_bytes(g));
  const int64_t window_bytes = (p.kernel_h + MmaFwdTraits::kRows - 1) * g.tile_cols * MmaFwdTraits::kBlockChannels * 2;
  if (10 * resident * d.sms * window_bytes > kChunkedTilesL2Tenths * d.l2_bytes) return g;
  for (int t = MmaFwdTraits::kMaxTilesPerBlock; t > 1; --t) {
    const MmaFwdGrid candidate = with_tiles(t);
    if (grid_blocks(p, candidate) >= waves * resident * d.sms) return candidate;
  }
  return g;
}

}  // namespace

MmaFwdGrid choose_mma_fwd_grid(const DwConvParams& p, const DeviceLimits& d, int tiles_per_block, bool vec) {
  constexpr int64_t kMinWaves = 4;
  MmaFwdGrid g = make_mma_fwd_grid(p, 1, 1);
  for (int split : {4, 2}) {
    if (p.out_w * split > MmaFwdTraits::kStripW) continue;
    const MmaFwdGrid candidate = make_mma_fwd_grid(p, split, 1);
    if (mma_fwd_smem_bytes(candidate) <= size_t(d.smem_per_block)) {
      g = candidate;
      break;
    }
  }
  // One filter copy where that lets a second block onto the SM: the kernel is then
  // latency-bound at 8 warps (bf16 k = 31 on 128x64x64x256: 123 KB a block, 12.5%
  // occupancy, SM 35% busy; docs/design-notes.md), and a pair at
  // an odd tap costs one more shared load and a byte permute per B register.
  const MmaFwdGrid one_copy = make_mma_fwd_grid(p, g.split, 1, 1);
  const bool alone = resident_blocks(d, mma_fwd_smem_bytes(g)) == 1;
  // Filters over 9 rows tall: several tiles a block where there are several tile
  // rows, with the whole filter as one chunk at KH <= 13 (tall_multi_tile_grid) or
  // else with the one-tile grid's chunks (chunked_multi_tile_grid).
  auto tall_tiles = [&](const MmaFwdGrid& one_tile) {
    if (g.tiles_h < 2 || tiles_per_block == 1) return one_tile;
    if (p.kernel_h <= MmaFwdTraits::kMaxMultiTileKernelH) {
      if (const auto whole = tall_multi_tile_grid(p, d, one_tile, tiles_per_block, kMinWaves, vec)) return *whole;
    }
    return chunked_multi_tile_grid(p, d, one_tile, tiles_per_block, kMinWaves);
  };
  if (alone && resident_blocks(d, mma_fwd_smem_bytes(one_copy)) == 2) {
    const MmaFwdGrid one_tile = with_nine_row_chunks(p, d, one_copy);
    return p.kernel_h > MmaFwdTraits::kTallChunk ? tall_tiles(one_tile) : one_tile;
  }
  // Where neither copy count lets a second block on, half chunks: 4 filter rows a
  // stage and an 11-row x ring (k = 21 and 31 on maps 32 wide, k = 51 on maps 64
  // wide: 135 -> 94, 154 -> 107 and 148 -> 100 KB a block), at twice the stages and
  // barrier pairs a tile: 0.84, 0.90 and 0.85 of the time there on the H200 in bf16
  // (kernel level, docs/design-notes.md). Filters at most 9 tall
  // keep their 8- or 9-row chunks and the tiles per block below.
  if (alone && p.kernel_h > MmaFwdTraits::kTallChunk) {
    for (int copies : {2, 1}) {
      const MmaFwdGrid short_chunk = make_mma_fwd_grid(p, g.split, 1, copies, kShortChunk);
      if (resident_blocks(d, mma_fwd_smem_bytes(short_chunk)) == 2) return tall_tiles(short_chunk);
    }
  }
  if (p.kernel_h > MmaFwdTraits::kTallChunk) return tall_tiles(with_nine_row_chunks(p, d, g));
  if (g.tiles_h < 2) return g;
  if (vec && tiles_per_block != 1) {
    if (tiles_per_block > 1) {
      if (const auto s = stream_grid(p, d, g.split, tiles_per_block)) return *s;
    } else {
      for (int tiles = kMaxStreamTilesPerBlock; tiles > 1; tiles /= 2) {
        const auto s = stream_grid(p, d, g.split, tiles);
        if (s && grid_blocks(p, *s) >= kMinWaves * 2 * d.sms) return *s;
      }
    }
  }
  if (tiles_per_block > 0) return make_mma_fwd_grid(p, g.split, tiles_per_block);
  const int resident = resident_blocks(d, mma_fwd_smem_bytes(g));
  for (int tiles = MmaFwdTraits::kMaxTilesPerBlock; tiles > 1; --tiles) {
    const MmaFwdGrid candidate = make_mma_fwd_grid(p, g.split, tiles);
    const size_t smem = mma_fwd_smem_bytes(candidate);
    if (smem <= size_t(d.smem_per_block) && resident_blocks(d, smem) == resident &&
        grid_blocks(p, candidate) >= kMinWaves * resident * d.sms) {
      return candidate;
    }
  }
  return g;
}

}  // namespace flashdwc
