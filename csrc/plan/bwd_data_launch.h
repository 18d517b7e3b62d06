// How the input gradient runs one call: the kernel plan_bwd_data (plan/bwd_data.h)
// picks, after what the call's buffers allow, with the launch configuration and the
// kernel's tiling. bwd_data/launch.cu only reads it and launches. Host code only.
#pragma once

#include <cstdint>

#include "bwd_data/phase_index.h"
#include "common/params.h"
#include "plan/bwd_data.h"
#include "plan/device_limits.h"
#include "plan/fwd_launch.h"
#include "plan/launch_config.h"

namespace flashdwc {

// What the plan reads of a call beyond the problem: each buffer's address_alignment
// (plan/launch_config.h).
struct BwdDataCall {
  bool half_precision = false;  // fp16 or bf16
  int64_t dy_align = 16, w_align = 16, dx_align = 16;
  int64_t workspace_bytes = 0;  // for the forward's Hopper kernel (FwdCall::workspace_bytes)
};

struct BwdDataLaunchPlan {
  BwdDataKernel kernel = BwdDataKernel::kGather;
  LaunchStatus status = LaunchStatus::kLaunch;
  LaunchConfig launch;             // the phase and gather kernels'
  FwdLaunchPlan forward;           // kForward: the forward's on stride1_bwd_data_as_fwd(p)
  BwdDataPhaseGrid phase{};        // kPhase
  bool vec = false;                // kGather: 16-byte channel groups
  int step_h = 0, step_w = 0;      // kGather: strided_tap_step along each axis
};

BwdDataLaunchPlan plan_bwd_data_launch(const DwConvParams& p, const BwdDataCall& call, const DeviceLimits& device);

// Bytes of workspace the input gradient wants on `device`: the forward's
// (fwd_workspace_bytes) where it runs as a forward, else 0.
int64_t bwd_data_workspace_bytes(const DwConvParams& p, bool half_precision, const DeviceLimits& device);

}  // namespace flashdwc
