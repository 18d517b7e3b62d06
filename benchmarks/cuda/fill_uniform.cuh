// U(-1, 1) data for the kernel-level timing harnesses and tests/cuda/check_fwd_mma.cu,
// filled on the device from a hash of the index and a seed (no host copy).
#pragma once

#include <cstdint>

template <typename T>
__global__ void fill_uniform(T* p, int64_t n, unsigned seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    p[i] = T(float(h) * (2.0f / 4294967296.0f) - 1.0f);
  }
}
