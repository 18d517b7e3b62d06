// The CUDA platform of ffi/platform.h: work goes on XLA's stream, with no host
// synchronization or allocation, so that the handlers can be captured into command
// buffers (CUDA graphs).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "ffi/platform.h"

namespace flashdwc {

struct CudaPlatform {
  using Half = __half;
  using BFloat16 = __nv_bfloat16;
  cudaStream_t stream;
  const char* handler;  // names the handler in errors

  ffi::Error status(cudaError_t err) const {
    if (err == cudaSuccess) return ffi::Error::Success();
    return ffi::Error::Internal(std::string(handler) + ": CUDA error " + cudaGetErrorName(err) + ": " +
                                cudaGetErrorString(err));
  }
  ffi::Error fill_nan(void* data, size_t bytes) const { return status(cudaMemsetAsync(data, 0xFF, bytes, stream)); }
  // run() launches and returns the launcher's cudaError_t.
  template <typename Run>
  ffi::Error finish(Run&& run) const {
    return status(run());
  }
};

}  // namespace flashdwc
