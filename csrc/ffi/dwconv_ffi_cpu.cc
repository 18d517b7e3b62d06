// XLA FFI handlers of the 2-D convolution for the CPU platform.
#include "cpu/dwconv_cpu.h"
#include "ffi/dwconv_attrs.h"
#include "ffi/dwconv_ffi.h"
#include "ffi/platform.h"

namespace flashdwc {
namespace {

ffi::Error DwConvFwdCpuImpl(ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> y,
                            ConvGeometry geometry) {
  return run_pass(CpuPlatform{}, ConvPass::kForward, x, w, y, geometry,
                  [](const DwConvParams& p, auto* x, auto* w, auto* y) { dwconv_fwd_cpu(p, x, w, y); });
}

ffi::Error DwConvFwdFusedCpuImpl(ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer bias, ffi::AnyBuffer scale,
                                 ffi::AnyBuffer shift, ffi::Result<ffi::AnyBuffer> y, ConvGeometry geometry,
                                 int64_t activation, int64_t prologue) {
  FwdEpilogue epilogue;
  if (ffi::Error err = make_epilogue(x, bias, activation, &epilogue); err.failure()) return err;
  FwdPrologue input;
  if (ffi::Error err = make_prologue(x, scale, shift, prologue, &input); err.failure()) return err;
  return run_pass(CpuPlatform{}, ConvPass::kForward, x, w, y, geometry,
                  [&](const DwConvParams& p, auto* x, auto* w, auto* y) {
                    dwconv_fwd_cpu(p, x, w, y, epilogue, input);
                  });
}

ffi::Error DwConvBwdDataCpuImpl(ffi::AnyBuffer dy, ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> dx,
                                ConvGeometry geometry) {
  return run_pass(CpuPlatform{}, ConvPass::kBackwardData, dy, w, dx, geometry,
                  [](const DwConvParams& p, auto* dy, auto* w, auto* dx) { dwconv_bwd_data_cpu(p, dy, w, dx); });
}

ffi::Error DwConvBwdFilterCpuImpl(ffi::AnyBuffer x, ffi::AnyBuffer dy, ffi::Result<ffi::AnyBuffer> dw,
                                  ConvGeometry geometry) {
  return run_pass(CpuPlatform{}, ConvPass::kBackwardFilter, x, dy, dw, geometry,
                  [](const DwConvParams& p, auto* x, auto* dy, auto* dw) { dwconv_bwd_filter_cpu(p, x, dy, dw); });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DwConvFwdCpuFfi, DwConvFwdCpuImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()                 // x
                                  .Arg<ffi::AnyBuffer>()                 // w
                                  .Ret<ffi::AnyBuffer>()                 // y
                                  .Attr<ConvGeometry>("geometry"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(DwConvFwdFusedCpuFfi, DwConvFwdFusedCpuImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()                 // x
                                  .Arg<ffi::AnyBuffer>()                 // w
                                  .Arg<ffi::AnyBuffer>()                 // bias: (C,) or (0,)
                                  .Arg<ffi::AnyBuffer>()                 // prologue scale: (C,) float32
                                  .Arg<ffi::AnyBuffer>()                 // prologue shift: (C,) float32
                                  .Ret<ffi::AnyBuffer>()                 // y
                                  .Attr<ConvGeometry>("geometry")
                                  .Attr<int64_t>("activation")
                                  .Attr<int64_t>("prologue"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(DwConvBwdDataCpuFfi, DwConvBwdDataCpuImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()                 // dy
                                  .Arg<ffi::AnyBuffer>()                 // w
                                  .Ret<ffi::AnyBuffer>()                 // dx
                                  .Attr<ConvGeometry>("geometry"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(DwConvBwdFilterCpuFfi, DwConvBwdFilterCpuImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()                 // x
                                  .Arg<ffi::AnyBuffer>()                 // dy
                                  .Ret<ffi::AnyBuffer>()                 // dw
                                  .Attr<ConvGeometry>("geometry"));

}  // namespace flashdwc
