// The input gradient on the GPU: the polyphase and gather kernels' grids, and
// run_dwconv_bwd_data, which runs the plan of plan_bwd_data (plan/bwd_data.h).
#include "bwd_data/launch.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "bwd_data/direct.cuh"
#include "bwd_data/phase.cuh"
#include "common/direct_conv.cuh"
#include "common/launch.cuh"
#include "fwd/launch.h"
#include "plan/bwd_data.h"

namespace flashdwc {
namespace {

template <typename T>
cudaError_t launch_bwd_data_direct(const DwConvParams& p, const T* dy, const T* w, T* dx, cudaStream_t stream) {
  const bool vec = direct_vectorized<T>(p, dy, w, dx);
  const int64_t width = vec ? Vec16<T>::kWidth : 1;
  dim3 grid;
  if (!direct_grid_2d(p.batch * p.in_h, p.in_w * (p.channels / width), grid)) return cudaErrorInvalidValue;
  const int step_h = strided_tap_step(p.stride_h, p.dilation_h);
  const int step_w = strided_tap_step(p.stride_w, p.dilation_w);
  if (vec) {
    dwconv_bwd_data_direct_kernel<T, Vec16<T>::kWidth>
        <<<grid, kDirectThreadsPerBlock, 0, stream>>>(dy, w, dx, p, step_h, step_w);
  } else {
    dwconv_bwd_data_direct_kernel<T, 1><<<grid, kDirectThreadsPerBlock, 0, stream>>>(dy, w, dx, p, step_h, step_w);
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
cudaError_t launch_bwd_data_phase(const DwConvParams& p, const T* dy, const T* w, T* dx, cudaStream_t stream) {
  using Cfg = PhaseConfig<T, kK>;
  const BwdDataPhaseGrid g =
      make_bwd_data_phase_grid(p, Cfg::kWidth, bwd_data_phase_rows_per_thread(p, Cfg::kWidth, device_limits().sms));
  if (p.batch <= 0 || g.slots <= 0) return cudaSuccess;
  const dim3 grid(unsigned((g.slots + kBwdDataPhaseThreads - 1) / kBwdDataPhaseThreads),
                  unsigned(std::min<int64_t>(p.batch, 65535)));
  dwconv_bwd_data_phase_kernel<T, kK, Cfg::kWidth, Cfg::kMinBlocks>
      <<<grid, kBwdDataPhaseThreads, 0, stream>>>(dy, w, dx, p, g);
  return cudaGetLastError();
}

// Whether the buffers are aligned to the kernel's vectors.
template <typename T>
bool phase_aligned(const DwConvParams& p, const T* dy, const T* w, const T* dx) {
  const size_t bytes = size_t(bwd_data_phase_width(p.kernel_w, !std::is_same_v<T, float>)) * sizeof(T);
  return aligned(dy, bytes) && aligned(w, bytes) && aligned(dx, bytes);
}

}  // namespace

template <typename T>
cudaError_t run_dwconv_bwd_data(const DwConvParams& p, const T* dy, const T* w, T* dx,
                                cudaStream_t stream) {
  if (bwd_data_runs_as_forward(p)) {
    return run_dwconv_fwd(stride1_bwd_data_as_fwd(p), dy, w, dx, stream);
  }
  const bool half_precision = !std::is_same_v<T, float>;
  if (can_implement_bwd_data_phase(p, half_precision) && phase_aligned(p, dy, w, dx)) {
    return p.kernel_w == 3 ? launch_bwd_data_phase<T, 3>(p, dy, w, dx, stream)
                           : launch_bwd_data_phase<T, 5>(p, dy, w, dx, stream);
  }
  return launch_bwd_data_direct(p, dy, w, dx, stream);
}

template cudaError_t run_dwconv_bwd_data<float>(const DwConvParams&, const float*, const float*, float*,
                                                cudaStream_t);
template cudaError_t run_dwconv_bwd_data<__half>(const DwConvParams&, const __half*, const __half*, __half*,
                                                 cudaStream_t);
template cudaError_t run_dwconv_bwd_data<__nv_bfloat16>(const DwConvParams&, const __nv_bfloat16*,
                                                        const __nv_bfloat16*, __nv_bfloat16*, cudaStream_t);

}  // namespace flashdwc
