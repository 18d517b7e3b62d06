// The forward pass on the GPU: runs the kernel plan_fwd (plan/fwd.h) picks, as
// plan_fwd_launch (plan/fwd_launch.h) lays it out. Enqueues on `stream` and returns
// the launch status; never synchronizes the host.
#pragma once

#include <cuda_runtime.h>

#include "common/epilogue.h"
#include "common/params.h"
#include "plan/fwd_launch.h"

namespace flashdwc {

// y = epilogue(conv(prologue(x), w)). T is float, __half or __nv_bfloat16.
// `workspace` (workspace_bytes, 256-byte aligned) lets the plan pick the Hopper kernel
// (plan/fwd_launch.h, fwd_workspace_bytes says how much it wants).
template <typename T>
cudaError_t run_dwconv_fwd(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                           const FwdEpilogue& epilogue = {}, const FwdPrologue& prologue = {},
                           void* workspace = nullptr, int64_t workspace_bytes = 0);

// The same with the plan given: plan_fwd_launch's for p and a call of these buffers,
// epilogue and prologue.
template <typename T>
cudaError_t launch_fwd(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                       cudaStream_t stream, const FwdEpilogue& epilogue = {}, const FwdPrologue& prologue = {},
                       void* workspace = nullptr);

}  // namespace flashdwc
