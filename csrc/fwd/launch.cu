// The forward pass on the GPU: the row-stream, GEMV and direct kernels' grids and
// template instances, and run_dwconv_fwd, which runs the kernel plan_fwd picks (the
// register-filter and tensor-core ones through fwd/regfilter.cu and fwd/mma.cu).
#include "fwd/launch.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/direct_conv.cuh"
#include "common/launch.cuh"
#include "fwd/direct.cuh"
#include "fwd/gemv.cuh"
#include "fwd/mma.h"
#include "fwd/regfilter.h"
#include "fwd/rowstream.cuh"
#include "fwd/stride2.cuh"
#include "plan/fwd.h"

namespace flashdwc {
namespace {

// Outputs per thread along the width in the GEMV kernel, and the register cap
// (through the minimum resident blocks per SM). fp32 stride 1: the paper's TM = 8,
// capped at 128 registers (4 blocks of 128 threads per SM; uncapped, ptxas takes
// 143-168 and only 3 fit). Stride 2 needs a window of 2*TM - 1 columns: TM = 8
// took 202-255 registers and spilled kilobytes when capped, TM = 4 fits in 128.
// fp16/bf16 threads hold 8 channels, twice fp32's 4, so half the TM keeps the
// accumulators and the window the same size.
template <typename T, int kStride>
struct GemvConfig {
  static constexpr int kTM = (kStride == 1 ? 8 : 4) * 4 / GemvFwdTraits<T>::kChannelsPerThread;
  static constexpr int kMinBlocksPerSM = 4;
};
// Filter bytes per pipeline stage: whole filters up to 11x11 (fp32) in one stage,
// four 31-wide rows per stage, while two stages stay small next to L1.
constexpr int64_t kGemvStageBytes = 16 * 1024;

template <typename T>
cudaError_t launch_fwd_direct(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                              const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  const bool vec = direct_vectorized<T>(p, x, w, y);
  const int64_t width = vec ? Vec16<T>::kWidth : 1;
  dim3 grid;
  if (!direct_grid_2d(p.batch * p.out_h, p.out_w * (p.channels / width), grid)) return cudaErrorInvalidValue;
  if (vec) {
    dwconv_fwd_direct_kernel<T, Vec16<T>::kWidth>
        <<<grid, kDirectThreadsPerBlock, 0, stream>>>(x, w, y, p, epilogue, prologue);
  } else {
    dwconv_fwd_direct_kernel<T, 1><<<grid, kDirectThreadsPerBlock, 0, stream>>>(x, w, y, p, epilogue, prologue);
  }
  return cudaGetLastError();
}

template <typename T, int kStride, bool kVec, bool kPrologue>
cudaError_t launch_fwd_gemv(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                            const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  using Tr = GemvFwdTraits<T>;
  constexpr int kTM = GemvConfig<T, kStride>::kTM;
  GemvFwdGrid grid;
  grid.segments_per_row = (p.out_w + kTM - 1) / kTM;
  grid.rows = p.batch * p.out_h;
  grid.segments = (grid.rows + Tr::kRowsPerWarp - 1) / Tr::kRowsPerWarp * Tr::kRowsPerWarp * grid.segments_per_row;
  const int64_t row_bytes = p.kernel_w * Tr::kBlockChannels * int64_t(sizeof(T));
  grid.rows_per_stage = std::clamp<int64_t>(kGemvStageBytes / row_bytes, 1, p.kernel_h);
  const dim3 blocks(unsigned((grid.segments + Tr::kSegments - 1) / Tr::kSegments),
                    unsigned((p.channels + Tr::kBlockChannels - 1) / Tr::kBlockChannels));
  const size_t smem = 2 * size_t(grid.rows_per_stage * row_bytes);
  // The prologue's scale and shift take 2 x 4 (fp32) or 2 x 8 (half) more registers
  // per thread: under the 128-register cap they spilled 64-752 bytes (ptxas), so
  // those kernels run 3 blocks per SM (up to 168 registers) instead.
  constexpr int kMinBlocks = kPrologue ? 3 : GemvConfig<T, kStride>::kMinBlocksPerSM;
  auto kernel = dwconv_fwd_gemv_kernel<T, kTM, kStride, kVec, kPrologue, kMinBlocks>;
  if (cudaError_t err = allow_dynamic_smem(kernel, size_t(smem)); err != cudaSuccess) return err;
  kernel<<<blocks, Tr::kThreads, smem, stream>>>(x, w, y, p, grid, epilogue, prologue);
  return cudaGetLastError();
}

template <typename T, int kStride>
cudaError_t launch_fwd_gemv_stride(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                                   const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  const bool vec = p.channels % GemvFwdTraits<T>::kChannelsPerThread == 0 && aligned(x, 16) && aligned(w, 16) &&
                   aligned(y, 16);
  // The prologue is a template flag: the kernels without it compile as before.
  if (prologue.active()) {
    return vec ? launch_fwd_gemv<T, kStride, true, true>(p, x, w, y, stream, epilogue, prologue)
               : launch_fwd_gemv<T, kStride, false, true>(p, x, w, y, stream, epilogue, prologue);
  }
  return vec ? launch_fwd_gemv<T, kStride, true, false>(p, x, w, y, stream, epilogue, prologue)
             : launch_fwd_gemv<T, kStride, false, false>(p, x, w, y, stream, epilogue, prologue);
}

// Row-stream kernel sizes. Outputs per thread: 4 (64-column strips), or where the
// output is at most 32 wide, so that narrow images do not leave half of every strip
// idle, two images a strip at 4 (fp16/bf16 over at least two images; fwd/rowstream.cuh)
// or one image at 2 (fp32, whose 32-wide maps ran as fast as its 64-wide ones per
// output at k = 3 on the H200: 0.355 and 0.356 ms; and single images).
// Blocks: enough for several waves on an H200 (132 SMs, up to 4 resident blocks of 128
// threads each), in runs of at least 16 output rows so that the KH - 1 halo rows a
// block reads twice stay a small fraction. Filters at most 3 rows tall (2 halo rows)
// take twice the blocks: at k = 3, 4096 took 0.97-0.98 of 2048's time on 128^4 (16
// rows a block against 32) and 0.99-1.005 on the other paper maps, in all three
// dtypes; at k = 5 and 7 (4 and 6 halo rows) it read 0.97-1.02, above 1.01 at two
// points, so deeper filters keep 2048 (docs/design-notes.md).
constexpr int64_t kRowStreamTargetBlocks = 2048;
constexpr int64_t kRowStreamTargetBlocksShallow = 4096;
constexpr int64_t kRowStreamShallowKernelH = 3;
constexpr int64_t kRowStreamMinRows = 16;

template <typename T, int kTM, int kKW, bool kPrologue, int kImages>
cudaError_t launch_fwd_rowstream(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                                 const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  using Tr = RowStreamTraits<T, kTM>;
  RowStreamGrid grid;
  constexpr int64_t kSubWidth = Tr::kStripWidth / kImages;
  const int64_t image_groups = (p.batch + kImages - 1) / kImages;
  grid.strips = (p.out_w + kSubWidth - 1) / kSubWidth;
  grid.channel_blocks = (p.channels + Tr::kBlockChannels - 1) / Tr::kBlockChannels;
  const int64_t base = std::max<int64_t>(image_groups * grid.strips * grid.channel_blocks, 1);
  const int64_t target =
      p.kernel_h <= kRowStreamShallowKernelH ? kRowStreamTargetBlocksShallow : kRowStreamTargetBlocks;
  const int64_t row_blocks = std::clamp<int64_t>((target + base - 1) / base, 1, p.out_h);
  grid.rows_per_block = std::max((p.out_h + row_blocks - 1) / row_blocks, std::min(p.out_h, kRowStreamMinRows));
  grid.row_blocks = (p.out_h + grid.rows_per_block - 1) / grid.rows_per_block;
  grid.ring_rows = int(p.kernel_h) + Tr::kPrefetchRows;
  const size_t smem = size_t(rowstream_smem_bytes<T, kTM, kImages>(p.kernel_h, kKW));
  auto kernel = dwconv_fwd_rowstream_kernel<T, kTM, kKW, kPrologue, kImages>;
  if (cudaError_t err = allow_dynamic_smem(kernel, size_t(smem)); err != cudaSuccess) return err;
  const unsigned blocks = unsigned(image_groups * grid.strips * grid.row_blocks * grid.channel_blocks);
  kernel<<<blocks, Tr::kThreads, smem, stream>>>(x, w, y, p, grid, epilogue, prologue);
  return cudaGetLastError();
}

template <typename T, int kTM, bool kPrologue, int kImages = 1>
cudaError_t launch_fwd_rowstream_width(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                                       const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  switch (p.kernel_w) {
    case 3: return launch_fwd_rowstream<T, kTM, 3, kPrologue, kImages>(p, x, w, y, stream, epilogue, prologue);
    case 5: return launch_fwd_rowstream<T, kTM, 5, kPrologue, kImages>(p, x, w, y, stream, epilogue, prologue);
    default: return launch_fwd_rowstream<T, kTM, 7, kPrologue, kImages>(p, x, w, y, stream, epilogue, prologue);
  }
}

// The prologue is a template flag: the kernels without it compile as before.
template <typename T>
cudaError_t launch_fwd_rowstream_any(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                                     const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  const bool narrow = p.out_w <= kFwdRowStreamNarrowWidth;
  if constexpr (!std::is_same_v<T, float>) {
    // Two images a strip only where two blocks still fit on an SM: their rings are
    // twice as wide as the one-image kTM = 2 ones (k = 7: 100 KB a block at KH = 7,
    // 2 an SM; 123 KB at KH = 9, which would leave one block of 4 warps).
    const DeviceLimits d = device_limits();
    const int64_t two_image_bytes = rowstream_smem_bytes<T, 4, 2>(p.kernel_h, p.kernel_w);
    if (narrow && p.batch >= 2 && 2 * (two_image_bytes + d.smem_reserved_per_block) <= d.smem_per_sm) {
      return prologue.active() ? launch_fwd_rowstream_width<T, 4, true, 2>(p, x, w, y, stream, epilogue, prologue)
                               : launch_fwd_rowstream_width<T, 4, false, 2>(p, x, w, y, stream, epilogue, prologue);
    }
  }
  if (prologue.active()) {
    return narrow ? launch_fwd_rowstream_width<T, 2, true>(p, x, w, y, stream, epilogue, prologue)
                  : launch_fwd_rowstream_width<T, 4, true>(p, x, w, y, stream, epilogue, prologue);
  }
  return narrow ? launch_fwd_rowstream_width<T, 2, false>(p, x, w, y, stream, epilogue, prologue)
                : launch_fwd_rowstream_width<T, 4, false>(p, x, w, y, stream, epilogue, prologue);
}

// The stride-2 kernel's register cap, through its resident blocks an SM (128 threads
// each). ptxas (nvcc 13.0, sm_90), registers without / with the epilogue: 3x3 at 4
// blocks (128) 128 / 128 in all three types, the epilogue spilling 8 bytes, so it
// takes 3 blocks (136-156 registers there); 5x5 spilled 168-200 bytes at 4 blocks and
// takes 3: 160 / 160 (fp32), 166-168 (fp16/bf16), whose epilogue spilled 36 bytes at
// 3 and runs 2 blocks. None spills.
template <typename T, int kK, bool kEpilogue>
struct Stride2Config {
  static constexpr int kWidth = int(fwd_stride2_width(kK, !std::is_same_v<T, float>));
  static constexpr int kMinBlocks = kK == 3 ? (kEpilogue ? 3 : 4) : (kEpilogue && !std::is_same_v<T, float> ? 2 : 3);
};

template <typename T, int kK, bool kEpilogue>
cudaError_t launch_fwd_stride2(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                               const FwdEpilogue& epilogue) {
  using Cfg = Stride2Config<T, kK, kEpilogue>;
  const FwdStride2Grid g =
      make_fwd_stride2_grid(p, Cfg::kWidth, fwd_stride2_rows_per_thread(p, Cfg::kWidth, device_limits().sms));
  if (p.batch <= 0 || g.slots <= 0) return cudaSuccess;
  const dim3 grid(unsigned((g.slots + kFwdStride2Threads - 1) / kFwdStride2Threads),
                  unsigned(std::min<int64_t>(p.batch, 65535)));
  dwconv_fwd_stride2_kernel<T, kK, Cfg::kWidth, kEpilogue, Cfg::kMinBlocks>
      <<<grid, kFwdStride2Threads, 0, stream>>>(x, w, y, p, g, epilogue);
  return cudaGetLastError();
}

// The epilogue is a template flag: the kernels without it carry none of its code.
template <typename T, int kK>
cudaError_t launch_fwd_stride2_any(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                                   const FwdEpilogue& epilogue) {
  return epilogue.active() ? launch_fwd_stride2<T, kK, true>(p, x, w, y, stream, epilogue)
                           : launch_fwd_stride2<T, kK, false>(p, x, w, y, stream, epilogue);
}

// Whether the buffers (and the bias) are aligned to the stride-2 kernel's vectors.
template <typename T>
bool stride2_aligned(const DwConvParams& p, const T* x, const T* w, const T* y, const void* bias) {
  const size_t bytes = size_t(fwd_stride2_width(p.kernel_w, !std::is_same_v<T, float>)) * sizeof(T);
  return aligned(x, bytes) && aligned(w, bytes) && aligned(y, bytes) && (bias == nullptr || aligned(bias, bytes));
}

// The sizes the plan's checks read (plan/fwd.h).
static_assert(GemvConfig<__half, 1>::kTM == kFwdGemvHalfTmStride1 && GemvConfig<__half, 2>::kTM == kFwdGemvHalfTmStride2);
static_assert(GemvFwdTraits<float>::kBlockChannels == kFwdGemvF32BlockChannels &&
              GemvFwdTraits<float>::kSegments == kFwdGemvSegments &&
              GemvFwdTraits<float>::kRowsPerWarp == kFwdGemvRowsPerWarp);
static_assert(RowStreamTraits<__half, 4>::kBlockChannels == kFwdRowStreamHalfBlockChannels);

}  // namespace

template <typename T>
cudaError_t run_dwconv_fwd(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                           const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  const DeviceLimits device = device_limits();
  FwdKernel kernel = plan_fwd(p, !std::is_same_v<T, float>, device);
  if constexpr (!std::is_same_v<T, float>) {
    if (kernel == FwdKernel::kRegFilter) {
      if (!prologue.active() && fwd_regfilter_aligned(x, w, y, epilogue.bias)) {
        return launch_fwd_regfilter(p, x, w, y, stream, epilogue);
      }
      kernel = plan_fwd_without_regfilter(p, true, device);
    }
    if (kernel == FwdKernel::kMma) return launch_fwd_mma(p, x, w, y, stream, epilogue, prologue);
  }
  if (kernel == FwdKernel::kDirect) return launch_fwd_direct(p, x, w, y, stream, epilogue, prologue);
  // The stride-2 kernel has no prologue; those calls, and unaligned buffers, take the
  // GEMV kernel below (stride_w 2).
  if (kernel == FwdKernel::kStride2 && !prologue.active() && stride2_aligned(p, x, w, y, epilogue.bias)) {
    return p.kernel_w == 3 ? launch_fwd_stride2_any<T, 3>(p, x, w, y, stream, epilogue)
                           : launch_fwd_stride2_any<T, 5>(p, x, w, y, stream, epilogue);
  }
  if (kernel == FwdKernel::kRowStream) {
    if (aligned(x, 16) && aligned(w, 16) && aligned(y, 16)) {
      return launch_fwd_rowstream_any(p, x, w, y, stream, epilogue, prologue);
    }
  }
  return p.stride_w == 1 ? launch_fwd_gemv_stride<T, 1>(p, x, w, y, stream, epilogue, prologue)
                         : launch_fwd_gemv_stride<T, 2>(p, x, w, y, stream, epilogue, prologue);
}

#define FLASHDWC_INSTANTIATE_CUDA(T)                                                               \
  template cudaError_t run_dwconv_fwd<T>(const DwConvParams&, const T*, const T*, T*, cudaStream_t, \
                                         const FwdEpilogue&, const FwdPrologue&);

FLASHDWC_INSTANTIATE_CUDA(float)
FLASHDWC_INSTANTIATE_CUDA(__half)
FLASHDWC_INSTANTIATE_CUDA(__nv_bfloat16)

}  // namespace flashdwc
