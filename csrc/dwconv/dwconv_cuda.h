// Host-side launchers of the CUDA depthwise-convolution kernels. Each enqueues its
// work on `stream` and returns the launch status; none synchronizes the host.
#pragma once

#include <cuda_runtime.h>

#include "dwconv/params.h"

namespace flashdwc {

// The forward kernels, fastest first; select_fwd_kernel returns the first whose
// constraints the problem meets.
enum class FwdKernel {
  kGemv,    // fwd_gemv.cuh: stride_w 1 or 2, dilation_w 1, KW <= 512
  kDirect,  // direct_kernels.cuh: anything
};

FwdKernel select_fwd_kernel(const DwConvParams& p);

// y = conv(x, w). T is float, __half or __nv_bfloat16.
template <typename T>
cudaError_t run_dwconv_fwd(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream);

// dx from dy and w: stride 1 runs the forward kernel on the rotated filter,
// other strides a gather kernel.
template <typename T>
cudaError_t run_dwconv_bwd_data(const DwConvParams& p, const T* dy, const T* w, T* dx,
                                cudaStream_t stream);

// dw from x and dy, fp32 accumulation in a fixed order.
template <typename T>
cudaError_t run_dwconv_bwd_filter(const DwConvParams& p, const T* x, const T* dy, T* dw,
                                  cudaStream_t stream);

}  // namespace flashdwc
