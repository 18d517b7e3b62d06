// Forward depthwise convolution on Hopper warpgroup MMA (fwd/wgmma.cuh): fp16/bf16,
// sm_90a only, through planar copies of x and y in a workspace the caller provides.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/epilogue.h"
#include "common/params.h"
#include "plan/fwd_launch.h"

namespace flashdwc {

// y = epilogue(conv(x, w)), T = __half or __nv_bfloat16, with the plan
// plan_fwd_launch chose (kWgmma) and `workspace` of at least
// plan.wgmma.workspace_bytes, 256-byte aligned. Enqueues the transpose of x, the
// kernel and the transpose of y on `stream`; never synchronizes. Built only where the
// library is compiled for sm_90 (FLASHDWC_WITH_WGMMA).
template <typename T>
cudaError_t launch_fwd_wgmma(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                             void* workspace, cudaStream_t stream, const FwdEpilogue& epilogue);

}  // namespace flashdwc
