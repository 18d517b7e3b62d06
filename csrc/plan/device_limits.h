// What the plan and the launchers size kernels by: the current device's limits. The
// CUDA query is common/launch.cuh's device_limits(); the plan takes them as input, so
// that it runs on the host alone (tests pass an H100's or H200's numbers).
#pragma once

#include <cstdint>

namespace flashdwc {

// Zeros where the attributes cannot be read.
struct DeviceLimits {
  int64_t sms = 0;
  int64_t smem_per_block = 0;  // opt-in limit
  int64_t smem_per_sm = 0;
  int64_t smem_reserved_per_block = 0;  // what the runtime keeps per resident block
  int64_t l2_bytes = 0;
  // The Hopper forward (fwd/wgmma.cuh) can run: the library was built with its sm_90a
  // code and the device is compute capability 9.0.
  bool wgmma = false;
};

}  // namespace flashdwc
