// The input gradient's launch plan (plan/bwd_data_launch.h).
#include "plan/bwd_data_launch.h"

#include <cstdint>

#include "common/direct_grid.h"
#include "common/direct_index.h"

namespace flashdwc {

int64_t bwd_data_workspace_bytes(const DwConvParams& p, bool half_precision, const DeviceLimits& device) {
  if (!bwd_data_runs_as_forward(p)) return 0;
  return fwd_workspace_bytes(stride1_bwd_data_as_fwd(p), half_precision, false, device);
}

BwdDataLaunchPlan plan_bwd_data_launch(const DwConvParams& p, const BwdDataCall& call, const DeviceLimits& device) {
  BwdDataLaunchPlan plan;
  const int64_t elem_bytes = call.half_precision ? 2 : 4;
  if (bwd_data_runs_as_forward(p)) {
    plan.kernel = BwdDataKernel::kForward;
    FwdCall forward;
    forward.half_precision = call.half_precision;
    forward.x_align = call.dy_align;
    forward.w_align = call.w_align;
    forward.y_align = call.dx_align;
    forward.workspace_bytes = call.workspace_bytes;
    plan.forward = plan_fwd_launch(stride1_bwd_data_as_fwd(p), forward, device);
    return plan;
  }
  // The polyphase kernel's vectors, for every buffer.
  const int64_t phase_bytes = bwd_data_phase_width(p.kernel_w, call.half_precision) * elem_bytes;
  if (can_implement_bwd_data_phase(p, call.half_precision) && call.dy_align >= phase_bytes &&
      call.w_align >= phase_bytes && call.dx_align >= phase_bytes) {
    plan.kernel = BwdDataKernel::kPhase;
    const int64_t width = bwd_data_phase_width(p.kernel_w, call.half_precision);
    plan.phase = make_bwd_data_phase_grid(p, width, bwd_data_phase_rows_per_thread(p, width, device.sms));
    if (p.batch <= 0 || plan.phase.slots <= 0) {
      plan.status = LaunchStatus::kNothing;
      return plan;
    }
    plan.launch = per_image_slots_launch(plan.phase.slots, p.batch, kBwdDataPhaseThreads);
    return plan;
  }
  plan.kernel = BwdDataKernel::kGather;
  const int64_t vec_width = 16 / elem_bytes;
  plan.vec = p.channels % vec_width == 0 && call.dy_align >= 16 && call.w_align >= 16 && call.dx_align >= 16;
  const int64_t width = plan.vec ? vec_width : 1;
  if (!direct_grid_2d(p.batch * p.in_h, p.in_w * (p.channels / width), plan.launch.grid)) {
    plan.status = LaunchStatus::kInvalid;
    return plan;
  }
  plan.launch.block.x = kDirectThreadsPerBlock;
  plan.step_h = strided_tap_step(p.stride_h, p.dilation_h);
  plan.step_w = strided_tap_step(p.stride_w, p.dilation_w);
  return plan;
}

}  // namespace flashdwc
