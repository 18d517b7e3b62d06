// The input gradient on the GPU: the polyphase and gather kernels' template
// instances, and run_dwconv_bwd_data, which launches the plan of
// plan_bwd_data_launch (plan/bwd_data_launch.h).
#include "bwd_data/launch.h"

#include <cstdint>
#include <type_traits>

#include "bwd_data/direct.cuh"
#include "bwd_data/phase.cuh"
#include "common/direct_conv.cuh"
#include "common/launch.cuh"
#include "fwd/launch.h"
#include "plan/bwd_data_launch.h"

namespace flashdwc {
namespace {

template <typename T>
cudaError_t launch_bwd_data_direct(const DwConvParams& p, const BwdDataLaunchPlan& plan, const T* dy, const T* w,
                                   T* dx, cudaStream_t stream) {
  if (plan.status == LaunchStatus::kInvalid) return cudaErrorInvalidValue;
  const dim3 grid = to_dim3(plan.launch.grid), block = to_dim3(plan.launch.block);
  if (plan.vec) {
    dwconv_bwd_data_direct_kernel<T, Vec16<T>::kWidth>
        <<<grid, block, 0, stream>>>(dy, w, dx, p, plan.step_h, plan.step_w);
  } else {
    dwconv_bwd_data_direct_kernel<T, 1><<<grid, block, 0, stream>>>(dy, w, dx, p, plan.step_h, plan.step_w);
  }
  return cudaGetLastError();
}

// The polyphase kernel's channels a thread (plan/bwd_data.h, bwd_data_phase_width)
// and register cap through its resident blocks an SM (128 threads each). ptxas
// (nvcc 13.0, sm_90): fp32 3x3 takes 115 registers, so 4 blocks; fp16/bf16 3x3
// (8 channels) spilled 40-44 bytes under 4 blocks' 128 registers and takes 158-159
// under 3 blocks' 168; 5x5 takes 165 (fp16/bf16, 4 channels) and 142 (fp32, 2), 3
// blocks. None spills.
template <typename T, int kK>
struct PhaseConfig {
  static constexpr int kWidth = int(bwd_data_phase_width(kK, !std::is_same_v<T, float>));
  static constexpr int kMinBlocks = kK == 3 && std::is_same_v<T, float> ? 4 : 3;
};

template <typename T, int kK>
cudaError_t launch_bwd_data_phase(const DwConvParams& p, const BwdDataLaunchPlan& plan, const T* dy, const T* w,
                                  T* dx, cudaStream_t stream) {
  using Cfg = PhaseConfig<T, kK>;
  if (plan.status == LaunchStatus::kNothing) return cudaSuccess;
  dwconv_bwd_data_phase_kernel<T, kK, Cfg::kWidth, Cfg::kMinBlocks>
      <<<to_dim3(plan.launch.grid), to_dim3(plan.launch.block), 0, stream>>>(dy, w, dx, p, plan.phase);
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t run_dwconv_bwd_data(const DwConvParams& p, const T* dy, const T* w, T* dx, cudaStream_t stream,
                                void* workspace, int64_t workspace_bytes) {
  BwdDataCall call;
  call.workspace_bytes = workspace != nullptr && address_alignment(workspace) >= 16 ? workspace_bytes : 0;
  call.half_precision = !std::is_same_v<T, float>;
  call.dy_align = address_alignment(dy);
  call.w_align = address_alignment(w);
  call.dx_align = address_alignment(dx);
  const BwdDataLaunchPlan plan = plan_bwd_data_launch(p, call, device_limits());
  switch (plan.kernel) {
    case BwdDataKernel::kForward:
      return launch_fwd(stride1_bwd_data_as_fwd(p), plan.forward, dy, w, dx, stream, {}, {}, workspace);
    case BwdDataKernel::kPhase:
      return p.kernel_w == 3 ? launch_bwd_data_phase<T, 3>(p, plan, dy, w, dx, stream)
                             : launch_bwd_data_phase<T, 5>(p, plan, dy, w, dx, stream);
    default: return launch_bwd_data_direct(p, plan, dy, w, dx, stream);
  }
}

template cudaError_t run_dwconv_bwd_data<float>(const DwConvParams&, const float*, const float*, float*,
                                                cudaStream_t, void*, int64_t);
template cudaError_t run_dwconv_bwd_data<__half>(const DwConvParams&, const __half*, const __half*, __half*,
                                                 cudaStream_t, void*, int64_t);
template cudaError_t run_dwconv_bwd_data<__nv_bfloat16>(const DwConvParams&, const __nv_bfloat16*,
                                                        const __nv_bfloat16*, __nv_bfloat16*, cudaStream_t, void*,
                                                        int64_t);

}  // namespace flashdwc
