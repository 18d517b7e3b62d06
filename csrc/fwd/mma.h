// Forward depthwise convolution on tensor cores (fp16/bf16 inputs, fp32
// accumulation): the GEMV-to-GEMM kernel of fwd_mma.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "dwconv/epilogue.h"
#include "dwconv/params.h"

namespace flashdwc {

// True when launch_fwd_mma can run this problem (stride 1, dilation 1, sizes within the kernel's limits).
bool fwd_mma_supports(const DwConvParams& p);

// y = epilogue(conv(prologue(x), w)) with T = __half or __nv_bfloat16; enqueues on
// `stream`, never synchronizes. Call only when fwd_mma_supports(p).
// tiles_per_block: 0 lets the launcher choose how many 8-row output tiles a block
// computes (fwd_mma.cu); a positive count fixes it where KH <= 13, for tests (1: one
// tile; above 1 with 16-byte pixels and maps over 64 wide, the streaming kernel
// of fwd_mma_stream.cuh).
template <typename T>
cudaError_t launch_fwd_mma(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                           const FwdEpilogue& epilogue = {}, const FwdPrologue& prologue = {},
                           int tiles_per_block = 0);

}  // namespace flashdwc
