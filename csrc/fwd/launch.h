// Host-side launchers of the CUDA depthwise-convolution kernels. Each enqueues its
// work on `stream` and returns the launch status; none synchronizes the host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dwconv/epilogue.h"
#include "dwconv/params.h"

namespace flashdwc {

// The forward kernels, fastest first; select_fwd_kernel returns the first whose
// constraints the problem meets.
enum class FwdKernel {
  kRegFilter,  // fwd_regfilter.cuh: fp16/bf16 3x3 and 5x5 at stride 1, C a multiple of 64; with a
               // prologue or buffers it cannot move (fwd_regfilter_aligned), the kernel the problem would
               // get without it
  kMma,     // fwd_mma.cuh: fp16/bf16, stride 1, dilation 1, KW >= 7 (fwd_mma_supports)
  kRowStream,  // fwd_rowstream.cuh: stride 1, dilation 1, KW 3/5/7, KH <= 9, C a multiple of 4 (fp32)
               // or 8 (half); with a prologue or unaligned buffers the GEMV kernel runs instead
  kGemv,    // fwd_gemv.cuh: stride_w 1 or 2, dilation_w 1, KW <= 512
  kDirect,  // direct_kernels.cuh: anything
};

// `half_precision`: the inputs are fp16 or bf16, which the tensor-core kernel takes.
FwdKernel select_fwd_kernel(const DwConvParams& p, bool half_precision);

// y = epilogue(conv(prologue(x), w)). T is float, __half or __nv_bfloat16.
template <typename T>
cudaError_t run_dwconv_fwd(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                           const FwdEpilogue& epilogue = {}, const FwdPrologue& prologue = {});

// dx from dy and w: stride 1 runs the forward kernel on the rotated filter,
// other strides a gather kernel.
template <typename T>
cudaError_t run_dwconv_bwd_data(const DwConvParams& p, const T* dy, const T* w, T* dx,
                                cudaStream_t stream);

// The split filter-gradient kernel's tiling: channels per thread (1 or 4 for fp32,
// 4 or 8 for fp16/bf16), filter taps per thread, and filter rows per thread (above 1
// only for fp32 at stride 1 and dilation 1).
struct BwdFilterTiling {
  int width;
  int tm;
  int rows = 1;
};
BwdFilterTiling bwd_filter_tiling(const DwConvParams& p, bool half_precision);

// The filter-gradient kernel run_dwconv_bwd_filter launches: tensor cores (fp16/bf16,
// stride 1, no dilation, KW <= 64, and wide enough to beat the split kernel; see
// select_bwd_filter_kernel in bwd_filter_cuda.cu), the row-stream kernel (stride 1,
// no dilation, KW 3, 5 or 7, KH <= 7, whole channel blocks, outputs at least 32
// wide, atomic mode), the forward loop over dy (fp32, stride 1, no dilation, KW >= 27;
// bwd_filter_gemv.cuh), the split kernel (stride_w 1 or 2, dilation_w 1), or the
// direct kernel.
enum class BwdFilterKernel { kMma, kRowStream, kSplit, kDirect, kGemv };
BwdFilterKernel select_bwd_filter_kernel(const DwConvParams& p, bool half_precision, bool deterministic);

// Bytes of fp32 workspace run_dwconv_bwd_filter needs (0 when it needs none);
// `half_precision`: x and dy are fp16 or bf16, whose kernels take wider channel blocks.
int64_t bwd_filter_workspace_bytes(const DwConvParams& p, bool deterministic, bool half_precision);

// dw from x and dy, accumulated in fp32, by the kernel select_bwd_filter_kernel
// names. The tensor-core and split kernels merge chunk partials by atomicAdd into
// `workspace`, or, when `deterministic`, store them per chunk and sum them in a fixed
// order, so that the result is bit-identical across runs. The direct kernel is
// deterministic in both modes.
template <typename T>
cudaError_t run_dwconv_bwd_filter(const DwConvParams& p, const T* x, const T* dy, T* dw, float* workspace,
                                  bool deterministic, cudaStream_t stream);

}  // namespace flashdwc
