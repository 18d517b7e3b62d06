// The native module `_jax_flashdwc`: hands the FFI handlers to Python as capsules,
// grouped by platform, with the XLA FFI API version they were compiled against, and
// exposes the output-poisoning switch used by the tests.
#include <nanobind/nanobind.h>
#include <nanobind/stl/tuple.h>

#include <type_traits>

#include "ffi/dwconv_attrs.h"
#ifdef FLASHDWC_WITH_CUDA
#include "dwconv/dwconv_cuda.h"
#endif
#include "ffi/dwconv_ffi.h"
#include "ffi/conv1d_ffi.h"

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
  // Each handler carries this version, and XLA refuses a handler newer than its own
  // API, failing the whole backend at start: _ffi.py compares first.
  m.attr("xla_ffi_api_version") = nb::make_tuple(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);
  m.def("registrations", []() {
    nb::dict cpu;
    cpu["flashdwc_fwd"] = encapsulate_ffi_handler(flashdwc::DwConvFwdCpuFfi);
    cpu["flashdwc_fwd_fused"] = encapsulate_ffi_handler(flashdwc::DwConvFwdFusedCpuFfi);
    cpu["flashdwc_bwd_data"] = encapsulate_ffi_handler(flashdwc::DwConvBwdDataCpuFfi);
    cpu["flashdwc_bwd_filter"] = encapsulate_ffi_handler(flashdwc::DwConvBwdFilterCpuFfi);
    cpu["flashdwc_conv1d_fwd"] = encapsulate_ffi_handler(flashdwc::Conv1dFwdCpuFfi);
    cpu["flashdwc_conv1d_bwd"] = encapsulate_ffi_handler(flashdwc::Conv1dBwdCpuFfi);
    nb::dict by_platform;
    by_platform["cpu"] = cpu;
#ifdef FLASHDWC_WITH_CUDA
    nb::dict cuda;
    cuda["flashdwc_fwd"] = encapsulate_ffi_handler(flashdwc::DwConvFwdCudaFfi);
    cuda["flashdwc_fwd_fused"] = encapsulate_ffi_handler(flashdwc::DwConvFwdFusedCudaFfi);
    cuda["flashdwc_bwd_data"] = encapsulate_ffi_handler(flashdwc::DwConvBwdDataCudaFfi);
    cuda["flashdwc_bwd_filter"] = encapsulate_ffi_handler(flashdwc::DwConvBwdFilterCudaFfi);
    cuda["flashdwc_conv1d_fwd"] = encapsulate_ffi_handler(flashdwc::Conv1dFwdCudaFfi);
    cuda["flashdwc_conv1d_bwd"] = encapsulate_ffi_handler(flashdwc::Conv1dBwdCudaFfi);
    by_platform["CUDA"] = cuda;
#endif
    return by_platform;
  });
  m.def("set_poison_outputs", [](bool on) { flashdwc::poison_outputs_flag().store(on); },
        nb::arg("on"),
        "Fill every output with NaN before its kernel runs (a testing aid).");
#ifdef FLASHDWC_WITH_CUDA
  // Which CUDA forward kernel the dispatcher picks for a problem: lets the tests
  // check that each kernel is exercised, without a GPU.
  m.def(
      "cuda_forward_kernel",
      [](int64_t channels, int64_t out_w, int64_t kernel_w, int64_t stride_w, int64_t dilation_w,
         bool half_precision, int64_t kernel_h, int64_t stride_h, int64_t dilation_h) {
        flashdwc::DwConvParams p{};
        p.batch = 1;
        p.kernel_h = kernel_h;
        p.stride_h = stride_h;
        p.dilation_h = dilation_h;
        p.channels = channels;
        p.out_w = out_w;
        p.in_w = out_w;
        p.kernel_w = kernel_w;
        p.stride_w = stride_w;
        p.dilation_w = dilation_w;
        p.out_h = p.in_h = 64;
        switch (flashdwc::select_fwd_kernel(p, half_precision)) {
          case flashdwc::FwdKernel::kRegFilter: return "regfilter";
          case flashdwc::FwdKernel::kMma: return "mma";
          case flashdwc::FwdKernel::kRowStream: return "rowstream";
          case flashdwc::FwdKernel::kGemv: return "gemv";
          case flashdwc::FwdKernel::kDirect: return "direct";
        }
        return "direct";
      },
      nb::arg("channels"), nb::arg("out_w"), nb::arg("kernel_w"), nb::arg("stride_w"), nb::arg("dilation_w"),
      nb::arg("half_precision") = false, nb::arg("kernel_h") = 1, nb::arg("stride_h") = 1,
      nb::arg("dilation_h") = 1);
  // Which CUDA filter-gradient kernel a problem gets ("mma", "rowstream", "split" or
  // "direct"), so the dispatch tests can check each is exercised. "mma" needs the
  // device's shared-memory limit, so without a GPU it is never chosen.
  m.def(
      "cuda_bwd_filter_kernel",
      [](int64_t channels, int64_t in_h, int64_t in_w, int64_t out_w, int64_t kernel_h, int64_t kernel_w,
         int64_t stride_h, int64_t stride_w, int64_t dilation_h, int64_t dilation_w, bool half_precision,
         bool deterministic) {
        flashdwc::DwConvParams p{};
        p.batch = 1;
        p.channels = channels;
        p.in_h = in_h;
        p.in_w = in_w;
        p.out_h = in_h;
        p.out_w = out_w;
        p.kernel_h = kernel_h;
        p.kernel_w = kernel_w;
        p.stride_h = stride_h;
        p.stride_w = stride_w;
        p.dilation_h = dilation_h;
        p.dilation_w = dilation_w;
        switch (flashdwc::select_bwd_filter_kernel(p, half_precision, deterministic)) {
          case flashdwc::BwdFilterKernel::kMma: return "mma";
          case flashdwc::BwdFilterKernel::kRowStream: return "rowstream";
          case flashdwc::BwdFilterKernel::kSplit: return "split";
          case flashdwc::BwdFilterKernel::kGemv: return "gemv";
          case flashdwc::BwdFilterKernel::kDirect: return "direct";
        }
        return "direct";
      },
      nb::arg("channels"), nb::arg("in_h"), nb::arg("in_w"), nb::arg("out_w"), nb::arg("kernel_h"),
      nb::arg("kernel_w"), nb::arg("stride_h"), nb::arg("stride_w"), nb::arg("dilation_h"), nb::arg("dilation_w"),
      nb::arg("half_precision"), nb::arg("deterministic") = false);
  // Bytes of the fp32 workspace the CUDA filter gradient needs; the lowering adds
  // a result of that size to the custom call, so XLA owns the memory (also inside
  // command buffers).
  m.def(
      "cuda_bwd_filter_workspace_bytes",
      // Everything the split kernel's grid reads: the fp32 tiling's rows per thread
      // depend on the strides and dilations along both axes.
      [](int64_t batch, int64_t out_h, int64_t channels, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
         int64_t stride_w, int64_t dilation_h, int64_t dilation_w, bool deterministic, bool half_precision) {
        flashdwc::DwConvParams p{};
        p.batch = batch;
        p.out_h = out_h;
        p.channels = channels;
        p.kernel_h = kernel_h;
        p.kernel_w = kernel_w;
        p.stride_h = stride_h;
        p.stride_w = stride_w;
        p.dilation_h = dilation_h;
        p.dilation_w = dilation_w;
        return flashdwc::bwd_filter_workspace_bytes(p, deterministic, half_precision);
      },
      nb::arg("batch"), nb::arg("out_h"), nb::arg("channels"), nb::arg("kernel_h"), nb::arg("kernel_w"),
      nb::arg("stride_h"), nb::arg("stride_w"), nb::arg("dilation_h"), nb::arg("dilation_w"),
      nb::arg("deterministic"), nb::arg("half_precision"));
  // (channels per thread, taps per thread, filter rows per thread) of the
  // filter-gradient split kernel at stride 1, for the dispatch tests; kernel_h 0 means
  // a square filter.
  m.def(
      "cuda_bwd_filter_tiling",
      [](int64_t kernel_w, bool half_precision, int64_t kernel_h) {
        flashdwc::DwConvParams p{};
        p.kernel_w = kernel_w;
        p.kernel_h = kernel_h > 0 ? kernel_h : kernel_w;
        p.stride_h = p.stride_w = p.dilation_h = p.dilation_w = 1;
        const flashdwc::BwdFilterTiling t = flashdwc::bwd_filter_tiling(p, half_precision);
        return std::make_tuple(t.width, t.tm, t.rows);
      },
      nb::arg("kernel_w"), nb::arg("half_precision"), nb::arg("kernel_h") = 0);
#endif
}
