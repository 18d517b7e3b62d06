// Helpers shared by the CUDA launchers (dwconv_cuda.cu, bwd_filter_cuda*.cu).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

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

}  // namespace flashdwc
