// Helpers shared by the CUDA launchers of the three passes.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "plan/device_limits.h"
#include "plan/launch_config.h"

namespace flashdwc {

// A plan's grid or block (plan/launch_config.h) as CUDA's dim3.
inline dim3 to_dim3(const LaunchDims& d) { return dim3(unsigned(d.x), unsigned(d.y), unsigned(d.z)); }

inline bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Lets `kernel` launch with `bytes` of dynamic shared memory: above 48 KB a kernel
// needs the opt-in attribute.
template <typename Kernel>
inline cudaError_t allow_dynamic_smem(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

// The current device's limits (plan/device_limits.h).
inline DeviceLimits device_limits() {
  int device = 0, sms = 0, per_block = 0, per_sm = 0, reserved = 0, l2 = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    // Clear the runtime's last error, so that a later launch does not report it.
    (void)cudaGetLastError();
    return {};
  }
#ifdef FLASHDWC_WITH_WGMMA
  const bool wgmma = major == 9 && minor == 0;
#else
  const bool wgmma = false;
#endif
  return {sms, per_block, per_sm, reserved, l2, wgmma};
}

}  // namespace flashdwc
