// The forward pass's plan: which kernel runs a problem. One can_implement check per
// kernel family (can it run this problem at all), and plan_fwd, which takes the
// fastest family that can, by the thresholds of plan/thresholds.h. Host code only.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "plan/device_limits.h"

namespace flashdwc {

// The forward kernels, fastest first.
enum class FwdKernel {
  kWgmma,      // fwd/wgmma.cuh (sm_90)
  kRegFilter,  // fwd/regfilter.cuh
  kMma,        // fwd/mma.cuh, fwd/mma_stream.cuh
  kRowStream,  // fwd/rowstream.cuh
  kStride2,    // fwd/stride2.cuh
  kGemv,       // fwd/gemv.cuh
  kDirect,     // fwd/direct.cuh
};
const char* fwd_kernel_name(FwdKernel kernel);

// Sizes of the kernels that the checks below read; the launchers static_assert them
// against the kernels' traits (fwd/launch.cu, fwd/regfilter.cu).
// Row-stream: filters at most 9 rows tall; strips of 32 output columns where the output
// is at most that wide; 64-channel blocks for fp16/bf16.
inline constexpr int64_t kFwdRowStreamMaxKernelH = 9;
inline constexpr int64_t kFwdRowStreamNarrowWidth = 32;
inline constexpr int64_t kFwdRowStreamHalfBlockChannels = 64;
// GEMV: the widest filter row it keeps in shared memory: 2 rows x 512 taps x 128 bytes
// of channels = 128 KiB, within the 227 KiB an sm_90 block may use. fp32's 32-channel
// blocks, 16 width segments a block and 4 rows a warp; fp16/bf16 outputs per thread
// (TM) at stride 1 and 2.
inline constexpr int64_t kFwdGemvMaxKernelW = 512;
inline constexpr int64_t kFwdGemvF32BlockChannels = 32;
inline constexpr int64_t kFwdGemvSegments = 16;
inline constexpr int64_t kFwdGemvRowsPerWarp = 4;
inline constexpr int64_t kFwdGemvHalfTmStride1 = 4;
inline constexpr int64_t kFwdGemvHalfTmStride2 = 2;
// Register-filter: 128 threads a block; outputs a thread along the width: 8 for 3x3,
// 4 for 5x5, 2 for 7x7 (fwd/regfilter.cu, RegFilterShape).
inline constexpr int64_t kFwdRegFilterThreads = 128;
inline int64_t fwd_regfilter_outputs_per_thread(int64_t kernel) { return kernel == 3 ? 8 : kernel == 5 ? 4 : 2; }
// The 32-bit words of a pixel the register-filter kernel walks, a thread each: channel
// pairs in fp16/bf16, channels in fp32.
inline int64_t fwd_regfilter_words(int64_t channels, bool half_precision) {
  return half_precision ? channels / 2 : channels;
}
// Threads a pixel of the register-filter grid: its words rounded up to whole warps (a
// warp's 32 lanes copy 128 contiguous bytes of one pixel).
inline int64_t fwd_regfilter_lane_words(int64_t channels, bool half_precision) {
  return (fwd_regfilter_words(channels, half_precision) + 31) / 32 * 32;
}
// Strips of the register-filter grid along one column residue (all of out_w at
// dilation 1): the residue's ceil(out_w / dilation_w) columns in strips of kTW.
inline int64_t fwd_regfilter_strips(const DwConvParams& p) {
  const int64_t tw = fwd_regfilter_outputs_per_thread(p.kernel_w);
  const int64_t residue_cols = (p.out_w + p.dilation_w - 1) / p.dilation_w;
  return (residue_cols + tw - 1) / tw;
}
// Threads along one row block of the register-filter grid: every image, column
// residue, strip and word.
inline int64_t fwd_regfilter_threads_per_row_block(const DwConvParams& p, bool half_precision) {
  return p.batch * p.dilation_w * fwd_regfilter_strips(p) * fwd_regfilter_lane_words(p.channels, half_precision);
}

// Whether each kernel can run the problem's geometry (the launch may also need aligned
// buffers; see run_dwconv_fwd). `half_precision`: fp16 or bf16 inputs.
bool can_implement_fwd_regfilter(const DwConvParams& p, bool half_precision);
bool can_implement_fwd_mma(const DwConvParams& p, bool half_precision, const DeviceLimits& device);
bool can_implement_fwd_rowstream(const DwConvParams& p, bool half_precision);
bool can_implement_fwd_gemv(const DwConvParams& p);
// Stride 2, dilation 1, a square 3x3 or 5x5 filter, C a multiple of
// fwd_stride2_width (fwd/stride2_index.h), the sizes within the kernel's 32-bit
// indices. The launch also needs aligned buffers and no prologue (run_dwconv_fwd
// falls back to the GEMV kernel).
bool can_implement_fwd_stride2(const DwConvParams& p, bool half_precision);

// fp16/bf16 on a device that runs the Hopper kernel (DeviceLimits::wgmma), stride 1,
// dilation 1, the output as large as the input with padding before it in [0, K),
// KW <= 57, C a multiple of 8, the transposes' row within their shared tile, the
// kernel's shared memory within the device's limit, and the grid and its 32-bit
// indices within bounds. The launch also needs 16-byte aligned buffers, no prologue
// and the workspace (plan_fwd_launch falls back to plan_fwd_without_wgmma's kernel).
bool can_implement_fwd_wgmma(const DwConvParams& p, bool half_precision, const DeviceLimits& device);

// The kernel the forward runs for the problem on `device`.
FwdKernel plan_fwd(const DwConvParams& p, bool half_precision, const DeviceLimits& device);
// The kernel it runs where the register-filter kernel cannot: the fallback for the
// problems that kernel takes when the call has a prologue or buffers it cannot move.
FwdKernel plan_fwd_without_regfilter(const DwConvParams& p, bool half_precision, const DeviceLimits& device);
// The kernel it runs where the Hopper kernel cannot: a call with a prologue, unaligned
// buffers or no workspace.
FwdKernel plan_fwd_without_wgmma(const DwConvParams& p, bool half_precision, const DeviceLimits& device);

}  // namespace flashdwc
