// A kernel launch as plain integers, so that the plan (host code, also on a CPU-only
// build) can state it: grid and block dimensions and the dynamic shared memory. The
// launchers convert it to dim3 (common/launch.cuh, to_dim3).
#pragma once

#include <cstdint>

namespace flashdwc {

struct LaunchDims {
  int64_t x = 1, y = 1, z = 1;
};

struct LaunchConfig {
  LaunchDims grid;
  LaunchDims block;
  int64_t smem_bytes = 0;  // dynamic shared memory
};

// What a launcher does with a plan: launch it, launch nothing (an empty problem), or
// report cudaErrorInvalidValue (a size past the kernel's 32-bit indices).
enum class LaunchStatus {
  kLaunch,
  kNothing,
  kInvalid,
};

// One thread a slot in x and one image a block row in y (at most 65535 images; a
// kernel walks the rest): the launch of the kernels whose grid covers one image's
// slots, the stride-2 forward and the polyphase input gradient.
inline LaunchConfig per_image_slots_launch(int64_t slots, int64_t batch, int64_t threads) {
  LaunchConfig launch;
  launch.grid.x = (slots + threads - 1) / threads;
  launch.grid.y = batch < 65535 ? batch : 65535;
  launch.block.x = threads;
  return launch;
}

// The largest power of two, at most 16, that divides an address: what the launch
// plans read for a buffer's alignment (aligned to b bytes, b <= 16 a power of two,
// exactly when this is at least b). 16 for a null pointer.
inline int64_t address_alignment(const void* p) {
  const uint64_t a = uint64_t(reinterpret_cast<uintptr_t>(p));
  int64_t align = 1;
  while (align < 16 && a % uint64_t(2 * align) == 0) align *= 2;
  return align;
}

}  // namespace flashdwc
