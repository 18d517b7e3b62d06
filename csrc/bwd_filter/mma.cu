// Launcher of the tensor-core filter gradient (bwd_filter/mma.cuh): the kernel
// instance for the grid plan_bwd_filter_launch (plan/bwd_filter_launch.h) chose.
#include <cstdint>

#include "bwd_filter/mma.cuh"
#include "bwd_filter/mma_layout.h"
#include "bwd_filter/mma.h"
#include "common/launch.cuh"

namespace flashdwc {
// The kernel instance for the block's tile grid (m_tiles x n_per_group, at most 4),
// with k_tiles a constant for one M tile on maps at most 32 columns wide (k = 9 and
// 13 filters at most 16 tall: ConvMixer's, RepLKNet's 13 x 13 on its last stages).
template <typename T, bool kVec>
auto mma_kernel_for(const MmaBwdFilterGrid& g) {
  if (g.m_tiles == 1 && g.n_per_group <= 2 && g.k_tiles <= 2) {
    if (g.n_per_group == 1) {
      return g.k_tiles == 1 ? dwconv_bwd_filter_mma_kernel<T, kVec, 1, 1, 1>
                            : dwconv_bwd_filter_mma_kernel<T, kVec, 1, 1, 2>;
    }
    return g.k_tiles == 1 ? dwconv_bwd_filter_mma_kernel<T, kVec, 1, 2, 1>
                          : dwconv_bwd_filter_mma_kernel<T, kVec, 1, 2, 2>;
  }
  switch (g.m_tiles * 8 + g.n_per_group) {
    case 8 + 1: return dwconv_bwd_filter_mma_kernel<T, kVec, 1, 1, 0>;
    case 8 + 2: return dwconv_bwd_filter_mma_kernel<T, kVec, 1, 2, 0>;
    case 8 + 3: return dwconv_bwd_filter_mma_kernel<T, kVec, 1, 3, 0>;
    case 8 + 4: return dwconv_bwd_filter_mma_kernel<T, kVec, 1, 4, 0>;
    case 16 + 1: return dwconv_bwd_filter_mma_kernel<T, kVec, 2, 1, 0>;
    case 16 + 2: return dwconv_bwd_filter_mma_kernel<T, kVec, 2, 2, 0>;
    case 24 + 1: return dwconv_bwd_filter_mma_kernel<T, kVec, 3, 1, 0>;
    default: return dwconv_bwd_filter_mma_kernel<T, kVec, 4, 1, 0>;  // m_tiles 4 (KW <= 64)
  }
}

template <typename T>
cudaError_t launch_bwd_filter_mma(const DwConvParams& p, const BwdFilterLaunchPlan& plan, const T* x, const T* dy,
                                  float* workspace, cudaStream_t stream) {
  auto kernel = plan.vec ? mma_kernel_for<T, true>(plan.mma) : mma_kernel_for<T, false>(plan.mma);
  const size_t smem = size_t(plan.launch.smem_bytes);
  if (cudaError_t err = allow_dynamic_smem(kernel, smem); err != cudaSuccess) return err;
  kernel<<<to_dim3(plan.launch.grid), to_dim3(plan.launch.block), smem, stream>>>(x, dy, workspace, p, plan.mma);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_bwd_filter_mma(const DwConvParams& p, const T* x, const T* dy, float* workspace,
                                  int64_t slices, cudaStream_t stream) {
  BwdFilterCall call;
  call.half_precision = true;
  call.x_align = address_alignment(x);
  call.dy_align = address_alignment(dy);
  return launch_bwd_filter_mma(p, plan_bwd_filter_mma_launch(p, slices, call, device_limits()), x, dy, workspace,
                               stream);
}

#define FLASHDWC_INSTANTIATE_MMA(T)                                                                               \
  template cudaError_t launch_bwd_filter_mma<T>(const DwConvParams&, const BwdFilterLaunchPlan&, const T*,         \
                                                const T*, float*, cudaStream_t);                                   \
  template cudaError_t launch_bwd_filter_mma<T>(const DwConvParams&, const T*, const T*, float*, int64_t,          \
                                                cudaStream_t);

FLASHDWC_INSTANTIATE_MMA(__half)
FLASHDWC_INSTANTIATE_MMA(__nv_bfloat16)

}  // namespace flashdwc
