// The filter gradient on the GPU: runs the kernel plan_bwd_filter (plan/bwd_filter.h)
// picks. Enqueues on `stream` and returns the launch status; never synchronizes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/params.h"

namespace flashdwc {

// Bytes of fp32 workspace run_dwconv_bwd_filter needs (0 when it needs none);
// `half_precision`: x and dy are fp16 or bf16, whose kernels take wider channel blocks.
int64_t bwd_filter_workspace_bytes(const DwConvParams& p, bool deterministic, bool half_precision);

// dw from x and dy, accumulated in fp32. The tensor-core, split, row-stream and GEMV
// kernels merge chunk partials by atomicAdd into `workspace`, or, when
// `deterministic`, store them per chunk and sum them in a fixed order, so that the
// result is bit-identical across runs. The direct kernel is deterministic in both
// modes.
template <typename T>
cudaError_t run_dwconv_bwd_filter(const DwConvParams& p, const T* x, const T* dy, T* dw, float* workspace,
                                  bool deterministic, cudaStream_t stream);

}  // namespace flashdwc
