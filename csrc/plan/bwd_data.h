// The input gradient's plan. At stride 1 the input gradient is a forward convolution
// of dy with the filter rotated by 180 degrees (stride1_bwd_data_as_fwd), so it runs
// the kernel plan_fwd picks for that problem; stride 2 with a square 3x3 or 5x5
// filter runs the polyphase kernel (bwd_data/phase.cuh), other strides the gather
// kernel (bwd_data/direct.cuh). Host code only.
#pragma once

#include <cstdint>
#include <string>

#include "common/params.h"
#include "plan/device_limits.h"
#include "plan/fwd.h"

namespace flashdwc {

enum class BwdDataKernel {
  kForward,  // the forward kernel `forward` on stride1_bwd_data_as_fwd(p)
  kPhase,    // bwd_data/phase.cuh
  kGather,   // bwd_data/direct.cuh
};

struct BwdDataPlan {
  BwdDataKernel kernel;
  FwdKernel forward = FwdKernel::kDirect;  // with kForward
};

// Stride 1: the forward convolution of dy with the rotated filter.
inline bool bwd_data_runs_as_forward(const DwConvParams& p) { return p.stride_h == 1 && p.stride_w == 1; }

// The polyphase kernel's channels a thread: a 16-byte vector for 3x3 (8 fp16/bf16,
// 4 fp32); 5x5 keeps 25 fp32 filter taps a channel in registers, so it takes 4
// fp16/bf16 channels (8 bytes, 100 registers of filter) or 2 fp32 ones. The launcher
// (bwd_data/launch.cu) static_asserts its instances against this.
constexpr int64_t bwd_data_phase_width(int64_t kernel, bool half_precision) {
  return kernel == 3 ? (half_precision ? 8 : 4) : (half_precision ? 4 : 2);
}
// Stride 2, dilation 1, a square 3x3 or 5x5 filter read unflipped, C a multiple of
// bwd_data_phase_width, and the sizes within the kernel's 32-bit indices (an image's
// threads, row and column indices). The launch also needs buffers aligned to the
// vector (run_dwconv_bwd_data falls back to the gather kernel).
bool can_implement_bwd_data_phase(const DwConvParams& p, bool half_precision);

// "phase", "gather", or "forward:KERNEL".
std::string bwd_data_plan_name(const BwdDataPlan& plan);

BwdDataPlan plan_bwd_data(const DwConvParams& p, bool half_precision, const DeviceLimits& device);

}  // namespace flashdwc
