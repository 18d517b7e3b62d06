// One handler body for both platforms and the three element types. A platform names
// its 16-bit types (Half, BFloat16), fills a buffer with NaN for the tests
// (fill_nan) and turns a launcher's outcome into an ffi::Error (finish): CpuPlatform
// here, CudaPlatform in ffi/platform_cuda.h.
#pragma once

#include <atomic>
#include <cstring>

#include "common/host_half.h"
#include "xla/ffi/api/ffi.h"

namespace flashdwc {

namespace ffi = xla::ffi;

// When set, every handler fills its outputs with NaN bit patterns (all bytes 0xFF)
// before its kernel runs, so that an element the kernel fails to write shows up in
// tests. Off by default; costs one memset when on.
std::atomic<bool>& poison_outputs_flag();

// Calls fn(T{}) with T the platform's type for element type `dt` (F32, F16 or BF16;
// the caller has checked it is one of them) and returns what fn returns.
template <typename Platform, typename Fn>
ffi::Error with_element_type(ffi::DataType dt, Fn&& fn) {
  switch (dt) {
    case ffi::DataType::F32: return fn(float{});
    case ffi::DataType::F16: return fn(typename Platform::Half{});
    case ffi::DataType::BF16: return fn(typename Platform::BFloat16{});
    default: return ffi::Error::InvalidArgument("unreachable: element type checked with the params");
  }
}

// NaN into `bytes` bytes at `data` when the tests ask for poisoned outputs.
template <typename Platform>
ffi::Error poison_if_asked(const Platform& platform, void* data, size_t bytes) {
  if (bytes == 0 || !poison_outputs_flag().load(std::memory_order_relaxed)) return ffi::Error::Success();
  return platform.fill_nan(data, bytes);
}

struct CpuPlatform {
  using Half = HostHalf;
  using BFloat16 = HostBFloat16;
  ffi::Error fill_nan(void* data, size_t bytes) const {
    std::memset(data, 0xFF, bytes);
    return ffi::Error::Success();
  }
  // The CPU loops cannot fail once the buffers are checked.
  template <typename Run>
  ffi::Error finish(Run&& run) const {
    run();
    return ffi::Error::Success();
  }
};

}  // namespace flashdwc
