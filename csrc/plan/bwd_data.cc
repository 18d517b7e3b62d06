// The input gradient's plan (plan/bwd_data.h).
#include "plan/bwd_data.h"

#include <climits>
#include <cstdint>

#include "bwd_data/phase_index.h"

namespace flashdwc {

bool can_implement_bwd_data_phase(const DwConvParams& p, bool half_precision) {
  if (p.stride_h != 2 || p.stride_w != 2 || p.dilation_h != 1 || p.dilation_w != 1 || p.flip_filter) return false;
  if (p.kernel_h != p.kernel_w || (p.kernel_w != 3 && p.kernel_w != 5)) return false;
  const int64_t width = bwd_data_phase_width(p.kernel_w, half_precision);
  if (p.channels <= 0 || p.channels % width != 0) return false;
  // Rows and columns as int in the kernel: 2r + 1 - pad and the dy indices r, s.
  constexpr int64_t kMax = INT32_MAX / 4;
  const auto within = [](int64_t v) { return v >= -kMax && v <= kMax; };
  if (!within(p.in_h) || !within(p.in_w) || !within(p.out_h) || !within(p.out_w) || !within(p.pad_top) ||
      !within(p.pad_left)) {
    return false;
  }
  // An image's threads in blockIdx.x * 128 + threadIdx.x, for the longest runs the
  // launcher may pick (the most threads are at one row a run).
  const BwdDataPhaseGrid g = make_bwd_data_phase_grid(p, width, 1);
  return g.slots <= INT32_MAX - 1024 && p.channels <= INT32_MAX;
}

std::string bwd_data_plan_name(const BwdDataPlan& plan) {
  switch (plan.kernel) {
    case BwdDataKernel::kForward: return std::string("forward:") + fwd_kernel_name(plan.forward);
    case BwdDataKernel::kPhase: return "phase";
    case BwdDataKernel::kGather: return "gather";
  }
  return "gather";
}

// Stride-2 3x3 and 5x5 go to the polyphase kernel wherever it can run them: it was
// written to replace the gather kernel on them and has no measured threshold yet
// (docs/design-notes.md, "Stride-2 phase kernels").
BwdDataPlan plan_bwd_data(const DwConvParams& p, bool half_precision, const DeviceLimits& device) {
  if (bwd_data_runs_as_forward(p)) {
    return {BwdDataKernel::kForward, plan_fwd(stride1_bwd_data_as_fwd(p), half_precision, device)};
  }
  if (can_implement_bwd_data_phase(p, half_precision)) return {BwdDataKernel::kPhase};
  return {BwdDataKernel::kGather};
}

}  // namespace flashdwc
