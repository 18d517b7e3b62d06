// Asynchronous global-to-shared copies (sm_80+), with zero fill for masked lanes.
#pragma once

#include <cstdint>

namespace flashdwc {

// Copies kBytes (4, 8 or 16) from gmem to smem without staging in registers. When
// `valid` is false nothing is read and the destination is zero-filled; gmem must
// still be a mapped address.
template <int kBytes>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, bool valid) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? kBytes : 0;
  if constexpr (kBytes == 16) {
    // .cg bypasses L1: each filter chunk is read once per block, the inputs keep L1.
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(gmem), "n"(kBytes),
                 "r"(src_bytes));
  }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most kPending committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace flashdwc
