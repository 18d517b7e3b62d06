// The input gradient's plan. At stride 1 the input gradient is a forward convolution
// of dy with the filter rotated by 180 degrees (stride1_bwd_data_as_fwd), so it runs
// the kernel plan_fwd picks for that problem; other strides run the gather kernel
// (bwd_data/direct.cuh). Host code only.
#pragma once

#include "common/params.h"
#include "plan/device_limits.h"
#include "plan/fwd.h"

namespace flashdwc {

enum class BwdDataKernel {
  kForward,  // the forward kernel `forward` on stride1_bwd_data_as_fwd(p)
  kGather,   // bwd_data/direct.cuh
};

struct BwdDataPlan {
  BwdDataKernel kernel;
  FwdKernel forward = FwdKernel::kDirect;  // with kForward
};

// Stride 1: the forward convolution of dy with the rotated filter.
inline bool bwd_data_runs_as_forward(const DwConvParams& p) { return p.stride_h == 1 && p.stride_w == 1; }

BwdDataPlan plan_bwd_data(const DwConvParams& p, bool half_precision, const DeviceLimits& device);

}  // namespace flashdwc
