// XLA FFI handlers of the 1-D convolution for the CPU platform.
#include "conv1d/conv1d_cpu.h"
#include "ffi/conv1d_ffi.h"
#include "ffi/platform.h"

namespace flashdwc {
namespace {

ffi::Error Conv1dFwdCpuImpl(ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer bias, ffi::AnyBuffer seg,
                            ffi::AnyBuffer state, ffi::Result<ffi::AnyBuffer> y, int64_t pad_lo, int64_t dilation,
                            int64_t activation) {
  Conv1dParams p;
  if (ffi::Error e = make_conv1d_params("flashdwc_conv1d_fwd", x, w, bias, seg, state, pad_lo, dilation,
                                        activation, 1, &p);
      e.failure()) {
    return e;
  }
  if (ffi::Error e = check_conv1d_fwd_result("flashdwc_conv1d_fwd", x, y); e.failure()) return e;
  if (y->element_count() == 0) return ffi::Error::Success();
  const CpuPlatform platform;
  if (ffi::Error e = poison_if_asked(platform, y->untyped_data(), y->size_bytes()); e.failure()) return e;
  return with_element_type<CpuPlatform>(x.element_type(), [&](auto tag) {
    using T = decltype(tag);
    return platform.finish([&] {
      conv1d_fwd_cpu<T>(p, data_or_null<T>(x), data_or_null<T>(w), data_or_null<T>(bias), data_or_null<int32_t>(seg), data_or_null<T>(state),
                        static_cast<T*>(y->untyped_data()));
    });
  });
}

ffi::Error Conv1dBwdCpuImpl(ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer bias, ffi::AnyBuffer seg,
                            ffi::AnyBuffer state, ffi::AnyBuffer dy, ffi::Result<ffi::AnyBuffer> dx,
                            ffi::Result<ffi::AnyBuffer> dstate, ffi::Result<ffi::AnyBuffer> dw_part,
                            ffi::Result<ffi::AnyBuffer> db_part, int64_t pad_lo, int64_t dilation,
                            int64_t activation, int64_t chunk) {
  const char* pass = "flashdwc_conv1d_bwd";
  Conv1dParams p;
  if (ffi::Error e = make_conv1d_params(pass, x, w, bias, seg, state, pad_lo, dilation, activation, chunk, &p);
      e.failure()) {
    return e;
  }
  if (ffi::Error e = check_conv1d_bwd_buffers(pass, p, x, state, dy, dx, dstate, dw_part, db_part); e.failure()) {
    return e;
  }
  if (x.element_count() == 0) return ffi::Error::Success();
  const CpuPlatform platform;
  if (ffi::Error e = poison_conv1d_gradients(platform, dx, dstate, dw_part, db_part); e.failure()) return e;
  return with_element_type<CpuPlatform>(x.element_type(), [&](auto tag) {
    using T = decltype(tag);
    return platform.finish([&] {
      conv1d_bwd_cpu<T>(p, data_or_null<T>(x), data_or_null<T>(w), data_or_null<T>(bias), data_or_null<int32_t>(seg), data_or_null<T>(state), data_or_null<T>(dy),
                        static_cast<T*>(dx->untyped_data()), static_cast<T*>(dstate->untyped_data()),
                        static_cast<float*>(dw_part->untyped_data()), static_cast<float*>(db_part->untyped_data()));
    });
  });
}

ffi::Error Conv1dStepCpuImpl(ffi::AnyBuffer x, ffi::AnyBuffer state, ffi::AnyBuffer w, ffi::AnyBuffer bias,
                             ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> new_state, int64_t activation) {
  const char* pass = "flashdwc_conv1d_step";
  Conv1dParams p;
  if (ffi::Error e = make_conv1d_step_params(pass, x, state, w, bias, activation, y, new_state, &p); e.failure()) {
    return e;
  }
  if (y->element_count() == 0) return ffi::Error::Success();
  const CpuPlatform platform;
  if (ffi::Error e = poison_conv1d_step(platform, state, y, new_state); e.failure()) return e;
  return with_element_type<CpuPlatform>(x.element_type(), [&](auto tag) {
    using T = decltype(tag);
    return platform.finish([&] {
      conv1d_step_cpu<T>(p, data_or_null<T>(x), data_or_null<T>(w), data_or_null<T>(bias), data_or_null<T>(state),
                         static_cast<T*>(y->untyped_data()), static_cast<T*>(new_state->untyped_data()));
    });
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(Conv1dFwdCpuFfi, Conv1dFwdCpuImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x (N, L, C)
                                  .Arg<ffi::AnyBuffer>()  // w (K, 1, C)
                                  .Arg<ffi::AnyBuffer>()  // bias (C,) or (0,)
                                  .Arg<ffi::AnyBuffer>()  // segment ids (N, L) int32 or (0,)
                                  .Arg<ffi::AnyBuffer>()  // initial state (N, S, C) or (N, 0, C)
                                  .Ret<ffi::AnyBuffer>()  // y (N, L, C)
                                  .Attr<int64_t>("pad_lo")
                                  .Attr<int64_t>("dilation")
                                  .Attr<int64_t>("activation"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(Conv1dBwdCpuFfi, Conv1dBwdCpuImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // w
                                  .Arg<ffi::AnyBuffer>()  // bias
                                  .Arg<ffi::AnyBuffer>()  // segment ids
                                  .Arg<ffi::AnyBuffer>()  // initial state
                                  .Arg<ffi::AnyBuffer>()  // dy (N, L, C)
                                  .Ret<ffi::AnyBuffer>()  // dx (N, L, C)
                                  .Ret<ffi::AnyBuffer>()  // d initial state
                                  .Ret<ffi::AnyBuffer>()  // dw partials (N * chunks, K, C) float32
                                  .Ret<ffi::AnyBuffer>()  // dbias partials (N * chunks, C) float32
                                  .Attr<int64_t>("pad_lo")
                                  .Attr<int64_t>("dilation")
                                  .Attr<int64_t>("activation")
                                  .Attr<int64_t>("chunk"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(Conv1dStepCpuFfi, Conv1dStepCpuImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x_t (N, C)
                                  .Arg<ffi::AnyBuffer>()  // state (N, K - 1, C)
                                  .Arg<ffi::AnyBuffer>()  // w (K, 1, C)
                                  .Arg<ffi::AnyBuffer>()  // bias (C,) or (0,)
                                  .Ret<ffi::AnyBuffer>()  // y (N, C)
                                  .Ret<ffi::AnyBuffer>()  // new state (N, K - 1, C), aliased to the state
                                  .Attr<int64_t>("activation"));

}  // namespace flashdwc
