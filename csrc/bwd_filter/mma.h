// Filter gradient on tensor cores (fp16/bf16 inputs, fp32 accumulation): the
// kernel of bwd_filter/mma.cuh, launched by run_dwconv_bwd_filter where it applies.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/params.h"
#include "plan/bwd_filter_launch.h"

namespace flashdwc {

// The fp32 partial sums into `workspace`: with slices == 0, merged by atomics into
// one KH x KW x C slice that the caller has zeroed; else stored into `slices` slices
// (deterministic mode), each written whole. dwconv_bwd_filter_finalize_kernel then
// sums the slices into dw. The deterministic slice count is the split kernel's, so
// that the workspace the lowering sizes (from shapes that do not say whether this
// kernel applies) fits either kernel. T = __half or __nv_bfloat16; enqueues on
// `stream`, never synchronizes. Call only when can_implement_bwd_filter_mma (plan/bwd_filter.h) holds.
template <typename T>
cudaError_t launch_bwd_filter_mma(const DwConvParams& p, const T* x, const T* dy, float* workspace,
                                  int64_t slices, cudaStream_t stream);

// The same with the plan given (plan_bwd_filter_launch or plan_bwd_filter_mma_launch,
// kMma): the workspace already zeroed in atomic mode.
template <typename T>
cudaError_t launch_bwd_filter_mma(const DwConvParams& p, const BwdFilterLaunchPlan& plan, const T* x, const T* dy,
                                  float* workspace, cudaStream_t stream);

}  // namespace flashdwc
