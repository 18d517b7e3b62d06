// Slot arithmetic of the shared-memory rings of rows that the kernels stage into.
#pragma once

namespace flashdwc {

// Slot s of a ring of `slots`, for s in [0, 2 slots): one compare, no remainder.
__device__ __forceinline__ int wrap_slot(int s, int slots) { return s < slots ? s : s - slots; }

}  // namespace flashdwc
