// Launchers for the CUDA forward and backward-data kernels: kernel choice, grid
// computation, launch. The filter gradient's are in bwd_filter_cuda.cu.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "dwconv/direct_kernels.cuh"
#include "dwconv/dwconv_cuda.h"
#include "dwconv/fwd_gemv.cuh"
#include "dwconv/fwd_mma.h"
#include "dwconv/fwd_regfilter.h"
#include "dwconv/fwd_rowstream.cuh"
#include "dwconv/launch_helpers.cuh"

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
// Widest filter row the GEMV kernel keeps in shared memory: 2 rows x 512 taps x
// 128 bytes of channels = 128 KiB, within the 227 KiB an sm_90 block may use.
constexpr int64_t kGemvMaxKernelW = 512;
// Filter bytes per pipeline stage: whole filters up to 11x11 (fp32) in one stage,
// four 31-wide rows per stage, while two stages stay small next to L1.
constexpr int64_t kGemvStageBytes = 16 * 1024;

// The direct kernels' grid: x over an image row's (column, channel group) slots, y
// over the N * rows image rows (a grid-stride loop past 65535). False where a row has
// more slots than the kernels' 32-bit column index holds.
inline bool direct_grid_2d(int64_t rows, int64_t slots, dim3& grid) {
  if (slots > INT32_MAX - 65535LL * kDirectThreadsPerBlock) return false;
  grid = dim3(unsigned(std::clamp<int64_t>((slots + kDirectThreadsPerBlock - 1) / kDirectThreadsPerBlock, 1, 65535)),
              unsigned(std::clamp<int64_t>(rows, 1, 65535)));
  return true;
}

template <typename T>
bool direct_vectorized(const DwConvParams& p, const void* a, const void* b, const void* c) {
  return p.channels % Vec16<T>::kWidth == 0 && aligned(a, 16) && aligned(b, 16) && aligned(c, 16);
}

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

int64_t gcd64(int64_t a, int64_t b) { return b == 0 ? a : gcd64(b, a % b); }

template <typename T>
cudaError_t launch_bwd_data_direct(const DwConvParams& p, const T* dy, const T* w, T* dx, cudaStream_t stream) {
  const bool vec = direct_vectorized<T>(p, dy, w, dx);
  const int64_t width = vec ? Vec16<T>::kWidth : 1;
  dim3 grid;
  if (!direct_grid_2d(p.batch * p.in_h, p.in_w * (p.channels / width), grid)) return cudaErrorInvalidValue;
  const int step_h = int(p.stride_h / gcd64(p.stride_h, p.dilation_h));
  const int step_w = int(p.stride_w / gcd64(p.stride_w, p.dilation_w));
  if (vec) {
    dwconv_bwd_data_direct_kernel<T, Vec16<T>::kWidth>
        <<<grid, kDirectThreadsPerBlock, 0, stream>>>(dy, w, dx, p, step_h, step_w);
  } else {
    dwconv_bwd_data_direct_kernel<T, 1><<<grid, kDirectThreadsPerBlock, 0, stream>>>(dy, w, dx, p, step_h, step_w);
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
// idle, two images a strip at 4 (fp16/bf16 over at least two images; fwd_rowstream.cuh)
// or one image at 2 (fp32, whose 32-wide maps ran as fast as its 64-wide ones per
// output at k = 3 on the H200: 0.355 and 0.356 ms, eaaae13; and single images).
// Blocks: enough for several waves on an H200 (132 SMs, up to 4 resident blocks of 128
// threads each), in runs of at least 16 output rows so that the KH - 1 halo rows a
// block reads twice stay a small fraction. Filters at most 3 rows tall (2 halo rows)
// take twice the blocks: at k = 3, 4096 took 0.97-0.98 of 2048's time on 128^4 (16
// rows a block against 32) and 0.99-1.005 on the other paper maps, in all three
// dtypes; at k = 5 and 7 (4 and 6 halo rows) it read 0.97-1.02, above 1.01 at two
// points, so deeper filters keep 2048 (docs/design-notes.md, twenty-seventh session).
constexpr int64_t kRowStreamTargetBlocks = 2048;
constexpr int64_t kRowStreamTargetBlocksShallow = 4096;
constexpr int64_t kRowStreamShallowKernelH = 3;
constexpr int64_t kRowStreamMinRows = 16;
constexpr int64_t kRowStreamMaxKernelH = 9;
constexpr int64_t kRowStreamNarrowWidth = 32;

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
  const bool narrow = p.out_w <= kRowStreamNarrowWidth;
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

// Whether the row-stream kernel takes the problem, from its geometry alone (the
// launch also needs 16-byte aligned buffers).
bool rowstream_supports(const DwConvParams& p, bool half_precision) {
  const int64_t width = half_precision ? 8 : 4;
  // One grid dimension holds every block: at most out_h rows an image and strip.
  const int64_t channel_blocks = (p.channels + 8 * width - 1) / (8 * width);
  const int64_t most_blocks = p.batch * p.out_h * ((p.out_w + kRowStreamNarrowWidth - 1) / kRowStreamNarrowWidth);
  return p.stride_h == 1 && p.stride_w == 1 && p.dilation_h == 1 && p.dilation_w == 1 &&
         (p.kernel_w == 3 || p.kernel_w == 5 || p.kernel_w == 7) && p.kernel_h <= kRowStreamMaxKernelH &&
         p.channels % width == 0 && most_blocks <= INT32_MAX / std::max<int64_t>(channel_blocks, 1) &&
         p.in_w * p.channels <= INT32_MAX;  // the kernel's copy offsets within a row
}

}  // namespace

// Narrowest filter the tensor-core kernel takes everywhere; from it, every fp16/bf16
// problem the kernel supports goes there. Kernel-level A/B on the H200 (twenty-fifth
// session, docs/design-notes.md), bf16, tensor cores against the CUDA-core kernels: KW = 7
// took 0.59-0.69 of the time (0.634 against 1.061 ms on 128^4, 0.338 against 0.551 on
// 128x64x64x256, 0.079 against 0.135 on ConvNeXt's 128x28x28x192), and KW = 3
// 1.75-1.91x, so KW = 3 and 4 stay on CUDA cores. KW = 6 has no row-stream kernel; on
// tensor cores it takes 0.34-0.55 of the tiled GEMV kernel's time (twenty-eighth
// session).
constexpr int64_t kMmaMinKernelW = 6;
// KW = 5 goes to tensor cores only where the row-stream kernel is the slower one
// (twenty-eighth session, kernel A/B, tensor cores over row-stream): outputs wider
// than 64 columns (one image a strip; 128^4: 0.90 in bf16, 0.98 in fp16), or C not a
// multiple of the row-stream kernel's 64-channel blocks (128x56x56x96: 0.71). On the
// 64- and 32-wide paper maps, with 2 and 4 images a strip and C = 256 and 1024, tensor
// cores took 1.03-1.16 of the time (on a build where they were themselves 0-5% slower).
constexpr int64_t kMmaConditionalKernelW = 5;
// Widest output the tensor-core kernel packs two images a strip into (fwd_mma.cuh).
constexpr int64_t kMmaTwoImageMaxWidth = 64;

// Square 3x3 and 5x5 fp16/bf16 filters with whole 64-channel blocks go to the
// register-filter kernel at every width, where it was timed faster than the kernels
// that take those problems otherwise (kernel A/B through this dispatcher on the H200,
// thirty-third session, docs/design-notes.md 33-1 to 33-3). Against the row-stream
// kernel, 5x5: 0.830 and 0.871 of the time in bf16 on the 64- and 32-wide paper maps
// (C = 256, 1024), 0.846 and 0.919 in fp16, 0.793 on 128x56x56x128; 3x3: 0.95-0.99 on
// the three paper maps in both dtypes, 0.833 on 128x56x56x128; under 32 columns, where
// the row-stream kernel has few blocks, 0.38-0.87 (ConvNeXt's 28-, 14- and 7-wide maps
// at C = 192-768, 128x16x16x512, 128x24x24x256). Against the tensor-core kernel over
// 64 columns, 5x5: 0.946 (bf16) and 0.881 (fp16) on 128^4, 0.909 on 128x112x112x128.
// C = 96 is not whole blocks (an earlier build took 1.31 of the time there).

namespace {
bool regfilter_takes(const DwConvParams& p, bool half_precision) {
  return half_precision && fwd_regfilter_supports(p);
}

bool mma_takes_kernel_width(const DwConvParams& p) {
  if (p.kernel_w >= kMmaMinKernelW) return true;
  constexpr int64_t kRowStreamChannels = RowStreamTraits<__half, 4>::kBlockChannels;
  return p.kernel_w == kMmaConditionalKernelW &&
         (p.out_w > kMmaTwoImageMaxWidth || p.channels % kRowStreamChannels != 0);
}

// The kernel a problem gets where the register-filter kernel cannot run it: also the
// fallback for the problems it takes when the call has a prologue or buffers it
// cannot move.
FwdKernel select_fwd_kernel_besides_regfilter(const DwConvParams& p, bool half_precision) {
  if (half_precision && mma_takes_kernel_width(p) && fwd_mma_supports(p)) {
    return FwdKernel::kMma;
  }
  if (rowstream_supports(p, half_precision)) return FwdKernel::kRowStream;
  // Grid limits of the GEMV kernel, checked for the most blocks either storage type
  // launches: fp32's 32-channel blocks along y, the half types' smaller TM along x.
  using Tr = GemvFwdTraits<float>;
  const int64_t tm = p.stride_w == 1 ? GemvConfig<__half, 1>::kTM : GemvConfig<__half, 2>::kTM;
  const int64_t segments = (p.batch * p.out_h + Tr::kRowsPerWarp - 1) / Tr::kRowsPerWarp * Tr::kRowsPerWarp *
                           ((p.out_w + tm - 1) / tm);
  const bool gemv = (p.stride_w == 1 || p.stride_w == 2) && p.dilation_w == 1 &&
                    p.kernel_w <= kGemvMaxKernelW &&
                    (p.channels + Tr::kBlockChannels - 1) / Tr::kBlockChannels <= 65535 &&
                    (segments + Tr::kSegments - 1) / Tr::kSegments <= INT32_MAX;
  return gemv ? FwdKernel::kGemv : FwdKernel::kDirect;
}
}  // namespace

FwdKernel select_fwd_kernel(const DwConvParams& p, bool half_precision) {
  return regfilter_takes(p, half_precision) ? FwdKernel::kRegFilter
                                            : select_fwd_kernel_besides_regfilter(p, half_precision);
}

template <typename T>
cudaError_t run_dwconv_fwd(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                           const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  FwdKernel kernel = select_fwd_kernel(p, !std::is_same_v<T, float>);
  if constexpr (!std::is_same_v<T, float>) {
    if (kernel == FwdKernel::kRegFilter) {
      if (!prologue.active() && fwd_regfilter_aligned(x, w, y, epilogue.bias)) {
        return launch_fwd_regfilter(p, x, w, y, stream, epilogue);
      }
      kernel = select_fwd_kernel_besides_regfilter(p, true);
    }
    if (kernel == FwdKernel::kMma) return launch_fwd_mma(p, x, w, y, stream, epilogue, prologue);
  }
  if (kernel == FwdKernel::kDirect) return launch_fwd_direct(p, x, w, y, stream, epilogue, prologue);
  if (kernel == FwdKernel::kRowStream) {
    if (aligned(x, 16) && aligned(w, 16) && aligned(y, 16)) {
      return launch_fwd_rowstream_any(p, x, w, y, stream, epilogue, prologue);
    }
  }
  return p.stride_w == 1 ? launch_fwd_gemv_stride<T, 1>(p, x, w, y, stream, epilogue, prologue)
                         : launch_fwd_gemv_stride<T, 2>(p, x, w, y, stream, epilogue, prologue);
}

template <typename T>
cudaError_t run_dwconv_bwd_data(const DwConvParams& p, const T* dy, const T* w, T* dx,
                                cudaStream_t stream) {
  if (p.stride_h == 1 && p.stride_w == 1) {
    return run_dwconv_fwd(stride1_bwd_data_as_fwd(p), dy, w, dx, stream);
  }
  return launch_bwd_data_direct(p, dy, w, dx, stream);
}

#define FLASHDWC_INSTANTIATE_CUDA(T)                                                               \
  template cudaError_t run_dwconv_fwd<T>(const DwConvParams&, const T*, const T*, T*, cudaStream_t,   \
                                         const FwdEpilogue&, const FwdPrologue&);                     \
  template cudaError_t run_dwconv_bwd_data<T>(const DwConvParams&, const T*, const T*, T*,            \
                                              cudaStream_t);

FLASHDWC_INSTANTIATE_CUDA(float)
FLASHDWC_INSTANTIATE_CUDA(__half)
FLASHDWC_INSTANTIATE_CUDA(__nv_bfloat16)

}  // namespace flashdwc
