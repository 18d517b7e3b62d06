// fp32 filter gradient at stride 1 as forward convolutions, one per image, on the
// forward GEMV kernel's inner loop (fwd/gemv.cuh):
//   dw[kh, kw, c] = sum over n of  sum over (oh, ow) of x[n, kh + oh - pad_top, kw + ow - pad_left, c] * dy[n, oh, ow, c],
// and the inner sum is the forward correlation of image x[n] with dy[n] as a Ho x Wo
// filter, evaluated at the KH x KW outputs (kh, kw), with the problem's own padding.
// bwd_filter_as_fwd gives those forward params; the kernel reads dy[n] where the
// forward reads the filter, sums the images of its chunk in registers, and merges
// the chunk into the fp32 workspace (atomicAdd, or a plain store into slice z in
// deterministic mode, summed in order by dwconv_bwd_filter_finalize_kernel).
//
// Why: the split kernel (bwd_filter/split.cuh) holds a tile of the small filter
// gradient and streams the long N x Ho x Wo axis through it, two loads per TM FMAs
// at best; it reached 15-26 TFLOP/s at k >= 21 on the H200. Here each thread keeps
// kTM x 4 outputs and every 16-byte x load feeds 32 FMAs against dy taps shared by
// the block from shared memory, the loop that runs the fp32 forward at 49 TFLOP/s.
// Where it runs (plan/bwd_filter.cc): fp32, stride 1, KW >= 27, where it takes
// 0.45-0.60 of the split kernel's time at k = 51 and 0.53-0.82 at k = 27; at
// k <= 21 it was slower.
#pragma once

#include <cstdint>

#include "bwd_filter/gemv_grid.h"
#include "common/cp_async.cuh"
#include "common/cuda_types.cuh"
#include "fwd/gemv.cuh"
#include "common/params.h"

namespace flashdwc {

// The forward problem whose output at (kh, kw) is one image's share of dw[kh, kw]:
// input x (N images), filter dy (Ho x Wo taps per image), output KH x KW.
inline DwConvParams bwd_filter_as_fwd(const DwConvParams& p) {
  DwConvParams q = p;
  q.kernel_h = p.out_h;
  q.kernel_w = p.out_w;
  q.out_h = p.kernel_h;
  q.out_w = p.kernel_w;
  q.flip_filter = false;
  return q;
}

// Blocks of 32 * grid.warps threads; 8 warps at 2 blocks an SM keep the forward's
// 128 registers.
template <typename T, int kTM, bool kVec>
__global__ void __launch_bounds__(32 * kBwdFilterGemvMaxWarps, 2)
dwconv_bwd_filter_gemv_kernel(const T* __restrict__ x, const T* __restrict__ dy, float* __restrict__ ws,
                              DwConvParams q, BwdFilterGemvGrid grid) {
  using Tr = GemvFwdTraits<T>;
  constexpr int kWidth = Tr::kChannelsPerThread;
  constexpr int kRowsPerWarp = Tr::kRowsPerWarp;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* w_smem = reinterpret_cast<T*>(smem_raw);  // (2, rows_per_stage, Wo, kBlockChannels): double-buffered

  // One image's KH x KW outputs: the 4 lane groups of a warp are 4 rows at the same
  // columns (as in the forward kernel), the warps successive segments of them.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = lane % Tr::kChannelGroups;
  const int64_t row_group = int64_t(blockIdx.x) / grid.segment_blocks;
  const int64_t row_segment = int64_t(blockIdx.x) % grid.segment_blocks * grid.warps + warp;
  const int64_t kh = row_group * kRowsPerWarp + lane / Tr::kChannelGroups;  // the output row
  const int64_t channel_base = int64_t(blockIdx.y) * Tr::kBlockChannels;
  const int64_t c0 = channel_base + group * kWidth;
  const int64_t channels_left = q.channels - c0;
  const int channels_valid = channels_left <= 0 ? 0 : channels_left >= kWidth ? kWidth : int(channels_left);
  const bool active = kh < q.out_h && row_segment < grid.segments_per_row && channels_valid > 0;

  const int64_t kw0 = row_segment * kTM;
  const int64_t base_iw = kw0 - q.pad_left;
  const int taps_w = int(q.kernel_w);  // Wo
  const bool interior =
      __all_sync(0xffffffffu, !active || (base_iw >= 0 && base_iw + taps_w - 1 + (kTM - 1) < q.in_w));
  const int64_t first_useful = -base_iw - (kTM - 1);
  const int64_t past_useful = q.in_w - base_iw;
  int tap_begin = first_useful <= 0 ? 0 : first_useful >= taps_w ? taps_w : int(first_useful);
  int tap_end = past_useful <= tap_begin ? tap_begin : past_useful >= taps_w ? taps_w : int(past_useful);
  if (!active) tap_begin = taps_w, tap_end = 0;
  tap_begin = int(__reduce_min_sync(0xffffffffu, unsigned(tap_begin)));
  tap_end = max(tap_begin, int(__reduce_max_sync(0xffffffffu, unsigned(tap_end))));
  const ChannelAffine<kWidth> no_prologue{};

  float acc[kTM][kWidth];
#pragma unroll
  for (int t = 0; t < kTM; ++t)
#pragma unroll
    for (int i = 0; i < kWidth; ++i) acc[t][i] = 0.0f;

  // One flat sequence of stages over the chunk's images, so that the first dy rows
  // of the next image are copied while the last ones of this image are summed.
  const int64_t n_begin = int64_t(blockIdx.z) * grid.images_per_chunk;
  const int64_t n_end = min(n_begin + grid.images_per_chunk, q.batch);
  const int64_t stages = n_end > n_begin ? (n_end - n_begin) * grid.stages_per_image : 0;
  const int64_t row_elems = q.kernel_w * Tr::kBlockChannels;
  const int64_t rows_per_stage = grid.rows_per_stage;
  const int64_t image_taps = q.kernel_h * q.kernel_w * q.channels;  // dy elements per image
  auto stage_smem = [&](int64_t stage) { return w_smem + (stage & 1) * rows_per_stage * row_elems; };
  auto stage_image = [&](int64_t stage) { return n_begin + stage / grid.stages_per_image; };
  auto stage_first = [&](int64_t stage) { return stage % grid.stages_per_image * rows_per_stage; };
  auto stage_last = [&](int64_t stage) { return min(stage_first(stage) + rows_per_stage, q.kernel_h); };
  auto load_stage = [&](int64_t stage) {
    load_filter_rows<T, kVec>(stage_smem(stage), dy + stage_image(stage) * image_taps, q, stage_first(stage),
                              stage_last(stage), channel_base, 32 * grid.warps);
  };
  if constexpr (kVec) {
    if (stages > 0) load_stage(0);
    cp_async_commit();
  }
  for (int64_t stage = 0; stage < stages; ++stage) {
    if constexpr (kVec) {
      if (stage + 1 < stages) {
        load_stage(stage + 1);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
    } else {
      load_stage(stage);
    }
    __syncthreads();
    const int64_t n = stage_image(stage);
    for (int64_t oh = stage_first(stage); oh < stage_last(stage); ++oh) {
      const int64_t ih = kh - q.pad_top + oh;
      if (!active || ih < 0 || ih >= q.in_h) continue;
      const T* x_row = x + (n * q.in_h + ih) * q.in_w * q.channels + c0;
      const T* w_row = stage_smem(stage) + (oh - stage_first(stage)) * row_elems + group * kWidth;
      if (interior) {
        gemv_row<T, kTM, 1, kVec, false, false>(acc, x_row, w_row, base_iw, q.in_w, q.channels, channels_valid, 0,
                                                taps_w, no_prologue);
      } else {
        gemv_row<T, kTM, 1, kVec, true, false, true>(acc, x_row, w_row, base_iw, q.in_w, q.channels,
                                                     channels_valid, tap_begin, tap_end, no_prologue);
      }
    }
    // The next stage's copies overwrite the buffer this one read.
    __syncthreads();
  }

  if (!active) return;
  const int64_t slice = grid.atomic ? 0 : int64_t(blockIdx.z) * q.out_h * q.out_w * q.channels;
#pragma unroll
  for (int t = 0; t < kTM; ++t) {
    if (kw0 + t >= q.out_w) break;
    float* dst = ws + slice + (kh * q.out_w + kw0 + t) * q.channels + c0;
#pragma unroll
    for (int i = 0; i < kWidth; ++i) {
      if (i >= channels_valid) break;
      if (grid.atomic) {
        atomicAdd(dst + i, acc[t][i]);
      } else {
        dst[i] = acc[t][i];
      }
    }
  }
}

}  // namespace flashdwc
