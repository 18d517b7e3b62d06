// How the forward runs one call: the kernel plan_fwd (plan/fwd.h) picks, after what
// the call itself allows (its buffers' alignment, a prologue), with the launch
// configuration and the kernel's tiling. fwd/launch.cu, fwd/mma.cu and
// fwd/regfilter.cu only read it and launch. Host code only.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "fwd/gemv_grid.h"
#include "fwd/mma_layout.h"
#include "fwd/regfilter_grid.h"
#include "fwd/rowstream_grid.h"
#include "fwd/stride2_index.h"
#include "fwd/wgmma_layout.h"
#include "plan/device_limits.h"
#include "plan/fwd.h"
#include "plan/launch_config.h"

namespace flashdwc {

// What the plan reads of a call beyond the problem.
struct FwdCall {
  bool half_precision = false;  // fp16 or bf16
  bool epilogue = false;        // a bias or an activation (FwdEpilogue::active)
  bool prologue = false;        // a scale and shift (FwdPrologue::active)
  // Each buffer's address_alignment (plan/launch_config.h); the bias's is 16 when
  // there is none.
  int64_t x_align = 16, w_align = 16, y_align = 16, bias_align = 16;
  // Bytes of workspace the call has (the Hopper kernel's planar copies; 0: none).
  int64_t workspace_bytes = 0;
};

// Sizes the plan reads of the kernels' template instances (the launchers
// static_assert them against the kernels' traits).
// GEMV: threads a block; channels a thread and a block; outputs a thread (TM): fp32
// 8 at stride 1 and 4 at stride 2, half the types with twice the channels; filter
// bytes a pipeline stage.
inline constexpr int kFwdGemvThreads = 128;
constexpr int64_t fwd_gemv_channels_per_thread(int64_t elem_bytes) { return 16 / elem_bytes; }
constexpr int64_t fwd_gemv_block_channels(int64_t elem_bytes) { return 8 * fwd_gemv_channels_per_thread(elem_bytes); }
constexpr int fwd_gemv_tm(int64_t elem_bytes, int64_t stride) {
  return int((stride == 1 ? 8 : 4) * 4 / fwd_gemv_channels_per_thread(elem_bytes));
}
// Filter bytes per pipeline stage: whole filters up to 11x11 (fp32) in one stage,
// four 31-wide rows per stage, while two stages stay small next to L1.
inline constexpr int64_t kFwdGemvStageBytes = 16 * 1024;
// Register-filter: the resident blocks an SM its launch bounds give, per filter size.
constexpr int64_t fwd_regfilter_min_blocks(int64_t kernel) { return kernel == 3 ? 4 : 3; }

struct FwdLaunchPlan {
  FwdKernel kernel = FwdKernel::kDirect;
  LaunchStatus status = LaunchStatus::kLaunch;
  LaunchConfig launch;
  bool vec = false;  // direct, GEMV, tensor core: 16-byte channel groups
  int tm = 0;        // GEMV and row-stream: outputs a thread along the width
  int images = 1;    // row-stream: images side by side in a strip
  // The chosen kernel's grid (the others stay zero).
  GemvFwdGrid gemv{};
  RowStreamGrid rowstream{};
  FwdStride2Grid stride2{};
  RegFilterGrid regfilter{};
  MmaFwdGrid mma{};
  WgmmaFwdGrid wgmma{};
};

// The launch of the forward for the problem and call on `device`.
FwdLaunchPlan plan_fwd_launch(const DwConvParams& p, const FwdCall& call, const DeviceLimits& device);

// Bytes of workspace the forward of the problem wants on `device`: the Hopper
// kernel's planar copies where plan_fwd picks it and the call has no prologue, else 0.
// The lowering gives the custom call a workspace of this size.
int64_t fwd_workspace_bytes(const DwConvParams& p, bool half_precision, bool prologue, const DeviceLimits& device);

// One kernel's launch, where the caller has chosen it (the launchers' test entry
// points). plan_fwd_mma_launch: tiles_per_block as launch_fwd_mma's (fwd/mma.h).
FwdLaunchPlan plan_fwd_regfilter_launch(const DwConvParams& p, bool half_precision, const DeviceLimits& device);
// The Hopper kernel's plan whatever the rule (the kernel harness times it where the plan
// does not take it); call only where can_implement_fwd_wgmma holds.
FwdLaunchPlan plan_fwd_wgmma_launch(const DwConvParams& p);
FwdLaunchPlan plan_fwd_mma_launch(const DwConvParams& p, const FwdCall& call, const DeviceLimits& device,
                                  int tiles_per_block);

}  // namespace flashdwc
