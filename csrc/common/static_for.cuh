// Compile-time loop for unrolled code whose indices must be constants (register
// windows, remainder lengths).
#pragma once

#include <type_traits>

namespace flashdwc {

// Calls f(std::integral_constant<int, i>) for i in [kBegin, kEnd).
template <int kBegin, int kEnd, typename F>
__device__ __forceinline__ void static_for(F&& f) {
  if constexpr (kBegin < kEnd) {
    f(std::integral_constant<int, kBegin>{});
    static_for<kBegin + 1, kEnd>(f);
  }
}

}  // namespace flashdwc
