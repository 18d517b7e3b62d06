// The forward pass on the GPU: the row-stream, GEMV, stride-2 and direct kernels'
// template instances, and run_dwconv_fwd, which launches the plan of
// plan_fwd_launch (plan/fwd_launch.h) (the register-filter, tensor-core and Hopper
// kernels through fwd/regfilter.cu, fwd/mma.cu and fwd/wgmma.cu).
#include "fwd/launch.h"

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
#ifdef FLASHDWC_WITH_WGMMA
#include "fwd/wgmma.h"
#endif
#include "plan/fwd.h"

namespace flashdwc {
namespace {

// The register cap of the GEMV kernel, through the minimum resident blocks per SM.
// fp32 stride 1 at the paper's TM = 8: capped at 128 registers (4 blocks of 128
// threads per SM; uncapped, ptxas takes 143-168 and only 3 fit). Stride 2 needs a
// window of 2*TM - 1 columns: TM = 8 took 202-255 registers and spilled kilobytes when
// capped, TM = 4 fits in 128 (plan/fwd_launch.h, fwd_gemv_tm). fp16/bf16 threads hold
// 8 channels, twice fp32's 4, so half the TM keeps the accumulators and the window the
// same size.
template <typename T, int kStride>
struct GemvConfig {
  static constexpr int kTM = fwd_gemv_tm(int64_t(sizeof(T)), kStride);
  static constexpr int kMinBlocksPerSM = 4;
};

template <typename T>
cudaError_t launch_fwd_direct(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                              cudaStream_t stream, const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  if (plan.status == LaunchStatus::kInvalid) return cudaErrorInvalidValue;
  const dim3 grid = to_dim3(plan.launch.grid), block = to_dim3(plan.launch.block);
  if (plan.vec) {
    dwconv_fwd_direct_kernel<T, Vec16<T>::kWidth><<<grid, block, 0, stream>>>(x, w, y, p, epilogue, prologue);
  } else {
    dwconv_fwd_direct_kernel<T, 1><<<grid, block, 0, stream>>>(x, w, y, p, epilogue, prologue);
  }
  return cudaGetLastError();
}

template <typename T, int kStride, bool kVec, bool kPrologue>
cudaError_t launch_fwd_gemv(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                            cudaStream_t stream, const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  constexpr int kTM = GemvConfig<T, kStride>::kTM;
  // The prologue's scale and shift take 2 x 4 (fp32) or 2 x 8 (half) more registers
  // per thread: under the 128-register cap they spilled 64-752 bytes (ptxas), so
  // those kernels run 3 blocks per SM (up to 168 registers) instead.
  constexpr int kMinBlocks = kPrologue ? 3 : GemvConfig<T, kStride>::kMinBlocksPerSM;
  auto kernel = dwconv_fwd_gemv_kernel<T, kTM, kStride, kVec, kPrologue, kMinBlocks>;
  const size_t smem = size_t(plan.launch.smem_bytes);
  if (cudaError_t err = allow_dynamic_smem(kernel, smem); err != cudaSuccess) return err;
  kernel<<<to_dim3(plan.launch.grid), to_dim3(plan.launch.block), smem, stream>>>(x, w, y, p, plan.gemv, epilogue,
                                                                                   prologue);
  return cudaGetLastError();
}

template <typename T, int kStride>
cudaError_t launch_fwd_gemv_stride(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                                   cudaStream_t stream, const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  // The prologue is a template flag: the kernels without it compile as before.
  if (prologue.active()) {
    return plan.vec ? launch_fwd_gemv<T, kStride, true, true>(p, plan, x, w, y, stream, epilogue, prologue)
                    : launch_fwd_gemv<T, kStride, false, true>(p, plan, x, w, y, stream, epilogue, prologue);
  }
  return plan.vec ? launch_fwd_gemv<T, kStride, true, false>(p, plan, x, w, y, stream, epilogue, prologue)
                  : launch_fwd_gemv<T, kStride, false, false>(p, plan, x, w, y, stream, epilogue, prologue);
}

template <typename T, int kTM, int kKW, bool kPrologue, int kImages>
cudaError_t launch_fwd_rowstream(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                                 cudaStream_t stream, const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  auto kernel = dwconv_fwd_rowstream_kernel<T, kTM, kKW, kPrologue, kImages>;
  const size_t smem = size_t(plan.launch.smem_bytes);
  if (cudaError_t err = allow_dynamic_smem(kernel, smem); err != cudaSuccess) return err;
  kernel<<<to_dim3(plan.launch.grid), to_dim3(plan.launch.block), smem, stream>>>(x, w, y, p, plan.rowstream,
                                                                                   epilogue, prologue);
  return cudaGetLastError();
}

template <typename T, int kTM, bool kPrologue, int kImages = 1>
cudaError_t launch_fwd_rowstream_width(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w,
                                       T* y, cudaStream_t stream, const FwdEpilogue& epilogue,
                                       const FwdPrologue& prologue) {
  switch (p.kernel_w) {
    case 3: return launch_fwd_rowstream<T, kTM, 3, kPrologue, kImages>(p, plan, x, w, y, stream, epilogue, prologue);
    case 5: return launch_fwd_rowstream<T, kTM, 5, kPrologue, kImages>(p, plan, x, w, y, stream, epilogue, prologue);
    default: return launch_fwd_rowstream<T, kTM, 7, kPrologue, kImages>(p, plan, x, w, y, stream, epilogue, prologue);
  }
}

// The prologue is a template flag: the kernels without it compile as before.
template <typename T>
cudaError_t launch_fwd_rowstream_any(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                                     cudaStream_t stream, const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  if constexpr (!std::is_same_v<T, float>) {
    if (plan.images == 2) {
      return prologue.active()
                 ? launch_fwd_rowstream_width<T, 4, true, 2>(p, plan, x, w, y, stream, epilogue, prologue)
                 : launch_fwd_rowstream_width<T, 4, false, 2>(p, plan, x, w, y, stream, epilogue, prologue);
    }
  }
  if (prologue.active()) {
    return plan.tm == 2 ? launch_fwd_rowstream_width<T, 2, true>(p, plan, x, w, y, stream, epilogue, prologue)
                        : launch_fwd_rowstream_width<T, 4, true>(p, plan, x, w, y, stream, epilogue, prologue);
  }
  return plan.tm == 2 ? launch_fwd_rowstream_width<T, 2, false>(p, plan, x, w, y, stream, epilogue, prologue)
                      : launch_fwd_rowstream_width<T, 4, false>(p, plan, x, w, y, stream, epilogue, prologue);
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
cudaError_t launch_fwd_stride2(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                               cudaStream_t stream, const FwdEpilogue& epilogue) {
  using Cfg = Stride2Config<T, kK, kEpilogue>;
  if (plan.status == LaunchStatus::kNothing) return cudaSuccess;
  dwconv_fwd_stride2_kernel<T, kK, Cfg::kWidth, kEpilogue, Cfg::kMinBlocks>
      <<<to_dim3(plan.launch.grid), to_dim3(plan.launch.block), 0, stream>>>(x, w, y, p, plan.stride2, epilogue);
  return cudaGetLastError();
}

// The epilogue is a template flag: the kernels without it carry none of its code.
template <typename T, int kK>
cudaError_t launch_fwd_stride2_any(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                                   cudaStream_t stream, const FwdEpilogue& epilogue) {
  return epilogue.active() ? launch_fwd_stride2<T, kK, true>(p, plan, x, w, y, stream, epilogue)
                           : launch_fwd_stride2<T, kK, false>(p, plan, x, w, y, stream, epilogue);
}

// The sizes the plan reads (plan/fwd.h, plan/fwd_launch.h, fwd/rowstream_grid.h).
static_assert(GemvConfig<__half, 1>::kTM == kFwdGemvHalfTmStride1 && GemvConfig<__half, 2>::kTM == kFwdGemvHalfTmStride2);
static_assert(GemvConfig<float, 1>::kTM == 8 && GemvConfig<float, 2>::kTM == 4);
static_assert(GemvFwdTraits<float>::kBlockChannels == kFwdGemvF32BlockChannels &&
              GemvFwdTraits<float>::kSegments == kFwdGemvSegments &&
              GemvFwdTraits<float>::kRowsPerWarp == kFwdGemvRowsPerWarp);
static_assert(GemvFwdTraits<__half>::kSegments == kFwdGemvSegments &&
              GemvFwdTraits<__half>::kRowsPerWarp == kFwdGemvRowsPerWarp);
static_assert(GemvFwdTraits<float>::kThreads == kFwdGemvThreads && GemvFwdTraits<__half>::kThreads == kFwdGemvThreads);
static_assert(GemvFwdTraits<float>::kChannelsPerThread == fwd_gemv_channels_per_thread(4) &&
              GemvFwdTraits<__half>::kChannelsPerThread == fwd_gemv_channels_per_thread(2) &&
              GemvFwdTraits<__half>::kBlockChannels == fwd_gemv_block_channels(2) &&
              GemvFwdTraits<float>::kBlockChannels == fwd_gemv_block_channels(4));
static_assert(RowStreamTraits<__half, 4>::kBlockChannels == kFwdRowStreamHalfBlockChannels);
template <typename T, int kTM>
constexpr bool rowstream_sizes_match() {
  using Tr = RowStreamTraits<T, kTM>;
  return Tr::kThreads == kFwdRowStreamThreads && Tr::kBlockChannels == fwd_rowstream_block_channels(sizeof(T)) &&
         Tr::kStripWidth == fwd_rowstream_strip_width(kTM) && Tr::kPrefetchRows == kFwdRowStreamPrefetchRows;
}
static_assert(rowstream_sizes_match<float, 2>() && rowstream_sizes_match<float, 4>() &&
              rowstream_sizes_match<__half, 2>() && rowstream_sizes_match<__half, 4>() &&
              rowstream_sizes_match<__nv_bfloat16, 2>() && rowstream_sizes_match<__nv_bfloat16, 4>());

}  // namespace

template <typename T>
cudaError_t launch_fwd(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                       cudaStream_t stream, const FwdEpilogue& epilogue, const FwdPrologue& prologue,
                       void* workspace) {
  if constexpr (!std::is_same_v<T, float>) {
#ifdef FLASHDWC_WITH_WGMMA
    if (plan.kernel == FwdKernel::kWgmma) return launch_fwd_wgmma(p, plan, x, w, y, workspace, stream, epilogue);
#endif
    if (plan.kernel == FwdKernel::kMma) return launch_fwd_mma(p, plan, x, w, y, stream, epilogue, prologue);
  }
  if (plan.kernel == FwdKernel::kRegFilter) return launch_fwd_regfilter(p, plan, x, w, y, stream, epilogue);
  switch (plan.kernel) {
    case FwdKernel::kDirect: return launch_fwd_direct(p, plan, x, w, y, stream, epilogue, prologue);
    case FwdKernel::kStride2:
      return p.kernel_w == 3 ? launch_fwd_stride2_any<T, 3>(p, plan, x, w, y, stream, epilogue)
                             : launch_fwd_stride2_any<T, 5>(p, plan, x, w, y, stream, epilogue);
    case FwdKernel::kRowStream: return launch_fwd_rowstream_any(p, plan, x, w, y, stream, epilogue, prologue);
    case FwdKernel::kGemv:
      return p.stride_w == 1 ? launch_fwd_gemv_stride<T, 1>(p, plan, x, w, y, stream, epilogue, prologue)
                             : launch_fwd_gemv_stride<T, 2>(p, plan, x, w, y, stream, epilogue, prologue);
    // The tensor-core kernels take fp16/bf16 only; the Hopper kernel is not in a build
    // without sm_90 (the plan never picks it there).
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t run_dwconv_fwd(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                           const FwdEpilogue& epilogue, const FwdPrologue& prologue, void* workspace,
                           int64_t workspace_bytes) {
  FwdCall call;
  call.workspace_bytes = workspace != nullptr && address_alignment(workspace) >= 16 ? workspace_bytes : 0;
  call.half_precision = !std::is_same_v<T, float>;
  call.epilogue = epilogue.active();
  call.prologue = prologue.active();
  call.x_align = address_alignment(x);
  call.w_align = address_alignment(w);
  call.y_align = address_alignment(y);
  call.bias_align = address_alignment(epilogue.bias);
  return launch_fwd(p, plan_fwd_launch(p, call, device_limits()), x, w, y, stream, epilogue, prologue, workspace);
}

#define FLASHDWC_INSTANTIATE_CUDA(T)                                                                          \
  template cudaError_t launch_fwd<T>(const DwConvParams&, const FwdLaunchPlan&, const T*, const T*, T*,        \
                                     cudaStream_t, const FwdEpilogue&, const FwdPrologue&, void*);             \
  template cudaError_t run_dwconv_fwd<T>(const DwConvParams&, const T*, const T*, T*, cudaStream_t,            \
                                         const FwdEpilogue&, const FwdPrologue&, void*, int64_t);

FLASHDWC_INSTANTIATE_CUDA(float)
FLASHDWC_INSTANTIATE_CUDA(__half)
FLASHDWC_INSTANTIATE_CUDA(__nv_bfloat16)

}  // namespace flashdwc
