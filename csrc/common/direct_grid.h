// Grids of the direct kernels (fwd/direct.cuh, bwd_data/direct.cuh) and of the
// element-wise filter-gradient finalize, computed on the host by the plans. Plain
// C++, so that the plans build without CUDA.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>

#include "plan/launch_config.h"

namespace flashdwc {

// Threads a block of the element-wise kernels. Grid-stride loops cover any size; more
// blocks than kMaxDirectBlocks buys nothing on an H200 (132 SMs x 8 resident blocks
// of 256 threads = 1056).
inline constexpr int kDirectThreads = 256;
inline constexpr int64_t kMaxDirectBlocks = 65536;

inline LaunchDims direct_grid(int64_t elements) {
  const int64_t blocks = (elements + kDirectThreads - 1) / kDirectThreads;
  LaunchDims grid;
  grid.x = std::clamp<int64_t>(blocks, 1, kMaxDirectBlocks);
  return grid;
}

// Threads a block of the direct convolution kernels (common/direct_conv.cuh).
inline constexpr int kDirectThreadsPerBlock = 128;

// The direct kernels' grid: x over an image row's (column, channel group) slots, y
// over the N * rows image rows (a grid-stride loop past 65535). False where a row has
// more slots than the kernels' 32-bit column index holds.
inline bool direct_grid_2d(int64_t rows, int64_t slots, LaunchDims& grid) {
  if (slots > INT32_MAX - 65535LL * kDirectThreadsPerBlock) return false;
  grid.x = std::clamp<int64_t>((slots + kDirectThreadsPerBlock - 1) / kDirectThreadsPerBlock, 1, 65535);
  grid.y = std::clamp<int64_t>(rows, 1, 65535);
  grid.z = 1;
  return true;
}

}  // namespace flashdwc
