// Launchers of the CUDA 1-D kernels (conv1d_kernels.cuh) on a stream: no host
// synchronization; a launch error comes back as the cudaError_t.
#pragma once

#include <cuda_runtime.h>

#include "conv1d/conv1d_params.h"

namespace flashdwc {

template <typename T>
cudaError_t run_conv1d_fwd(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                           const T* state, T* y, cudaStream_t stream);

template <typename T>
cudaError_t run_conv1d_bwd(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                           const T* state, const T* dy, T* dx, T* dstate, float* dw_part, float* db_part,
                           cudaStream_t stream);

// One decoding step (conv1d_cpu.h's conv1d_step_cpu): one thread per 16 bytes of
// channels of a sequence; state_out may be state_in.
template <typename T>
cudaError_t run_conv1d_step(const Conv1dParams& p, const T* x, const T* w, const T* bias, const T* state_in, T* y,
                            T* state_out, cudaStream_t stream);

}  // namespace flashdwc
