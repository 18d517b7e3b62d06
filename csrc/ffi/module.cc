// The native module `_jax_flashdwc`: hands the FFI handlers to Python as capsules,
// grouped by platform, and exposes the output-poisoning switch used by the tests.
#include <nanobind/nanobind.h>

#include <type_traits>

#include "ffi/dwconv_attrs.h"
#include "ffi/dwconv_ffi.h"

namespace nb = nanobind;

namespace {

template <typename T>
nb::capsule encapsulate_ffi_handler(T* fn) {
  static_assert(std::is_invocable_r_v<XLA_FFI_Error*, T, XLA_FFI_CallFrame*>,
                "Encapsulated function must be an XLA FFI handler");
  return nb::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace

NB_MODULE(_jax_flashdwc, m) {
  m.def("registrations", []() {
    nb::dict cpu;
    cpu["flashdwc_fwd"] = encapsulate_ffi_handler(flashdwc::DwConvFwdCpuFfi);
    cpu["flashdwc_bwd_data"] = encapsulate_ffi_handler(flashdwc::DwConvBwdDataCpuFfi);
    cpu["flashdwc_bwd_filter"] = encapsulate_ffi_handler(flashdwc::DwConvBwdFilterCpuFfi);
    nb::dict by_platform;
    by_platform["cpu"] = cpu;
#ifdef FLASHDWC_WITH_CUDA
    nb::dict cuda;
    cuda["flashdwc_fwd"] = encapsulate_ffi_handler(flashdwc::DwConvFwdCudaFfi);
    cuda["flashdwc_bwd_data"] = encapsulate_ffi_handler(flashdwc::DwConvBwdDataCudaFfi);
    cuda["flashdwc_bwd_filter"] = encapsulate_ffi_handler(flashdwc::DwConvBwdFilterCudaFfi);
    by_platform["CUDA"] = cuda;
#endif
    return by_platform;
  });
  m.def("set_poison_outputs", [](bool on) { flashdwc::poison_outputs_flag().store(on); },
        nb::arg("on"),
        "Fill every output with NaN before its kernel runs (a testing aid).");
  m.def("built_with_cuda", []() {
#ifdef FLASHDWC_WITH_CUDA
    return true;
#else
    return false;
#endif
  });
}
