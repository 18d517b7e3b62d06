// Forward depthwise convolution on CUDA cores with the filter in registers
// (fp16/bf16 or fp32 inputs, fp32 accumulation): the kernel of fwd/regfilter.cuh, for
// 3x3 and 5x5 filters at stride 1.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/epilogue.h"
#include "common/params.h"
#include "plan/fwd_launch.h"

namespace flashdwc {

// True when the buffers are aligned as the kernel moves them: x by 16-byte copies,
// w, y and the bias (may be null) as 32-bit words (channel pairs, or fp32 channels).
bool fwd_regfilter_aligned(const void* x, const void* w, const void* y, const void* bias);

// y = epilogue(conv(x, w)) with T = __half, __nv_bfloat16 or float; enqueues on `stream`,
// never synchronizes. Call only when can_implement_fwd_regfilter (plan/fwd.h) and
// fwd_regfilter_aligned(x, w, y, epilogue.bias); the kernel has no prologue. Returns
// cudaErrorInvalidValue, launching nothing, when either is not so.
template <typename T>
cudaError_t launch_fwd_regfilter(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                                 const FwdEpilogue& epilogue = {});

// The same with the plan given (plan_fwd_launch or plan_fwd_regfilter_launch,
// kRegFilter), whose checks it does not repeat.
template <typename T>
cudaError_t launch_fwd_regfilter(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                                 cudaStream_t stream, const FwdEpilogue& epilogue);

}  // namespace flashdwc
