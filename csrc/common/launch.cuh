// Helpers shared by the CUDA launchers of the three passes.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "plan/device_limits.h"

namespace flashdwc {

inline constexpr int kDirectThreads = 256;
// Grid-stride loops cover any size; more blocks than this buys nothing on an
// H200 (132 SMs x 8 resident blocks of 256 threads = 1056).
inline constexpr int64_t kMaxDirectBlocks = 65536;

inline dim3 direct_grid(int64_t elements) {
  const int64_t blocks = (elements + kDirectThreads - 1) / kDirectThreads;
  return dim3(unsigned(std::clamp<int64_t>(blocks, 1, kMaxDirectBlocks)));
}

inline bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Lets `kernel` launch with `bytes` of dynamic shared memory: above 48 KB a kernel
// needs the opt-in attribute.
template <typename Kernel>
inline cudaError_t allow_dynamic_smem(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

// The block shared-memory limit of the current device, or 0 where it cannot be read.
inline int max_smem_per_block() {
  int device = 0, max_smem = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    // Clear the runtime's last error, so that a later launch does not report it.
    (void)cudaGetLastError();
    return 0;
  }
  return max_smem;
}

// The current device's limits (plan/device_limits.h).
inline DeviceLimits device_limits() {
  int device = 0, sms = 0, per_block = 0, per_sm = 0, reserved = 0, l2 = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess) {
    (void)cudaGetLastError();  // as in max_smem_per_block
    return {};
  }
  return {sms, per_block, per_sm, reserved, l2};
}

}  // namespace flashdwc
