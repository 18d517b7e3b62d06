// The input gradient on the GPU: runs the kernel plan_bwd_data (plan/bwd_data.h)
// picks. Enqueues on `stream` and returns the launch status; never synchronizes.
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"

namespace flashdwc {

// dx from dy and w: stride 1 runs the forward kernel on the rotated filter, other
// strides the gather kernel. T is float, __half or __nv_bfloat16.
template <typename T>
cudaError_t run_dwconv_bwd_data(const DwConvParams& p, const T* dy, const T* w, T* dx, cudaStream_t stream,
                                void* workspace = nullptr, int64_t workspace_bytes = 0);

}  // namespace flashdwc
