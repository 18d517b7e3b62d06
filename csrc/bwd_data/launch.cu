// The input gradient on the GPU: the gather kernel's grid, and run_dwconv_bwd_data,
// which runs the plan of plan_bwd_data (plan/bwd_data.h).
#include "bwd_data/launch.h"

#include <cstdint>

#include "bwd_data/direct.cuh"
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

}  // namespace

template <typename T>
cudaError_t run_dwconv_bwd_data(const DwConvParams& p, const T* dy, const T* w, T* dx,
                                cudaStream_t stream) {
  if (bwd_data_runs_as_forward(p)) {
    return run_dwconv_fwd(stride1_bwd_data_as_fwd(p), dy, w, dx, stream);
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
