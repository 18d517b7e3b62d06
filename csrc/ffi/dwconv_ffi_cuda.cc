// XLA FFI handlers for the CUDA platform: decode, validate, launch on XLA's stream.
// No host synchronization and no host allocation, so the handlers are safe to
// capture into command buffers (CUDA graphs).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "fwd/launch.h"
#include "bwd_data/launch.h"
#include "bwd_filter/launch.h"
#include "ffi/dwconv_attrs.h"
#include "ffi/dwconv_ffi.h"

namespace flashdwc {
namespace {

ffi::Error cuda_error(ConvPass pass, cudaError_t err) {
  return ffi::Error::Internal(std::string(pass_name(pass)) + ": CUDA error " + cudaGetErrorName(err) +
                              ": " + cudaGetErrorString(err));
}

template <typename Fn>
ffi::Error dispatch_cuda(ConvPass pass, cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b,
                         ffi::Result<ffi::AnyBuffer> out, ConvGeometry geometry, Fn&& run) {
  DwConvParams p;
  if (ffi::Error err = make_params(pass, a, b, *out, geometry, &p); err.failure()) return err;
  if (out->element_count() == 0) return ffi::Error::Success();
  if (poison_outputs_flag().load(std::memory_order_relaxed)) {
    if (cudaError_t err = cudaMemsetAsync(out->untyped_data(), 0xFF, out->size_bytes(), stream);
        err != cudaSuccess) {
      return cuda_error(pass, err);
    }
  }
  void* o = out->untyped_data();
  const void* ap = a.untyped_data();
  const void* bp = b.untyped_data();
  cudaError_t err = cudaSuccess;
  switch (a.element_type()) {
    case ffi::DataType::F32:
      err = run(p, static_cast<const float*>(ap), static_cast<const float*>(bp), static_cast<float*>(o), stream);
      break;
    case ffi::DataType::F16:
      err = run(p, static_cast<const __half*>(ap), static_cast<const __half*>(bp), static_cast<__half*>(o), stream);
      break;
    case ffi::DataType::BF16:
      err = run(p, static_cast<const __nv_bfloat16*>(ap), static_cast<const __nv_bfloat16*>(bp),
                static_cast<__nv_bfloat16*>(o), stream);
      break;
    default:
      return ffi::Error::InvalidArgument("unreachable: element type checked in make_params");
  }
  return err == cudaSuccess ? ffi::Error::Success() : cuda_error(pass, err);
}

ffi::Error DwConvFwdCudaImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w,
                             ffi::Result<ffi::AnyBuffer> y, ConvGeometry geometry) {
  return dispatch_cuda(ConvPass::kForward, stream, x, w, y, geometry,
                       [](const DwConvParams& p, auto* x, auto* w, auto* y, cudaStream_t s) {
                         return run_dwconv_fwd(p, x, w, y, s);
                       });
}

ffi::Error DwConvFwdFusedCudaImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer bias,
                                  ffi::AnyBuffer scale, ffi::AnyBuffer shift, ffi::Result<ffi::AnyBuffer> y,
                                  ConvGeometry geometry, int64_t activation, int64_t prologue) {
  FwdEpilogue epilogue;
  if (ffi::Error err = make_epilogue(x, bias, activation, &epilogue); err.failure()) return err;
  FwdPrologue input;
  if (ffi::Error err = make_prologue(x, scale, shift, prologue, &input); err.failure()) return err;
  return dispatch_cuda(ConvPass::kForward, stream, x, w, y, geometry,
                       [epilogue, input](const DwConvParams& p, auto* x, auto* w, auto* y, cudaStream_t s) {
                         return run_dwconv_fwd(p, x, w, y, s, epilogue, input);
                       });
}

ffi::Error DwConvBwdDataCudaImpl(cudaStream_t stream, ffi::AnyBuffer dy, ffi::AnyBuffer w,
                                 ffi::Result<ffi::AnyBuffer> dx, ConvGeometry geometry) {
  return dispatch_cuda(ConvPass::kBackwardData, stream, dy, w, dx, geometry,
                       [](const DwConvParams& p, auto* dy, auto* w, auto* dx, cudaStream_t s) {
                         return run_dwconv_bwd_data(p, dy, w, dx, s);
                       });
}

ffi::Error DwConvBwdFilterCudaImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer dy,
                                   ffi::Result<ffi::AnyBuffer> dw, ffi::Result<ffi::AnyBuffer> workspace,
                                   ConvGeometry geometry, bool deterministic) {
  DwConvParams p;
  if (ffi::Error err = make_params(ConvPass::kBackwardFilter, x, dy, *dw, geometry, &p); err.failure()) {
    return err;
  }
  const int64_t needed = bwd_filter_workspace_bytes(p, deterministic, x.element_type() != ffi::DataType::F32);
  if (workspace->element_type() != ffi::DataType::F32 || int64_t(workspace->size_bytes()) < needed) {
    return ffi::Error::InvalidArgument(std::string(pass_name(ConvPass::kBackwardFilter)) +
                                       ": the workspace must be float32 of at least " + std::to_string(needed) +
                                       " bytes; got " + std::to_string(workspace->size_bytes()));
  }
  float* ws = static_cast<float*>(workspace->untyped_data());
  // Deterministic mode stores every element of every chunk's slice; poisoning it
  // too lets the tests catch one left unwritten.
  if (deterministic && needed > 0 && poison_outputs_flag().load(std::memory_order_relaxed)) {
    if (cudaError_t err = cudaMemsetAsync(ws, 0xFF, needed, stream); err != cudaSuccess) {
      return cuda_error(ConvPass::kBackwardFilter, err);
    }
  }
  return dispatch_cuda(ConvPass::kBackwardFilter, stream, x, dy, dw, geometry,
                       [ws, deterministic](const DwConvParams& p, auto* x, auto* dy, auto* dw, cudaStream_t s) {
                         return run_dwconv_bwd_filter(p, x, dy, dw, ws, deterministic, s);
                       });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DwConvFwdCudaFfi, DwConvFwdCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()  // stream
                                  .Arg<ffi::AnyBuffer>()                     // x
                                  .Arg<ffi::AnyBuffer>()                     // w
                                  .Ret<ffi::AnyBuffer>()                     // y
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
