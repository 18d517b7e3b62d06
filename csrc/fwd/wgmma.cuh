// Forward depthwise convolution on Hopper warpgroup MMA (wgmma.mma_async, sm_90a):
// fp16/bf16 in and out, fp32 accumulation, stride 1, dilation 1, output as large as
// the input (fwd/wgmma_layout.h has the sizes, plan/fwd.cc the problems it takes).
// Compiled for sm_90a only (fwd/wgmma.cu).
//
// ---- Mapping ------------------------------------------------------------------------
// GEMV -> GEMM as in fwd/mma.cuh, with two changes.
//
// 1. Fragments by input offset, not by tap. For one channel and filter row kh, output
//    columns 8s + t (t < 8) of a row get, for k-step q (16 input columns):
//      y[8s + t] += sum_k A_q[s][k] B_q[k][t],  A_q[s][k] = x[8s + 16q + k],
//      B_q[k][t] = w[kh][16q + k - t]  (zero outside [0, KW)).
//    Tap j = 16q + k - t is reached exactly once for every t, so NQ = ceil((KW + 7) / 16)
//    k-steps cover the row: 3 and 4 at KW = 31 and 51. Useful share of a k-step's
//    MACs: KW / (16 NQ) = 0.65, 0.80.
//
// 2. Filter rows in N. A wgmma's N is one channel's. The R = 16 output rows of a tile
//    are the N dimension, 8 columns each: input row i of the tile is one A (64
//    segments x 16 inputs, in registers) and feeds output rows b through filter row
//    kh = i - b, so B_i[k][(b, t)] = w[i - b][16q + k - t] (zero where i - b is outside
//    [0, KH)). B_i for all i is one strip of bricks in shared memory: brick (q, r) =
//    the 16 x 8 Toeplitz block of filter row kh = KH - 1 + P - r (P = RN - 1 zero rows
//    on each side), so B_i's 8-column blocks b0 .. b0 + RN - 1 are consecutive bricks
//    and one descriptor (N-direction stride one brick) addresses them. The R rows go
//    in G = R / RN groups of RN rows (N = 8 RN a wgmma). A group with no filter row at
//    this i multiplies RN zero bricks rather than being skipped: a wgmma in a
//    conditional path made ptxas serialize every wgmma of the kernel (C7520).
//    Useful share of issued MACs on 128x64x64x256: 0.52 at k = 31, 0.83 at k = 51.
//
// Warpgroup tile: M = 64 segments = 8 units x 8 segments of 8 columns; a unit is
// (image n, 64-column strip). One block = one warpgroup = one channel x 8 units,
// walking down the image in tiles of R output rows; B (every brick of its channel) is
// built once a block.
//
// Layout: per channel, B is (NQ (KH + 2P) + RN) x 256 bytes (73 KB at k = 51), so a
// block holds one channel's and must do much work per channel; read from NHWC, one
// channel's elements are 2 bytes of each 32-byte sector. Hence the planar copies of x
// and y (fwd/wgmma_layout.h) and the two transposes below, 16 bytes a thread on both
// sides: 0.36-0.42 ms for the pair at 128x64x64x256 on an H200, the kernel 1.0 ms at
// k = 31 and 1.8 at k = 51. Reading NHWC through a cluster's shared memory instead was
// slower (docs/design-notes.md).
//
// Staging: each input row of the tile (8 units x XW = 56 + 16 NQ columns, 16-byte
// aligned) is one cp.async of 16 bytes a thread, 8 rows ahead in a ring of 9 slots;
// only rows inside the image are staged, and units past the batch are zero-filled.
// A comes from shared memory by ldmatrix.x4 (one a k-step) into registers in the
// m16n8k16 A layout, which is wgmma's register-A layout for each warp's 16 rows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda_types.cuh"
#include "common/epilogue.h"
#include "common/mma_sync.cuh"  // shared_address, ldmatrix_x4, pack2
#include "fwd/wgmma_layout.h"

namespace flashdwc {
namespace wgmma_fwd {

using Tr = WgmmaFwdTraits;

// ---- PTX wrappers ----------------------------------------------------------------------
// 16 bytes global -> shared; src_bytes = 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait_staged() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Makes the generic-proxy stores of B visible to wgmma, which reads through the async proxy.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Wait until at most N committed wgmma groups are still in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Shared-memory matrix descriptor, no swizzle, base offset 0: the K-direction
// core-matrix stride 128 bytes (leading byte offset), the N-direction 8-column stride
// one 256-byte brick (stride byte offset), as a unit test of every N checked on an
// H100 (benchmarks/cuda/time_fwd_wgmma.cu).
__device__ __forceinline__ uint64_t brick_descriptor(uint32_t smem_addr) {
  constexpr uint64_t kLbo = 128, kSbo = Tr::kBrickBytes;
  return uint64_t((smem_addr & 0x3FFFFu) >> 4) | ((kLbo >> 4) << 16) | ((kSbo >> 4) << 32);
}

// D (64 x N, fp32) += A (64 x 16, registers) x B (16 x N, descriptor), T = __half or
// __nv_bfloat16. Per warp w, lane (g = lane / 4, tig = lane % 4): a[0] = A[16w + g]
// [2tig, 2tig + 1], a[1] = row + 8, a[2] = columns + 8, a[3] = both;
// d[4j + e] = D[16w + g + 8 (e / 2)][8j + 2tig + e % 2].
template <int N, typename T>
struct Wgmma;
#define FLASHDWC_WG_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define FLASHDWC_WG_A "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)
#define FLASHDWC_WG_HEAD(SHAPE, TYPE) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE " "
#define FLASHDWC_WG_64(TYPE, TT)                                                                             \
  template <>                                                                                                \
  struct Wgmma<64, TT> {                                                                                     \
    __device__ __forceinline__ static void run(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {      \
      asm volatile(FLASHDWC_WG_HEAD("m64n64k16", TYPE)                                                       \
                   "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                 \
                   "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "                      \
                   "{%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"                                                \
                   : FLASHDWC_WG_D4(0), FLASHDWC_WG_D4(4), FLASHDWC_WG_D4(8), FLASHDWC_WG_D4(12),            \
                     FLASHDWC_WG_D4(16), FLASHDWC_WG_D4(20), FLASHDWC_WG_D4(24), FLASHDWC_WG_D4(28)          \
                   : FLASHDWC_WG_A);                                                                         \
    }                                                                                                        \
  };
#define FLASHDWC_WG_128(TYPE, TT)                                                                                 \
  template <>                                                                                                     \
  struct Wgmma<128, TT> {                                                                                         \
    __device__ __forceinline__ static void run(float (&d)[64], const uint32_t (&a)[4], uint64_t desc) {           \
      asm volatile(FLASHDWC_WG_HEAD("m64n128k16", TYPE)                                                           \
                   "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"      \
                   "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,"     \
                   "%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "                   \
                   "{%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"                                                     \
                   : FLASHDWC_WG_D4(0), FLASHDWC_WG_D4(4), FLASHDWC_WG_D4(8), FLASHDWC_WG_D4(12),                 \
                     FLASHDWC_WG_D4(16), FLASHDWC_WG_D4(20), FLASHDWC_WG_D4(24), FLASHDWC_WG_D4(28),              \
                     FLASHDWC_WG_D4(32), FLASHDWC_WG_D4(36), FLASHDWC_WG_D4(40), FLASHDWC_WG_D4(44),              \
                     FLASHDWC_WG_D4(48), FLASHDWC_WG_D4(52), FLASHDWC_WG_D4(56), FLASHDWC_WG_D4(60)               \
                   : FLASHDWC_WG_A);                                                                              \
    }                                                                                                             \
  };
FLASHDWC_WG_64("bf16", __nv_bfloat16)
FLASHDWC_WG_64("f16", __half)
FLASHDWC_WG_128("bf16", __nv_bfloat16)
FLASHDWC_WG_128("f16", __half)
#undef FLASHDWC_WG_128
#undef FLASHDWC_WG_64
#undef FLASHDWC_WG_HEAD
#undef FLASHDWC_WG_A
#undef FLASHDWC_WG_D4

// ---- layout transforms ------------------------------------------------------------------
// Both move 16 bytes a thread on the global side: 8 channels of one pixel on the NHWC
// side (a warp covers 4 pixels x 64 channels, four whole 128-byte lines) and 8
// columns of one channel row on the planar side, through a shared tile [64
// channels][pitch] of 2-byte elements, pitch = W rounded up to 8, plus 2 (rows start
// one bank apart). One block per (h, n, 64 channels), the last block of a row taking
// C % 64 of them; C % 8 == 0. Grid (H, N, channel blocks).

// x (N, H, W, C) -> xt[c][n][h][x_pitch], element (h, w) at column pad_left + w, zeros
// elsewhere.
// T (__half or __nv_bfloat16) only names the instance; both move 2-byte bit patterns.
template <typename T>
__global__ void __launch_bounds__(Tr::kTransposeThreads)
    dwconv_to_planar_kernel(const uint16_t* __restrict__ x, uint16_t* __restrict__ xt, DwConvParams p,
                            int64_t x_pitch) {
  extern __shared__ uint16_t tile[];
  const int64_t h = blockIdx.x, n = blockIdx.y, c0 = int64_t(blockIdx.z) * Tr::kTransposeChannels;
  const int w_img = int(p.in_w);
  const int cb = int(min(int64_t(Tr::kTransposeChannels), p.channels - c0)), vecs = cb / 8;
  const int tp = int(wgmma_fwd_transpose_pitch(w_img));
  const uint16_t* xs = x + ((n * p.in_h + h) * p.in_w) * p.channels + c0;
  for (int i = threadIdx.x; i < vecs * w_img; i += blockDim.x) {
    const int w = i / vecs, j = i % vecs;  // pixel w, channels 8j .. 8j + 7
    const uint4 v = *reinterpret_cast<const uint4*>(xs + int64_t(w) * p.channels + 8 * j);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) tile[(8 * j + e) * tp + w] = uint16_t(words[e / 2] >> (16 * (e % 2)));
  }
  __syncthreads();
  const int chunks = int(x_pitch / 8);  // x_pitch is a multiple of 8
  const int pw = int(p.pad_left);
  for (int i = threadIdx.x; i < cb * chunks; i += blockDim.x) {
    const int cc = i / chunks, q = i % chunks;
    uint32_t words[4];
#pragma unroll
    for (int e2 = 0; e2 < 4; ++e2) {
      uint32_t pair = 0;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int w = 8 * q + 2 * e2 + half - pw;
        const uint32_t u = w >= 0 && w < w_img ? tile[cc * tp + w] : 0u;
        pair |= u << (16 * half);
      }
      words[e2] = pair;
    }
    *reinterpret_cast<uint4*>(xt + (((c0 + cc) * p.batch + n) * p.in_h + h) * x_pitch + 8 * q) =
        make_uint4(words[0], words[1], words[2], words[3]);
  }
}

// yt[c][n][h][y_pitch] (columns < W read) -> y (N, H, W, C).
template <typename T>
__global__ void __launch_bounds__(Tr::kTransposeThreads)
    dwconv_from_planar_kernel(const uint16_t* __restrict__ yt, uint16_t* __restrict__ y, DwConvParams p,
                              int64_t y_pitch) {
  extern __shared__ uint16_t tile[];
  const int64_t h = blockIdx.x, n = blockIdx.y, c0 = int64_t(blockIdx.z) * Tr::kTransposeChannels;
  const int w_img = int(p.out_w);
  const int cb = int(min(int64_t(Tr::kTransposeChannels), p.channels - c0)), vecs = cb / 8;
  const int tp = int(wgmma_fwd_transpose_pitch(w_img));
  const int chunks = (w_img + 7) / 8;  // y_pitch = 64 WT >= 8 chunks: every chunk read lies in the row
  for (int i = threadIdx.x; i < cb * chunks; i += blockDim.x) {
    const int cc = i / chunks, q = i % chunks;
    const uint4 v = *reinterpret_cast<const uint4*>(yt + (((c0 + cc) * p.batch + n) * p.out_h + h) * y_pitch + 8 * q);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) tile[cc * tp + 8 * q + e] = uint16_t(words[e / 2] >> (16 * (e % 2)));
  }
  __syncthreads();
  uint16_t* yd = y + ((n * p.out_h + h) * p.out_w) * p.channels + c0;
  for (int i = threadIdx.x; i < vecs * w_img; i += blockDim.x) {
    const int w = i / vecs, j = i % vecs;
    uint32_t words[4];
#pragma unroll
    for (int e2 = 0; e2 < 4; ++e2) {
      words[e2] = uint32_t(tile[(8 * j + 2 * e2) * tp + w]) | (uint32_t(tile[(8 * j + 2 * e2 + 1) * tp + w]) << 16);
    }
    *reinterpret_cast<uint4*>(yd + int64_t(w) * p.channels + 8 * j) = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

// ---- the wgmma kernel ---------------------------------------------------------------------
// Sizes as int: can_implement_fwd_wgmma keeps every planar index within 64 bits and
// these within 32.
struct ConvArgs {
  const uint16_t* xt;  // [C][N][H][x_pitch]
  const uint16_t* w;   // [KH][KW][C]
  uint16_t* yt;        // [C][N][H][y_pitch]
  const void* bias;    // (C,) of T, or null
  Activation activation;
  int n_img, h, c, kh, kw, ph;
  int strips;   // 64-column strips a row
  int x_pitch;  // elements
  int y_pitch;
  bool flip;    // read the filter rotated by 180 degrees (the input gradient)
};

// The kernel's arguments for a problem, its grid, the workspace (xt, then yt at
// g.yt_offset) and the epilogue.
inline ConvArgs make_conv_args(const DwConvParams& p, const WgmmaFwdGrid& g, void* workspace, const void* w,
                               const FwdEpilogue& epilogue) {
  ConvArgs a;
  a.xt = static_cast<const uint16_t*>(workspace);
  a.w = static_cast<const uint16_t*>(w);
  a.yt = reinterpret_cast<uint16_t*>(static_cast<unsigned char*>(workspace) + g.yt_offset);
  a.bias = epilogue.bias;
  a.activation = epilogue.activation;
  a.n_img = int(p.batch);
  a.h = int(p.out_h);
  a.c = int(p.channels);
  a.kh = int(p.kernel_h);
  a.kw = int(p.kernel_w);
  a.ph = int(p.pad_top);
  a.strips = int(g.strips);
  a.x_pitch = int(g.x_pitch);
  a.y_pitch = int(g.y_pitch);
  a.flip = p.flip_filter;
  return a;
}

template <typename T, int NQ, int RN>
__global__ void __launch_bounds__(Tr::kThreads, 1) dwconv_fwd_wgmma_kernel(const ConvArgs p) {
  constexpr int N = 8 * RN;      // wgmma N
  constexpr int G = Tr::kRows / RN;  // row groups a tile
  constexpr int P = RN - 1;      // zero brick rows on each side
  constexpr int XW = int(wgmma_fwd_stage_w(NQ));
  constexpr int kChunks = XW / 8;  // 16-byte chunks a unit row
  constexpr int kR = Tr::kRows, kD = Tr::kStagedAhead, kSlots = Tr::kSlots, kBrick = Tr::kBrickBytes;
  static_assert(Tr::kUnits * kChunks <= Tr::kThreads, "one cp.async a thread a row");
  extern __shared__ __align__(1024) unsigned char smem[];
  const int rows_b = p.kh + 2 * P;
  const int q_stride = rows_b * kBrick;
  unsigned char* bsm = smem;
  unsigned char* ring = smem + NQ * q_stride + RN * kBrick;
  constexpr int kSlotBytes = Tr::kUnits * XW * 2;
  uint16_t* taps = reinterpret_cast<uint16_t*>(ring + kSlots * kSlotBytes);

  const int c = blockIdx.y;
  const int unit0 = blockIdx.x * Tr::kUnits;
  const int units_all = p.n_img * p.strips;
  const int tid = threadIdx.x;

  // ---- B bricks of channel c ----
  {
    const int taps_all = p.kh * p.kw;
    for (int i = tid; i < taps_all; i += Tr::kThreads) {
      taps[i] = p.w[int64_t(p.flip ? taps_all - 1 - i : i) * p.c + c];
    }
    __syncthreads();
    // A 32-bit word (two k) at a time: brick (q, r), core matrix kb, row t, k pair kk.
    uint32_t* bw = reinterpret_cast<uint32_t*>(bsm);
    const int words = (NQ * rows_b + RN) * (kBrick / 4);  // the last RN bricks: zeros
    for (int i = tid; i < words; i += Tr::kThreads) {
      const int within = i % (kBrick / 4);  // kb * 32 + t * 4 + kk / 2
      const int brick = i / (kBrick / 4);   // q * rows_b + r
      const int q = brick / rows_b, r = brick % rows_b;
      const int kb = within / 32, t = (within / 4) % 8, kk = 2 * (within % 4);
      const int khr = q < NQ ? p.kh - 1 + P - r : -1;
      uint32_t v = 0;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int tap = 16 * q + 8 * kb + kk + e - t;
        if (khr >= 0 && khr < p.kh && tap >= 0 && tap < p.kw) v |= uint32_t(taps[khr * p.kw + tap]) << (16 * e);
      }
      bw[i] = v;
    }
    fence_proxy_async();
  }

  // ---- staging: tile t's row i is input row t R - ph + i; only rows inside the image
  // are steps (rows outside are zeros and would add nothing) ----
  const int steps = kR + p.kh - 1;
  const int tiles = (p.h + kR - 1) / kR;
  auto i_begin = [&](int t) { return max(0, p.ph - t * kR); };
  auto i_end = [&](int t) { return min(steps, p.h + p.ph - t * kR); };
  const uint32_t ring_base = shared_address(ring);
  const int su = tid / kChunks, sch = tid % kChunks;
  const bool stager = tid < Tr::kUnits * kChunks;
  const int sunit = unit0 + su;
  const bool sunit_ok = stager && sunit < units_all;
  const int sn = sunit_ok ? sunit / p.strips : 0, swt = sunit_ok ? sunit % p.strips : 0;
  const uint16_t* src_plane =
      p.xt + (int64_t(c) * p.n_img + sn) * p.h * int64_t(p.x_pitch) + swt * Tr::kUnitW + 8 * sch;
  const uint32_t dst_off = uint32_t(su * XW * 2 + 16 * sch);
  // Staging cursor: tile pt, row pi, sp rows staged so far (row sp goes to slot sp % kSlots).
  int pt = 0, pi = i_begin(0), sp = 0;
  auto stage_next = [&]() {
    if (pt < tiles) {
      if (stager) {
        const int ih = pt * kR - p.ph + pi;  // inside the image
        cp_async16(ring_base + uint32_t(sp % kSlots) * kSlotBytes + dst_off,
                   sunit_ok ? src_plane + int64_t(ih) * p.x_pitch : src_plane, sunit_ok ? 16u : 0u);
      }
      ++sp;
      if (++pi == i_end(pt)) {
        ++pt;
        if (pt < tiles) pi = i_begin(pt);
      }
    }
    commit();  // one group a step, empty or not
  };
#pragma unroll 1
  for (int s = 0; s < kD; ++s) stage_next();

  // ldmatrix: lane gives row lane % 8 of matrix lane / 8; matrix j holds A rows
  // 8 (j % 2) + [0, 8) (unit 2 warp + j % 2, segments 0-7) and columns 8 (j / 2) + [0, 8).
  const int warp = tid / 32, lane = tid % 32;
  const int mat = lane / 8;
  const uint32_t a_off = uint32_t((2 * warp + (mat & 1)) * XW * 2 + (8 * (lane % 8) + 8 * (mat >> 1)) * 2);
  const uint64_t desc0 = brick_descriptor(shared_address(bsm));
  const float bias = p.bias ? to_float(static_cast<const T*>(p.bias)[c]) : 0.0f;

  float acc[G][N / 2];

  // Output: lane (gq = lane / 4, tig) of warp w holds, for group g, block j, element e:
  // A row m = 16 w + gq + 8 (e / 2) -> unit 2w + e / 2, segment gq; column 8j + 2tig + e % 2
  // -> output row t R + g RN + j, output column 64 strip + 8 gq + 2 tig + e % 2.
  auto store_tile = [&](int t) {
    const int gq = lane / 4, tig = lane % 4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int unit = unit0 + 2 * warp + half;
      if (unit >= units_all) continue;
      const int n = unit / p.strips, wt = unit % p.strips;
      uint16_t* dst = p.yt + (int64_t(c) * p.n_img + n) * p.h * int64_t(p.y_pitch) + wt * Tr::kUnitW + 8 * gq + 2 * tig;
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int j = 0; j < RN; ++j) {
          const int oh = t * kR + g * RN + j;
          if (oh < p.h) {
            const float v0 = apply_activation(p.activation, acc[g][4 * j + 2 * half] + bias);
            const float v1 = apply_activation(p.activation, acc[g][4 * j + 2 * half + 1] + bias);
            *reinterpret_cast<uint32_t*>(dst + int64_t(oh) * p.y_pitch) = pack2<T>(v0, v1);
          }
        }
    }
  };

  // One loop turn a tile row: wait for its staged row, stage the row kD ahead, A by
  // ldmatrix into one of two register buffers, the wgmmas of every row group and
  // k-step, then wait for the previous row's wgmmas only: the ldmatrix and staging of
  // row s + 1 overlap the wgmmas of row s. Rows go in pairs so that each buffer is
  // named at compile time (a run-time index would put A in local memory).
  const uint32_t zero_off = uint32_t(NQ * q_stride);
  uint32_t a[2][NQ][4];
  int s = 0;
  auto row = [&](auto buffer, int i) {
    constexpr int b = decltype(buffer)::value;
    wait_staged<kD - 1>();  // this thread's chunk of row s has landed
    __syncthreads();        // everyone's has; everyone is done reading row s - 1's slot
    stage_next();           // row s + kD, into the slot of row s - 1
    const uint32_t slot = ring_base + uint32_t(s % kSlots) * kSlotBytes + a_off;
#pragma unroll
    for (int q = 0; q < NQ; ++q) ldmatrix_x4(a[b][q], slot + 32u * q);
    wgmma_fence();
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int j0 = i - g * RN;  // filter row of the group's first output row
      const bool active = j0 >= 0 && j0 <= p.kh + RN - 2;
      const int r0 = p.kh - 1 + P - j0;  // brick row of block 0 (in range when active)
#pragma unroll
      for (int q = 0; q < NQ; ++q) {
        const uint32_t off = active ? uint32_t(q * q_stride + r0 * kBrick) : zero_off;
        Wgmma<N, T>::run(acc[g], a[b][q], desc0 + uint64_t(off >> 4));
      }
    }
    wgmma_commit();
    wgmma_wait<1>();  // the previous row's wgmmas, the last readers of a[1 - b], are done
    ++s;
  };
#pragma unroll 1
  for (int t = 0; t < tiles; ++t) {
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int e = 0; e < N / 2; ++e) acc[g][e] = 0.0f;
    const int ie = i_end(t);
    int i = i_begin(t);
#pragma unroll 1
    for (; i + 1 < ie; i += 2) {
      row(std::integral_constant<int, 0>{}, i);
      row(std::integral_constant<int, 1>{}, i + 1);
    }
    if (i < ie) row(std::integral_constant<int, 0>{}, i);
    wgmma_wait_all();  // the accumulators are read next
    store_tile(t);
  }
  wgmma_wait_all();
  wait_staged<0>();
}

}  // namespace wgmma_fwd
}  // namespace flashdwc
