// Forward kernel for small filters at stride 1 (KW of 3, 5 or 7; KH up to 9): the
// GEMV kernel's per-thread dataflow, fed from a ring of input rows in shared memory
// instead of from global memory.
//
// Why: at k = 3 the GEMV kernel moves 1.54 TB/s in bf16 (37% of the copy rate,
// docs/design-notes.md, v4). Each of its threads reads KH input rows straight from
// global memory for every output row, so every input row is fetched KH times and
// a thread waits on one row's loads before the next. Here a block walks down a
// strip of the image: each input row is fetched once, by cp.async, two rows ahead
// of its use, with the zero padding written by the copies (no bounds checks in the
// arithmetic), and the KH rows an output row needs are read from shared memory.
//
// Block: 128 threads = 8 channel groups (16 bytes of channels each: 32 fp32 or 64
// fp16/bf16 channels per block) x 16 column threads of kTM outputs: a strip of
// 16 * kTM output columns. The block computes output rows [row_begin, row_end) of
// one image and strip; the input rows travel through a ring of KH + kPrefetchRows
// slots.
//
// Two images a strip (kImages = 2, fp16/bf16 on maps at most 32 wide): the strip's
// 64 columns are the same 32 columns of images n and n + 1, column threads 0-7 on
// the first and 8-15 on the second, each image's columns a sub-row of the ring with
// its own KW - 1 halo. Why: with one image a strip, a map at most 32 wide ran 2
// outputs a thread (kTM = 2), so every input column read from shared memory served
// (2 + KW - 1) / 2 outputs instead of (4 + KW - 1) / 4, and each filter tap 2 instead
// of 4; bf16 128x32x32x1024 took 0.189, 0.402 and 0.745 ms at k = 3, 5 and 7
// against 0.167, 0.316 and 0.562 ms for the same outputs on 128x64x64x256 at kTM = 4
// (H200, docs/design-notes.md).
//
// Prologue (epilogue.h, kPrologue): each thread applies it to the chunks it copied,
// once a row has landed and before the barrier that publishes the row, so every
// input element is transformed once per block; padding chunks stay zero. Applied
// as the KH filter rows read the ring instead, it would run about KH * (kTM + KW - 1)
// / kTM times per element (the GEMV kernel's way, 2.4-4x slower than the unfused
// sequence at k = 3 on the H200, docs/design-notes.md).
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/cp_async.cuh"
#include "common/cuda_types.cuh"
#include "common/ring_slot.cuh"
#include "common/static_for.cuh"
#include "common/epilogue.h"
#include "common/params.h"
#include "fwd/rowstream_grid.h"

namespace flashdwc {

template <typename T, int kTM_>
struct RowStreamTraits {
  static constexpr int kThreads = 128;
  static constexpr int kTM = kTM_;
  static constexpr int kChannelsPerThread = Vec16<T>::kWidth;                 // 4 fp32, 8 half
  static constexpr int kChannelGroups = 8;                                   // 128 bytes of channels
  static constexpr int kBlockChannels = kChannelGroups * kChannelsPerThread;  // 32 or 64
  static constexpr int kColumnThreads = kThreads / kChannelGroups;            // 16
  static constexpr int kStripWidth = kColumnThreads * kTM;                   // output columns per block
  // Input rows in flight ahead of the rows being read. 4 measured no faster on the
  // H200 (bf16 128x32x32x1024 k = 3: 0.271 ms at 2, 0.284 at 4; fp16 k = 5 lost 13%):
  // the narrow strips are limited by integer instructions, not bytes in flight.
  static constexpr int kPrefetchRows = 2;
};

// The filter slice in shared memory is fp32 for every storage type, laid out
// (tap, quarter, channel group, 4): each thread's 16-byte channel group is split
// into 4-channel quarters so that the 8 groups' reads of one quarter are 128
// contiguous bytes (one wavefront, no bank conflict). fp32 has one quarter.
template <typename T, int kTM>
__device__ __forceinline__ void load_filter_tap_shared(const float* w_row, float (&v)[Vec16<T>::kWidth]) {
  using Tr = RowStreamTraits<T, kTM>;
#pragma unroll
  for (int q = 0; q < Vec16<T>::kWidth / 4; ++q) {
    const float4 f = *reinterpret_cast<const float4*>(w_row + q * Tr::kChannelGroups * 4);
    v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
  }
}

// 4 resident blocks per SM cap the registers at 128: fp16/bf16 with kTM = 4 took
// 168 (ptxas, uncapped at 3 blocks) and fit in 124-127 capped, without spill.
template <typename T, int kTM, int kKW, bool kPrologue, int kImages>
__global__ void __launch_bounds__(RowStreamTraits<T, kTM>::kThreads, 4)
dwconv_fwd_rowstream_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                            DwConvParams p, RowStreamGrid grid, FwdEpilogue epilogue, FwdPrologue prologue) {
  using Tr = RowStreamTraits<T, kTM>;
  constexpr int kWidth = Tr::kChannelsPerThread;
  static_assert(kImages == 1 || kImages == 2, "one or two images a strip");
  constexpr int kSubWidth = Tr::kStripWidth / kImages;    // output columns of one image
  constexpr int kSubColumns = kSubWidth + kKW - 1;         // its input columns
  constexpr int kImageThreads = Tr::kColumnThreads / kImages;
  constexpr int kRowColumns = kImages * kSubColumns;
  constexpr int kRowElems = kRowColumns * Tr::kBlockChannels;
  constexpr int kRowChunks = kRowColumns * Tr::kChannelGroups;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* ring = reinterpret_cast<T*>(smem_raw);  // (ring_rows, kRowColumns, kBlockChannels)
  // (KH, KW, quarter, channel group, 4) in fp32. Half types convert their filter once
  // here instead of on every use: per output row and filter row the bf16 kTM = 2 loop
  // spent 24 of its 159 SASS instructions unpacking the 3 taps' bf16 pairs, for 48
  // FFMA, and Nsight Compute found the kernel ALU-bound (65%) on 32-wide strips.
  float* w_smem = reinterpret_cast<float*>(ring + int64_t(grid.ring_rows) * kRowElems);

  const int kernel_h = int(p.kernel_h);
  // Channel blocks vary fastest, so that the blocks resident together read all C
  // channels of the same pixels rather than one 128-byte slice of many: 0.93-1.00
  // of the time at k = 3 on the H200 (docs/design-notes.md).
  const int64_t spatial = int64_t(blockIdx.x) / grid.channel_blocks;
  const int64_t strip = spatial % grid.strips;
  const int64_t row_block = (spatial / grid.strips) % grid.row_blocks;
  const int64_t n = spatial / (grid.strips * grid.row_blocks) * kImages;  // the strip's first image
  const int64_t channel_base = (int64_t(blockIdx.x) % grid.channel_blocks) * Tr::kBlockChannels;
  const int64_t ow_begin = strip * kSubWidth;
  const int64_t row_begin = row_block * grid.rows_per_block;
  const int64_t row_end = min(row_begin + grid.rows_per_block, p.out_h);
  const int rows = int(row_end - row_begin);
  // Input rows the block reads: ih_begin + j for j in [0, rows + KH - 1).
  const int64_t ih_begin = row_begin - p.pad_top;
  const int64_t iw_begin = ow_begin - p.pad_left;
  const int input_rows = rows + kernel_h - 1;

  // A thread copies chunks q = threadIdx.x + kThreads * i of every input row: always
  // the same channel group, at columns kThreads / kChannelGroups apart. Their offsets
  // within a row are computed once, -1 where the chunk lies outside the image or past
  // C (in_w * C fits 32 bits: can_implement_fwd_rowstream). Computed per copy, the indexing
  // took about 37 SASS instructions per 16-byte copy (bf16, kTM 4, KW 3: 142 per 4
  // copies), about 18% of a row's instructions at k = 3, where an Nsight Compute
  // profile found the narrow strips bound by integer instructions.
  // With two images a strip, bit i of second_image says that copy i is of image n + 1
  // (invalid past the batch).
  constexpr int kCopies = (kRowChunks + Tr::kThreads - 1) / Tr::kThreads;
  int copy_offset[kCopies];
  unsigned second_image = 0;
#pragma unroll
  for (int i = 0; i < kCopies; ++i) {
    const int q = threadIdx.x + i * Tr::kThreads;
    const int col = q / Tr::kChannelGroups;
    // Constant for one image, so that the copy loop's image offset folds away (it cost
    // 3.5% at bf16 128x64x64x256 k = 5 on the H200 when computed).
    const int image = kImages == 1 ? 0 : col / kSubColumns;
    const int64_t iw = iw_begin + (kImages == 1 ? col : col % kSubColumns);
    const int64_t c = channel_base + (q % Tr::kChannelGroups) * kWidth;
    const bool valid = q < kRowChunks && iw >= 0 && iw < p.in_w && c < p.channels && n + image < p.batch;
    copy_offset[i] = valid ? int(iw * p.channels + c) : -1;
    second_image |= unsigned(image) << i;
  }

  // Input row j into ring slot `slot`: 16-byte copies, zero-filled outside the image
  // and past C, so that the arithmetic below needs no predicates.
  auto load_row = [&](int j, int slot) {
    if (j >= input_rows) return;
    const int64_t ih = ih_begin + j;
    const bool row_inside = ih >= 0 && ih < p.in_h;
    T* slot_row = ring + int64_t(slot) * kRowElems + threadIdx.x * kWidth;
    const int64_t image_elems = p.in_h * p.in_w * p.channels;
    const T* x_row = x + (n * p.in_h + (row_inside ? ih : 0)) * p.in_w * p.channels;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      // Only the last round can run past the row's chunks.
      if (i == kCopies - 1 && threadIdx.x + i * Tr::kThreads >= kRowChunks) break;
      const bool valid = row_inside && copy_offset[i] >= 0;
      const T* src = x_row + ((second_image >> i) & 1u ? image_elems : 0) + copy_offset[i];
      cp_async<16>(slot_row + i * Tr::kThreads * kWidth, valid ? src : x, valid);
    }
  };

  // The filter slice of the block's channels, with the first rows: fp32 by cp.async,
  // half types through registers (the first __syncthreads below publishes both).
  const int filter_chunks = kernel_h * kKW * Tr::kChannelGroups;
  for (int q = threadIdx.x; q < filter_chunks; q += Tr::kThreads) {
    const int tap = q / Tr::kChannelGroups, grp = q % Tr::kChannelGroups;
    const int64_t c = channel_base + grp * kWidth;
    const bool valid = c < p.channels;
    const T* src = valid ? w + filter_tap(p, tap / kKW, tap % kKW) * p.channels + c : w;
    float* dst = w_smem + tap * Tr::kBlockChannels + grp * 4;
    if constexpr (std::is_same_v<T, float>) {
      cp_async<16>(dst, src, valid);
    } else {
      float v[kWidth] = {};
      if (valid) Vec16<T>::load(src, v);
#pragma unroll
      for (int quarter = 0; quarter < kWidth / 4; ++quarter) {
        *reinterpret_cast<float4*>(dst + quarter * Tr::kChannelGroups * 4) =
            make_float4(v[4 * quarter], v[4 * quarter + 1], v[4 * quarter + 2], v[4 * quarter + 3]);
      }
    }
  }
  // Rows 0 .. ring_rows - 2, one commit group each (empty groups past the last row
  // keep the count that cp_async_wait relies on).
  for (int j = 0; j < grid.ring_rows - 1; ++j) {
    load_row(j, j);
    cp_async_commit();
  }

  const int group = threadIdx.x % Tr::kChannelGroups;
  const int column_thread = threadIdx.x / Tr::kChannelGroups;
  const int64_t c0 = channel_base + group * kWidth;
  const bool channels_valid = c0 < p.channels;

  // The prologue on this thread's chunks of input row j (slot `slot`), once they have
  // landed: its copies are all of channel group `group` (kThreads is a multiple of
  // kChannelGroups), and a chunk is all inside C or all past it (C is a multiple of
  // kWidth: can_implement_fwd_rowstream).
  static_assert(Tr::kThreads % Tr::kChannelGroups == 0, "a thread copies one channel group");
  ChannelAffine<kWidth> affine;
  // The bound says what channels_valid says for the whole group (C is a multiple of
  // kWidth), so that the compiler needs no compare per channel.
  if constexpr (kPrologue) affine.load(prologue, c0, channels_valid ? c0 + kWidth : c0);
  auto transform_row = [&](int j, int slot) {
    if (j >= input_rows) return;
    const int64_t ih = ih_begin + j;
    if (ih < 0 || ih >= p.in_h) return;
    T* slot_row = ring + int64_t(slot) * kRowElems + threadIdx.x * kWidth;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      if (i == kCopies - 1 && threadIdx.x + i * Tr::kThreads >= kRowChunks) break;
      if (copy_offset[i] < 0) continue;
      T* chunk = slot_row + i * Tr::kThreads * kWidth;
      float v[kWidth];
      Vec16<T>::load_shared(chunk, v);
#pragma unroll
      for (int e = 0; e < kWidth; ++e) {
        v[e] = FwdPrologue::transform_compact(prologue.activation, v[e], affine.scale[e], affine.shift[e]);
      }
      Vec16<T>::store(chunk, v);
    }
  };
  const int image = kImages == 1 ? 0 : column_thread / kImageThreads;
  const int ring_col = image * kSubColumns + (column_thread % kImageThreads) * kTM;  // first input column
  const int64_t ow0 = ow_begin + (column_thread % kImageThreads) * kTM;
  const bool image_valid = n + image < p.batch;
  const float* w_thread = w_smem + group * 4;

  float bias[kWidth] = {};
  if (epilogue.bias != nullptr && channels_valid) {
#pragma unroll
    for (int i = 0; i < kWidth; ++i) bias[i] = to_float(static_cast<const T*>(epilogue.bias)[c0 + i]);
  }

  // Ring slot of output row o's first input row, (o % ring_rows) kept by increments:
  // the modulo per filter row was an integer division sequence inside the loop.
  int first_slot = 0;
  for (int o = 0; o < rows; ++o, first_slot = first_slot + 1 == grid.ring_rows ? 0 : first_slot + 1) {
    // Committed so far: rows up to o + ring_rows - 2; rows up to o + KH - 1 must
    // have landed, so kPrefetchRows - 1 groups may still be in flight.
    cp_async_wait<Tr::kPrefetchRows - 1>();
    if constexpr (kPrologue) {
      // The rows that landed since the last iteration: 0 .. KH - 1 first, then row
      // o + KH - 1, KH - 1 slots after first_slot. A thread sees its own copies
      // after the wait; no thread reads these slots until the barrier below.
      if (o == 0) {
        for (int j = 0; j < kernel_h; ++j) transform_row(j, j);
      } else {
        transform_row(o + kernel_h - 1, wrap_slot(first_slot + kernel_h - 1, grid.ring_rows));
      }
    }
    // Makes those rows visible to every thread, and ends every thread's reads of
    // row o - 1, whose slot the next copy reuses.
    __syncthreads();
    // Row o + ring_rows - 1 goes where row o - 1 was: the slot before first_slot.
    load_row(o + grid.ring_rows - 1, first_slot == 0 ? grid.ring_rows - 1 : first_slot - 1);
    cp_async_commit();

    float acc[kTM][kWidth];
#pragma unroll
    for (int t = 0; t < kTM; ++t)
#pragma unroll
      for (int i = 0; i < kWidth; ++i) acc[t][i] = 0.0f;
    int slot = first_slot;
    for (int kh = 0; kh < kernel_h; ++kh, slot = slot + 1 == grid.ring_rows ? 0 : slot + 1) {
      const T* row = ring + int64_t(slot) * kRowElems + ring_col * Tr::kBlockChannels + group * kWidth;
      const float* w_row = w_thread + kh * kKW * Tr::kBlockChannels;
      // Width-first window as in gemv_row: at tap kw, slot (kw + j) % kTM holds
      // column kw + j; output t reads column kw + t.
      float win[kTM][kWidth];
#pragma unroll
      for (int j = 0; j < kTM - 1; ++j) Vec16<T>::load_shared(row + j * Tr::kBlockChannels, win[j]);
#pragma unroll
      for (int kw = 0; kw < kKW; ++kw) {
        Vec16<T>::load_shared(row + (kw + kTM - 1) * Tr::kBlockChannels, win[(kw + kTM - 1) % kTM]);
        float wv[kWidth];
        load_filter_tap_shared<T, kTM>(w_row + kw * Tr::kBlockChannels, wv);
#pragma unroll
        for (int t = 0; t < kTM; ++t)
#pragma unroll
          for (int i = 0; i < kWidth; ++i) acc[t][i] = fmaf(win[(kw + t) % kTM][i], wv[i], acc[t][i]);
      }
    }

    if (!channels_valid || !image_valid) continue;
    if (epilogue.active()) {
#pragma unroll
      for (int t = 0; t < kTM; ++t)
#pragma unroll
        for (int i = 0; i < kWidth; ++i) acc[t][i] = apply_activation(epilogue.activation, acc[t][i] + bias[i]);
    }
    T* y_row = y + (((n + image) * p.out_h + row_begin + o) * p.out_w + ow0) * p.channels + c0;
#pragma unroll
    for (int t = 0; t < kTM; ++t) {
      if (ow0 + t < p.out_w) Vec16<T>::store_global(y_row + t * p.channels, acc[t]);
    }
  }
  // No copy may be left in flight when the block exits.
  cp_async_wait<0>();
}

}  // namespace flashdwc
