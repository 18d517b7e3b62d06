// The native module `_jax_flashdwc`: hands the FFI handlers to Python as capsules,
// grouped by platform, with the XLA FFI API version they were compiled against, and
// exposes the output-poisoning switch used by the tests and the kernel plans.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <cstdint>
#include <string>

#include <type_traits>

#include "ffi/dwconv_attrs.h"
#ifdef FLASHDWC_WITH_CUDA
#include "bwd_filter/launch.h"
#include "common/launch.cuh"
#endif
#include "ffi/dwconv_ffi.h"
#include "ffi/conv1d_ffi.h"
#include "plan/bwd_data.h"
#include "plan/bwd_data_launch.h"
#include "plan/bwd_filter.h"
#include "plan/bwd_filter_launch.h"
#include "plan/fwd.h"
#include "plan/fwd_launch.h"
#include "plan/thresholds.h"

namespace nb = nanobind;

namespace {

template <typename T>
nb::capsule encapsulate_ffi_handler(T* fn) {
  static_assert(std::is_invocable_r_v<XLA_FFI_Error*, T, XLA_FFI_CallFrame*>,
                "Encapsulated function must be an XLA FFI handler");
  return nb::capsule(reinterpret_cast<void*>(fn));
}

// DwConvParams from a dict of its fields; fields left out are 0, except the strides
// and dilations (1) and, where only one of a pair is given, in_h/out_h and in_w/out_w
// (the same), batch (1).
flashdwc::DwConvParams params_from(const nb::dict& d) {
  auto get = [&](const char* key, int64_t fallback) {
    return d.contains(key) ? nb::cast<int64_t>(d[key]) : fallback;
  };
  const flashdwc::ConvGeometry g{get("stride_h", 1), get("stride_w", 1), get("pad_top", 0),
                                 get("pad_left", 0), get("dilation_h", 1), get("dilation_w", 1)};
  const int64_t out_h = get("out_h", get("in_h", 0)), out_w = get("out_w", get("in_w", 0));
  return flashdwc::make_dwconv_params(get("batch", 1), get("in_h", out_h), get("in_w", out_w), out_h, out_w,
                                      get("channels", 0), get("kernel_h", 1), get("kernel_w", 1), g,
                                      d.contains("flip_filter") && nb::cast<bool>(d["flip_filter"]));
}

flashdwc::DeviceLimits limits_from(const nb::object& device) {
  if (device.is_none()) {
#ifdef FLASHDWC_WITH_CUDA
    return flashdwc::device_limits();
#else
    return {};
#endif
  }
  const nb::dict d = nb::cast<nb::dict>(device);
  auto get = [&](const char* key) { return d.contains(key) ? nb::cast<int64_t>(d[key]) : int64_t(0); };
  return {get("sms"), get("smem_per_block"), get("smem_per_sm"), get("smem_reserved_per_block"), get("l2_bytes"),
          get("wgmma") != 0};
}

// A launch configuration as a dict: grid and block (x, y, z) and the dynamic shared
// memory bytes.
nb::dict launch_dict(const flashdwc::LaunchConfig& c) {
  nb::dict d;
  d["grid"] = nb::make_tuple(c.grid.x, c.grid.y, c.grid.z);
  d["block"] = nb::make_tuple(c.block.x, c.block.y, c.block.z);
  d["smem_bytes"] = c.smem_bytes;
  return d;
}

const char* status_name(flashdwc::LaunchStatus s) {
  switch (s) {
    case flashdwc::LaunchStatus::kLaunch: return "launch";
    case flashdwc::LaunchStatus::kNothing: return "nothing";
    case flashdwc::LaunchStatus::kInvalid: return "invalid";
  }
  return "invalid";
}

// The forward's launch plan as a dict: the kernel, its launch, and the tiling
// integers its launcher reads.
nb::dict fwd_launch_dict(const flashdwc::FwdLaunchPlan& plan) {
  nb::dict d = launch_dict(plan.launch);
  d["kernel"] = flashdwc::fwd_kernel_name(plan.kernel);
  d["status"] = status_name(plan.status);
  d["vec"] = plan.vec;
  d["tm"] = plan.tm;
  d["images"] = plan.images;
  switch (plan.kernel) {
    case flashdwc::FwdKernel::kGemv: d["rows_per_stage"] = plan.gemv.rows_per_stage; break;
    case flashdwc::FwdKernel::kRowStream: d["rows_per_block"] = plan.rowstream.rows_per_block; break;
    case flashdwc::FwdKernel::kStride2: d["rows_per_thread"] = plan.stride2.rows_per_thread; break;
    case flashdwc::FwdKernel::kRegFilter:
      d["rows_per_block"] = plan.regfilter.rows_per_block;
      d["row_blocks"] = plan.regfilter.row_blocks;
      d["strips"] = plan.regfilter.strips;
      d["columns"] = plan.regfilter.columns;
      d["lane_words"] = plan.regfilter.lane_words;
      break;
    case flashdwc::FwdKernel::kMma:
      d["split"] = plan.mma.split;
      d["tiles_per_block"] = plan.mma.tiles_per_block;
      d["filter_copies"] = plan.mma.filter_copies;
      d["filter_rows"] = plan.mma.filter_rows;
      d["raw_rows"] = plan.mma.raw_rows;
      break;
    case flashdwc::FwdKernel::kWgmma:
      d["rows_per_mma"] = plan.wgmma.rows_per_mma;
      d["workspace_bytes"] = plan.wgmma.workspace_bytes;
      break;
    case flashdwc::FwdKernel::kDirect: break;
  }
  return d;
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
    cpu["flashdwc_conv1d_step"] = encapsulate_ffi_handler(flashdwc::Conv1dStepCpuFfi);
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
    cuda["flashdwc_conv1d_step"] = encapsulate_ffi_handler(flashdwc::Conv1dStepCudaFfi);
    by_platform["CUDA"] = cuda;
#endif
    return by_platform;
  });
  m.def("set_poison_outputs", [](bool on) { flashdwc::poison_outputs_flag().store(on); },
        nb::arg("on"),
        "Fill every output with NaN before its kernel runs (a testing aid).");
  // The kernel plans (plan/): host code, so callable on a CPU-only build. `device`:
  // the limits to plan for (sms, smem_per_block, smem_per_sm, smem_reserved_per_block,
  // l2_bytes); absent, the current GPU's where the build has CUDA, else none (the
  // kernels that need shared memory are then never planned).
  m.def(
      "plan_fwd",
      [](nb::dict problem, bool half_precision, nb::object device) {
        return flashdwc::fwd_kernel_name(flashdwc::plan_fwd(params_from(problem), half_precision, limits_from(device)));
      },
      nb::arg("problem"), nb::arg("half_precision") = false, nb::arg("device") = nb::none(),
      "The forward kernel for a problem (a dict of DwConvParams fields).");
  m.def(
      "plan_bwd_data",
      [](nb::dict problem, bool half_precision, nb::object device) {
        return flashdwc::bwd_data_plan_name(
            flashdwc::plan_bwd_data(params_from(problem), half_precision, limits_from(device)));
      },
      nb::arg("problem"), nb::arg("half_precision") = false, nb::arg("device") = nb::none(),
      "The input gradient's kernel: 'phase', 'gather', or 'forward:KERNEL' on the rotated filter.");
  m.def(
      "plan_bwd_filter",
      [](nb::dict problem, bool half_precision, bool deterministic, nb::object device) {
        return flashdwc::bwd_filter_kernel_name(
            flashdwc::plan_bwd_filter(params_from(problem), half_precision, deterministic, limits_from(device)));
      },
      nb::arg("problem"), nb::arg("half_precision") = false, nb::arg("deterministic") = false,
      nb::arg("device") = nb::none(), "The filter gradient's kernel for a problem.");
  m.def(
      "plan_bwd_filter_tiling",
      [](nb::dict problem, bool half_precision) {
        const flashdwc::BwdFilterTiling t = flashdwc::bwd_filter_tiling(params_from(problem), half_precision);
        return std::make_tuple(t.width, t.tm, t.rows);
      },
      nb::arg("problem"), nb::arg("half_precision") = false,
      "(channels per thread, taps per thread, filter rows per thread) of the filter-gradient split kernel.");
  m.def(
      "plan_fwd_launch",
      [](nb::dict problem, bool half_precision, bool epilogue, bool prologue, nb::object device,
         int64_t workspace_bytes) {
        flashdwc::FwdCall call;
        call.half_precision = half_precision;
        call.epilogue = epilogue;
        call.prologue = prologue;
        call.workspace_bytes = workspace_bytes;
        return fwd_launch_dict(flashdwc::plan_fwd_launch(params_from(problem), call, limits_from(device)));
      },
      nb::arg("problem"), nb::arg("half_precision") = false, nb::arg("epilogue") = false,
      nb::arg("prologue") = false, nb::arg("device") = nb::none(), nb::arg("workspace_bytes") = 0,
      "The forward's launch for a problem with aligned buffers and a workspace of workspace_bytes: kernel, status, "
      "grid, block, smem_bytes and the kernel's tiling.");
  m.def(
      "plan_bwd_data_launch",
      [](nb::dict problem, bool half_precision, nb::object device, int64_t workspace_bytes) {
        flashdwc::BwdDataCall call;
        call.half_precision = half_precision;
        call.workspace_bytes = workspace_bytes;
        const flashdwc::DwConvParams p = params_from(problem);
        const flashdwc::BwdDataLaunchPlan plan = flashdwc::plan_bwd_data_launch(p, call, limits_from(device));
        if (plan.kernel == flashdwc::BwdDataKernel::kForward) {
          nb::dict d = fwd_launch_dict(plan.forward);
          d["kernel"] = std::string("forward:") + flashdwc::fwd_kernel_name(plan.forward.kernel);
          return d;
        }
        nb::dict d = launch_dict(plan.launch);
        d["kernel"] = plan.kernel == flashdwc::BwdDataKernel::kPhase ? "phase" : "gather";
        d["status"] = status_name(plan.status);
        d["vec"] = plan.vec;
        if (plan.kernel == flashdwc::BwdDataKernel::kPhase) d["rows_per_thread"] = plan.phase.rows_per_thread;
        return d;
      },
      nb::arg("problem"), nb::arg("half_precision") = false, nb::arg("device") = nb::none(),
      nb::arg("workspace_bytes") = 0,
      "The input gradient's launch for a problem with aligned buffers and a workspace of workspace_bytes.");
  m.def(
      "plan_bwd_filter_launch",
      [](nb::dict problem, bool half_precision, bool deterministic, nb::object device) {
        flashdwc::BwdFilterCall call;
        call.half_precision = half_precision;
        call.deterministic = deterministic;
        const flashdwc::BwdFilterLaunchPlan plan =
            flashdwc::plan_bwd_filter_launch(params_from(problem), call, limits_from(device));
        nb::dict d = launch_dict(plan.launch);
        d["kernel"] = flashdwc::bwd_filter_kernel_name(plan.kernel);
        d["vec"] = plan.vec;
        d["slices"] = plan.slices;
        d["finalize_grid"] = nb::make_tuple(plan.finalize.grid.x, plan.finalize.grid.y, plan.finalize.grid.z);
        switch (plan.kernel) {
          case flashdwc::BwdFilterKernel::kSplit: d["rows_per_split"] = plan.split.rows_per_split; break;
          case flashdwc::BwdFilterKernel::kGemv: d["images_per_chunk"] = plan.gemv.images_per_chunk; break;
          case flashdwc::BwdFilterKernel::kMma: d["rows_per_split"] = plan.mma.rows_per_split; break;
          case flashdwc::BwdFilterKernel::kRowStream: d["strip"] = plan.strip; break;
          case flashdwc::BwdFilterKernel::kSmall: d["steps_per_run"] = plan.small.steps_per_run; break;
          case flashdwc::BwdFilterKernel::kDirect: break;
        }
        return d;
      },
      nb::arg("problem"), nb::arg("half_precision") = false, nb::arg("deterministic") = false,
      nb::arg("device") = nb::none(),
      "The filter gradient's launch for a problem with aligned buffers; the row-stream and small-filter grids are "
      "set at launch from the kernels' occupancy, so their grid here is (1, 1, 1).");
  m.def(
      "plan_thresholds",
      []() {
        nb::dict out;
        flashdwc::for_each_threshold([&](const char* name, int64_t value) { out[name] = value; });
        return out;
      },
      "The kernel-choice thresholds of plan/thresholds.h.");
  // Bytes of workspace the forward and the input gradient want on the device (the
  // current CUDA device where `device` is None; nothing on a CPU-only build): the
  // lowering adds a result of that size to their custom calls.
  m.def(
      "fwd_workspace_bytes",
      [](const nb::dict& problem, bool half_precision, bool prologue, const nb::object& device) {
        return flashdwc::fwd_workspace_bytes(params_from(problem), half_precision, prologue, limits_from(device));
      },
      nb::arg("problem"), nb::arg("half_precision") = false, nb::arg("prologue") = false,
      nb::arg("device") = nb::none());
  m.def(
      "bwd_data_workspace_bytes",
      [](const nb::dict& problem, bool half_precision, const nb::object& device) {
        return flashdwc::bwd_data_workspace_bytes(params_from(problem), half_precision, limits_from(device));
      },
      nb::arg("problem"), nb::arg("half_precision") = false, nb::arg("device") = nb::none());
#ifdef FLASHDWC_WITH_CUDA
  // Bytes of the fp32 workspace the CUDA filter gradient needs; the lowering adds
  // a result of that size to the custom call, so XLA owns the memory (also inside
  // command buffers).
  m.def(
      "cuda_bwd_filter_workspace_bytes",
      // Everything the split kernel's grid reads: the fp32 tiling's rows per thread
      // depend on the strides and dilations along both axes.
      [](int64_t batch, int64_t out_h, int64_t channels, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
         int64_t stride_w, int64_t dilation_h, int64_t dilation_w, bool deterministic, bool half_precision) {
        const flashdwc::ConvGeometry g{stride_h, stride_w, 0, 0, dilation_h, dilation_w};
        return flashdwc::bwd_filter_workspace_bytes(
            flashdwc::make_dwconv_params(batch, 0, 0, out_h, 0, channels, kernel_h, kernel_w, g), deterministic,
            half_precision);
      },
      nb::arg("batch"), nb::arg("out_h"), nb::arg("channels"), nb::arg("kernel_h"), nb::arg("kernel_w"),
      nb::arg("stride_h"), nb::arg("stride_w"), nb::arg("dilation_h"), nb::arg("dilation_w"),
      nb::arg("deterministic"), nb::arg("half_precision"));
#endif
}
