// The forward tensor-core kernel's block layout (fwd/mma.cuh): its fixed sizes, the
// per-problem grid the host computes, and the shared memory a grid takes. Host code
// that needs no CUDA headers, so that the plan (plan/fwd.cc) checks the kernel's
// shared memory on a CPU-only build too.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/params.h"

namespace flashdwc {

struct MmaFwdTraits {
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpChannels = 2;
  static constexpr int kBlockChannels = kWarps * kWarpChannels;  // 16
  static constexpr int kOctets = kBlockChannels / 8;              // 8-channel (16-byte) groups per pixel
  static constexpr int kRows = 8;                                 // output rows per warp (ring length)
  static constexpr int kChunk = 8;                                // filter rows per shared-memory stage
  static constexpr int kRingRows = kChunk + kRows - 1;            // input rows one chunk reads
  // Filter rows a stage holds for taller filters with one tile a block, where that
  // takes fewer stages than 8 (plan/fwd_mma_grid.cc, with_nine_row_chunks), and the most steps
  // one mma_chunk call takes: a longer chunk runs as calls of at most 9.
  static constexpr int kTallChunk = 9;
  // Several tiles a block: the ring holds all KH + 7 rows of a tile and the stage all
  // KH filter rows (one chunk a tile), up to this height (k = 13 with one filter
  // copy: 105 KB a block at F = 2 on 128-wide maps, two an SM).
  static constexpr int kMaxMultiTileKernelH = 13;
  static constexpr int kMaxTilesPerBlock = 4;
  static constexpr int kStripW = 128;                             // output columns per block (16 x 8)
  // Fragment f covers taps [8f, 8f + 8), the last one [8(F - 1), 8(F - 1) + 9):
  // starts 8 taps apart put every A row on a 16-byte boundary (one ldmatrix.x4
  // for the whole A fragment), and a 9-tap last fragment keeps F = ceil((KW - 1) / 8)
  // equal to ceil(KW / 9), the 9-tap count, at KW <= 17, 19-25 and 28-33.
  static constexpr int kPitch = 8;
  static constexpr int kLastSpan = 9;
  // Zeros before tap 0 in a filter row: B reads taps 8f + d for d in [-7, 15].
  static constexpr int kFilterPad = 8;
  // Words between the two channel octets' planes beyond 8 planes: a plane is a
  // multiple of 16 bytes (ldmatrix rows), so without it the two octets of a staging
  // store or an output read would fall on the same banks; 16 words is half of them.
  static constexpr int kOctetGapWords = 16;
  static_assert(kRows == kChunk, "one unrolled chunk of 8 is one turn of the A ring");
  static_assert(kBlockChannels % 8 == 0, "staging moves 8 channels per item");
};

// Problem-derived values computed once on the host (see make_mma_fwd_grid).
struct MmaFwdGrid {
  int frags;        // F = max(1, ceil((KW - 1) / 8))
  int tile_cols;    // x tile row length in elements (split x (8F + 128 / split), a multiple of 8)
  int tile_rows;    // slots of the x ring: min(KH + 7, chunk + 7), or KH + 7 with tiles_per_block > 1
  int x_plane;      // elements per channel of the x tile: tile_rows x tile_cols (+ 8 in the streaming kernel, with_look_ahead)
  int octet_w;      // words from channel c's plane to channel c + 8's: 8 x_plane / 2 + kOctetGapWords
  int filter_row;   // WP: elements per filter row copy (8F + 16)
  int filter_rows;  // filter rows per stage (the chunk): min(KH, chunk), or KH with tiles_per_block > 1
  int x_bytes;      // offset of the filter stage in shared memory
  int meta_offset;  // offset of the block's BlockState in shared memory
  // blockIdx.x = channel block; spatial block = blockIdx.z * gridDim.y + blockIdx.y =
  // (n / split * tile_blocks_h + tile block) * tiles_w + tile column, below
  // spatial_blocks (the grid's last row of y may run past it); the host keeps
  // spatial_blocks <= INT32_MAX, so every part fits in 32 bits. Tile block b holds
  // the output tiles b * tiles_per_block + j, j < tiles_per_block, those below
  // tiles_h. Channel blocks vary fastest so that the C / 16 blocks of the same pixels
  // run side by side: each reads one 32-byte sector of every pixel, and with the
  // channel block slowest each pass over the image fetched one sector of every line.
  uint32_t tiles_w;         // ceil(out_w / 128)
  uint32_t tiles_h;         // ceil(out_h / 8)
  uint32_t tile_blocks_h;   // ceil(tiles_h / tiles_per_block)
  uint32_t spatial_blocks;  // ceil(N / split) * tile_blocks_h * tiles_w
  int tiles_per_block;
  int split;         // images side by side in a strip: 1, 2 (out_w <= 64) or 4 (<= 32)
  int sub_pairs;     // 32-bit words per image in an x tile row: tile_cols / 2 / split
  int sub_shift;     // log2 of the segments per image: 4, 3 or 2
  int filter_copies;  // 2 (odd pairs from the shifted copy), or 1 (odd pairs by byte permute)
  // Look-ahead of the streaming kernel (fwd/mma_stream.cuh): the next tile's 8 new
  // input rows in flight as pixel-major copies during this tile's MMAs.
  int raw_rows;     // rows the look-ahead buffer holds: kRows, or 0 for dwconv_fwd_mma_kernel
  int raw_offset;   // its offset in shared memory
};

// Widest filter the kernel takes: F = 17 fragments, 200 KiB of shared memory
// per block at KH >= 8 (fits sm_90's 227 KiB; can_implement_fwd_mma checks the
// current device's limit, which is lower on sm_80/sm_89).
constexpr int64_t kMmaMaxKernelW = 135;
// Taller filters only add chunks; the bound keeps int arithmetic on KH safe.
constexpr int64_t kMmaMaxKernelH = 1 << 20;

// Bytes of the block-uniform state (mma_fwd::BlockState) after the stages.
inline constexpr int kMmaFwdBlockStateBytes = 32;

inline int64_t mma_fwd_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The x tile as channel planes of x_plane elements each: the two octets' offset and
// the tile's bytes (fwd/mma.cuh, the x tile). Planes of whole 16-byte rows
// (ldmatrix); the octets' gap puts channel octets 0 and 1 of a staging store or an
// output read on disjoint halves of the 32 banks.
inline void set_x_planes(MmaFwdGrid& g, int x_plane) {
  using Tr = MmaFwdTraits;
  g.x_plane = x_plane;
  g.octet_w = 8 * (x_plane / 2) + Tr::kOctetGapWords;
  g.x_bytes = Tr::kOctets * g.octet_w * 4;
}

// The tiles per block of g and the grid sizes that follow from them (g's split,
// tiles_h and tiles_w set).
inline void set_tiles_per_block(const DwConvParams& p, int tiles_per_block, MmaFwdGrid& g) {
  g.tiles_per_block = tiles_per_block;
  g.tile_blocks_h = uint32_t(mma_fwd_ceil_div(g.tiles_h, tiles_per_block));
  g.spatial_blocks = uint32_t(mma_fwd_ceil_div(p.batch, g.split) * g.tile_blocks_h * g.tiles_w);
}

// split: images side by side in a strip (fwd/mma.cuh, "Narrow maps"): 1, 2 or 4.
// tiles_per_block: output tiles a block computes down the image; above 1 only for
// KH <= kMaxMultiTileKernelH (13), where the ring holds all KH + 7 rows of a tile and
// the stage all KH filter rows (fwd/mma.cuh, the output tile's slots).
// filter_copies: 2, or 1 where the second copy alone keeps a second block off the
// SM (choose_mma_fwd_grid).
// chunk: filter rows a stage holds with one tile per block: kChunk (8), kShortChunk
// (4) where a block would otherwise be alone on its SM (choose_mma_fwd_grid), or
// kTallChunk (9) where that takes fewer stages (with_nine_row_chunks); the x ring
// holds chunk + 7 rows.
inline MmaFwdGrid make_mma_fwd_grid(const DwConvParams& p, int split, int tiles_per_block, int filter_copies = 2,
                             int chunk = MmaFwdTraits::kChunk) {
  using Tr = MmaFwdTraits;
  MmaFwdGrid g;
  g.frags = int(std::max<int64_t>(1, mma_fwd_ceil_div(p.kernel_w - 1, Tr::kPitch)));
  // An image's A reads columns up to 8(F - 1) + 128 / split + 7 of its sub-row; the
  // sub-row is a multiple of 8 columns (16 bytes), so every ldmatrix row is aligned.
  g.split = split;
  const int sub_cols = Tr::kPitch * g.frags + Tr::kStripW / split;
  g.tile_cols = split * sub_cols;
  g.sub_pairs = sub_cols / 2;
  g.sub_shift = split == 1 ? 4 : split == 2 ? 3 : 2;
  const bool whole_filter = tiles_per_block > 1;
  g.tile_rows = int(whole_filter ? p.kernel_h + Tr::kRows - 1
                                 : std::min<int64_t>(p.kernel_h + Tr::kRows - 1, chunk + Tr::kRows - 1));
  set_x_planes(g, g.tile_rows * g.tile_cols);
  // B reads taps 8f + d, d in [-7, 15]: up to element 8F + 14 after the 8 leading zeros.
  g.filter_row = Tr::kPitch * g.frags + 16;
  // Several tiles a block: the whole filter is one chunk (one staging pass and one
  // barrier pair a tile).
  g.filter_rows = int(whole_filter ? p.kernel_h : std::min<int64_t>(p.kernel_h, chunk));
  // Filter stage: filter_rows x 16 channels x copies x filter_row elements (a multiple of 4 bytes).
  g.filter_copies = filter_copies;
  g.meta_offset = g.x_bytes + g.filter_rows * Tr::kBlockChannels * filter_copies * g.filter_row * 2;
  // Truncation is harmless: can_implement_fwd_mma rejects sizes that do not fit.
  g.tiles_w = uint32_t(mma_fwd_ceil_div(p.out_w, Tr::kStripW));
  g.tiles_h = uint32_t(mma_fwd_ceil_div(p.out_h, Tr::kRows));
  set_tiles_per_block(p, tiles_per_block, g);
  g.raw_rows = 0;
  g.raw_offset = 0;
  return g;
}

inline size_t mma_fwd_smem_bytes(const MmaFwdGrid& g) { return size_t(g.meta_offset) + size_t(kMmaFwdBlockStateBytes); }

}  // namespace flashdwc
