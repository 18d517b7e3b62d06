// Forward depthwise convolution on tensor cores (fp16/bf16 inputs, fp32
// accumulation): the GEMV-to-GEMM kernel of fwd/mma.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/epilogue.h"
#include "common/params.h"
#include "plan/fwd_launch.h"

namespace flashdwc {

// y = epilogue(conv(prologue(x), w)) with T = __half or __nv_bfloat16; enqueues on
// `stream`, never synchronizes. Call only when can_implement_fwd_mma (plan/fwd.h) holds.
// tiles_per_block: 0 lets the plan choose how many 8-row output tiles a block
// computes (plan/fwd_mma_grid.h); a positive count fixes it where KH <= 13, for tests
// (1: one tile; above 1 with 16-byte pixels and maps over 64 wide, the streaming
// kernel of fwd/mma_stream.cuh).
template <typename T>
cudaError_t launch_fwd_mma(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                           const FwdEpilogue& epilogue = {}, const FwdPrologue& prologue = {},
                           int tiles_per_block = 0);

// The same with the plan given (plan_fwd_launch or plan_fwd_mma_launch, kMma).
template <typename T>
cudaError_t launch_fwd_mma(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                           cudaStream_t stream, const FwdEpilogue& epilogue, const FwdPrologue& prologue);

}  // namespace flashdwc
