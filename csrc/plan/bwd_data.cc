// The input gradient's plan (plan/bwd_data.h).
#include "plan/bwd_data.h"

namespace flashdwc {

BwdDataPlan plan_bwd_data(const DwConvParams& p, bool half_precision, const DeviceLimits& device) {
  if (bwd_data_runs_as_forward(p)) {
    return {BwdDataKernel::kForward, plan_fwd(stride1_bwd_data_as_fwd(p), half_precision, device)};
  }
  return {BwdDataKernel::kGather};
}

}  // namespace flashdwc
