// XLA FFI handlers of the 2-D convolution for the CUDA platform: decode, validate,
// launch on XLA's stream (ffi/platform_cuda.h).
#include <string>

#include "bwd_data/launch.h"
#include "bwd_filter/launch.h"
#include "ffi/dwconv_attrs.h"
#include "ffi/dwconv_ffi.h"
#include "ffi/platform_cuda.h"
#include "fwd/launch.h"

namespace flashdwc {
namespace {

// The forward and the input gradient take a byte workspace, as large as the lowering
// asked fwd_workspace_bytes / bwd_data_workspace_bytes for (one byte where nothing):
// the Hopper kernel's planar copies. XLA allocates it, also inside command buffers.
// Poisoned with the outputs in the tests, so that a planar element the transposes
// leave unwritten shows as NaN.
ffi::Error poison_workspace(const CudaPlatform& platform, ffi::Result<ffi::AnyBuffer>& workspace) {
  return poison_if_asked(platform, workspace->untyped_data(), workspace->size_bytes());
}

ffi::Error DwConvFwdCudaImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w,
                             ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> workspace,
                             ConvGeometry geometry) {
  constexpr ConvPass pass = ConvPass::kForward;
  const CudaPlatform platform{stream, pass_name(pass)};
  if (ffi::Error err = poison_workspace(platform, workspace); err.failure()) return err;
  return run_pass(platform, pass, x, w, y, geometry,
                  [&](const DwConvParams& p, auto* x, auto* w, auto* y) {
                    return run_dwconv_fwd(p, x, w, y, stream, {}, {}, workspace->untyped_data(),
                                          int64_t(workspace->size_bytes()));
                  });
}

ffi::Error DwConvFwdFusedCudaImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer bias,
                                  ffi::AnyBuffer scale, ffi::AnyBuffer shift, ffi::Result<ffi::AnyBuffer> y,
                                  ffi::Result<ffi::AnyBuffer> workspace, ConvGeometry geometry, int64_t activation,
                                  int64_t prologue) {
  FwdEpilogue epilogue;
  if (ffi::Error err = make_epilogue(x, bias, activation, &epilogue); err.failure()) return err;
  FwdPrologue input;
  if (ffi::Error err = make_prologue(x, scale, shift, prologue, &input); err.failure()) return err;
  constexpr ConvPass pass = ConvPass::kForward;
  const CudaPlatform platform{stream, pass_name(pass)};
  if (ffi::Error err = poison_workspace(platform, workspace); err.failure()) return err;
  return run_pass(platform, pass, x, w, y, geometry,
                  [&](const DwConvParams& p, auto* x, auto* w, auto* y) {
                    return run_dwconv_fwd(p, x, w, y, stream, epilogue, input, workspace->untyped_data(),
                                          int64_t(workspace->size_bytes()));
                  });
}

ffi::Error DwConvBwdDataCudaImpl(cudaStream_t stream, ffi::AnyBuffer dy, ffi::AnyBuffer w,
                                 ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> workspace,
                                 ConvGeometry geometry) {
  constexpr ConvPass pass = ConvPass::kBackwardData;
  const CudaPlatform platform{stream, pass_name(pass)};
  if (ffi::Error err = poison_workspace(platform, workspace); err.failure()) return err;
  return run_pass(platform, pass, dy, w, dx, geometry,
                  [&](const DwConvParams& p, auto* dy, auto* w, auto* dx) {
                    return run_dwconv_bwd_data(p, dy, w, dx, stream, workspace->untyped_data(),
                                               int64_t(workspace->size_bytes()));
                  });
}

ffi::Error DwConvBwdFilterCudaImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer dy,
                                   ffi::Result<ffi::AnyBuffer> dw, ffi::Result<ffi::AnyBuffer> workspace,
                                   ConvGeometry geometry, bool deterministic) {
  constexpr ConvPass pass = ConvPass::kBackwardFilter;
  const CudaPlatform platform{stream, pass_name(pass)};
  DwConvParams p;
  if (ffi::Error err = make_params(pass, x, dy, *dw, geometry, &p); err.failure()) return err;
  const int64_t needed = bwd_filter_workspace_bytes(p, deterministic, x.element_type() != ffi::DataType::F32);
  if (workspace->element_type() != ffi::DataType::F32 || int64_t(workspace->size_bytes()) < needed) {
    return ffi::Error::InvalidArgument(std::string(pass_name(pass)) + ": the workspace must be float32 of at least " +
                                       std::to_string(needed) + " bytes; got " +
                                       std::to_string(workspace->size_bytes()));
  }
  float* ws = static_cast<float*>(workspace->untyped_data());
  // Deterministic mode stores every element of every chunk's slice; poisoning it
  // too lets the tests catch one left unwritten.
  if (deterministic && needed > 0) {
    if (ffi::Error err = poison_if_asked(platform, ws, needed); err.failure()) return err;
  }
  return run_pass(platform, pass, x, dy, dw, geometry, [&](const DwConvParams& p, auto* x, auto* dy, auto* dw) {
    return run_dwconv_bwd_filter(p, x, dy, dw, ws, deterministic, stream);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DwConvFwdCudaFfi, DwConvFwdCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // stream
                                  .Arg<ffi::AnyBuffer>()                     // x
                                  .Arg<ffi::AnyBuffer>()                     // w
                                  .Ret<ffi::AnyBuffer>()                     // y
                                  .Ret<ffi::AnyBuffer>()                     // uint8 workspace
                                  .Attr<ConvGeometry>("geometry"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(DwConvFwdFusedCudaFfi, DwConvFwdFusedCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // stream
                                  .Arg<ffi::AnyBuffer>()                     // x
                                  .Arg<ffi::AnyBuffer>()                     // w
                                  .Arg<ffi::AnyBuffer>()                     // bias: (C,) or (0,)
                                  .Arg<ffi::AnyBuffer>()                     // prologue scale: (C,) float32
                                  .Arg<ffi::AnyBuffer>()                     // prologue shift: (C,) float32
                                  .Ret<ffi::AnyBuffer>()                     // y
                                  .Ret<ffi::AnyBuffer>()                     // uint8 workspace
                                  .Attr<ConvGeometry>("geometry")
                                  .Attr<int64_t>("activation")
                                  .Attr<int64_t>("prologue"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(DwConvBwdDataCudaFfi, DwConvBwdDataCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // stream
                                  .Arg<ffi::AnyBuffer>()                     // dy
                                  .Arg<ffi::AnyBuffer>()                     // w
                                  .Ret<ffi::AnyBuffer>()                     // dx
                                  .Ret<ffi::AnyBuffer>()                     // uint8 workspace
                                  .Attr<ConvGeometry>("geometry"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(DwConvBwdFilterCudaFfi, DwConvBwdFilterCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // stream
                                  .Arg<ffi::AnyBuffer>()                     // x
                                  .Arg<ffi::AnyBuffer>()                     // dy
                                  .Ret<ffi::AnyBuffer>()                     // dw
                                  .Ret<ffi::AnyBuffer>()                     // fp32 workspace
                                  .Attr<ConvGeometry>("geometry")
                                  .Attr<bool>("deterministic"),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace flashdwc
