// Stride-2 input gradient for square 3x3 and 5x5 filters (dilation 1, any padding,
// any H and W), as a polyphase walk: a thread owns the 2x2 dx block (r, s) of one
// channel group (phase rows and columns, bwd_data/phase_index.h), keeps all K*K of its
// channels' filter taps in registers as fp32, and walks down a run of r with the last
// J + 1 dy rows' J + 1 columns (J = (K - 1) / 2) in a register ring. Each step issues
// the next row's J + 1 loads first, then computes and stores four dx positions from
// the ring.
//
// Why it should win over the gather kernel (bwd_data/direct.cuh): the bytes that must
// move are dy read once and dx written once (MobileNetV2's 64x112x112x96 3x3 layer in
// bf16: 38.5 MB + 154 MB = 193 MB, 58 us at 3.3 TB/s). The gather kernel reaches
// them at 0.30 ms (H100): a thread per dx position loads its 1, 2 or 4 taps one at a
// time, each with its filter vector, through runtime loops, so it has little in
// flight. Here the filter is loaded once a thread, a thread's dy loads of a step are
// independent of its FMAs and stores and go out one step ahead, and each dy vector
// feeds (up to) the four dx positions of its 2x2 block with no reload: per 2x2 block
// J + 1 vector loads and 4 stores, against the gather kernel's 9 dy and 9 filter loads
// at 3x3 (a pair for each of the block's 4 + 2 + 2 + 1 taps).
#pragma once

#include <cstdint>

#include "bwd_data/phase_index.h"
#include "common/raw_vec.cuh"
#include "common/params.h"
#include "common/static_for.cuh"

namespace flashdwc {

// One block of threads over an image's slots (channel group fastest, then the phase
// column, then the run of phase rows), blockIdx.y over images. The launcher
// (bwd_data/launch.cu) guarantees: stride 2, dilation 1, K x K filter not flipped, C a
// multiple of kWidth, buffers aligned to kWidth elements, g.slots and every row and
// column index within int.
template <typename T, int kK, int kWidth, int kMinBlocks>
__global__ void __launch_bounds__(kBwdDataPhaseThreads, kMinBlocks)
dwconv_bwd_data_phase_kernel(const T* __restrict__ dy, const T* __restrict__ w, T* __restrict__ dx,
                             DwConvParams p, BwdDataPhaseGrid g) {
  using V = RawVec<T, kWidth>;
  using Raw = typename V::Raw;
  constexpr int kJ = (kK - 1) / 2;
  constexpr int kRing = kJ + 1;  // dy rows (and columns) a 2x2 block reads
  const int slot = int(blockIdx.x) * kBwdDataPhaseThreads + int(threadIdx.x);
  if (slot >= int(g.slots)) return;
  const int groups = int(g.groups), s_count = int(g.s_count);
  const int rest = slot / groups;
  const int group = slot - rest * groups;
  const int run = rest / s_count;
  const int s = int(g.s_first) + (rest - run * s_count);
  const int r_begin = int(g.r_first) + run * int(g.rows_per_thread);
  const int r_end = min(r_begin + int(g.rows_per_thread), int(g.r_first + g.r_count));
  const int64_t C = p.channels;
  const int64_t c = int64_t(group) * kWidth;
  const int out_h = int(p.out_h), out_w = int(p.out_w), in_h = int(p.in_h), in_w = int(p.in_w);
  const int pad_top = int(p.pad_top), pad_left = int(p.pad_left);

  // The filter, tap (kh, kw) of this thread's channels.
  float wf[kK][kK][kWidth];
#pragma unroll
  for (int kh = 0; kh < kK; ++kh) {
#pragma unroll
    for (int kw = 0; kw < kK; ++kw) V::unpack(V::load(w + (kh * kK + kw) * C + c), wf[kh][kw]);
  }
  // dy column s - j (ring column j) and whether it is inside dy; dx columns 2s + f -
  // pad_left (phase f) and whether they are inside dx.
  bool col_in[kRing];
#pragma unroll
  for (int j = 0; j < kRing; ++j) col_in[j] = s - j >= 0 && s - j < out_w;
  const int iw0 = 2 * s - pad_left;
  const bool store_col[2] = {iw0 >= 0 && iw0 < in_w, iw0 + 1 >= 0 && iw0 + 1 < in_w};

  for (int64_t n = blockIdx.y; n < p.batch; n += gridDim.y) {
    const T* dy_image = dy + n * p.out_h * p.out_w * C + c;
    T* dx_image = dx + n * p.in_h * p.in_w * C + c;
    // dy row r's J + 1 columns, zero outside dy.
    auto load_row = [&](int r, Raw (&raw)[kRing]) {
      const bool row_in = r >= 0 && r < out_h;
      const T* row = dy_image + (int64_t(r) * out_w + s) * C;
#pragma unroll
      for (int j = 0; j < kRing; ++j) raw[j] = row_in && col_in[j] ? V::load(row - j * C) : Raw{};
    };
    // ring[i % kRing]: dy row r_begin - J + i, i counting the rows walked, as loaded
    // (unpacked to fp32 where used).
    Raw ring[kRing][kRing];
#pragma unroll
    for (int i = 0; i < kJ; ++i) load_row(r_begin - kJ + i, ring[i]);
    Raw next[kRing];
    load_row(r_begin, next);
    for (int r0 = r_begin; r0 < r_end; r0 += kRing) {
      // Unrolled by the ring's length, so that slot indices are constants: row r0 + u
      // is walked row J + (r0 - r_begin) + u, in slot (J + u) % kRing.
      static_for<0, kRing>([&](auto u) {
        constexpr int kNow = (kJ + decltype(u)::value) % kRing;
        const int r = r0 + decltype(u)::value;
        if (r < r_end) {
#pragma unroll
          for (int j = 0; j < kRing; ++j) ring[kNow][j] = next[j];
          if (r + 1 < r_end) load_row(r + 1, next);
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int ih = 2 * r + e - pad_top;
            if (ih < 0 || ih >= in_h) continue;
            T* dx_row = dx_image + (int64_t(ih) * in_w + iw0) * C;
#pragma unroll
            for (int f = 0; f < 2; ++f) {
              if (!store_col[f]) continue;
              float acc[kWidth] = {};
              // Taps kh = e + 2a (dy row r - a), kw = f + 2b (dy column s - b).
#pragma unroll
              for (int a = 0; e + 2 * a < kK; ++a) {
#pragma unroll
                for (int b = 0; f + 2 * b < kK; ++b) {
                  float d[kWidth];
                  V::unpack(ring[(kNow - a + kRing) % kRing][b], d);
                  const float(&wv)[kWidth] = wf[e + 2 * a][f + 2 * b];
#pragma unroll
                  for (int i = 0; i < kWidth; ++i) acc[i] = fmaf(d[i], wv[i], acc[i]);
                }
              }
              V::store(dx_row + f * C, acc);
            }
          }
        }
      });
    }
  }
}

}  // namespace flashdwc
