// The 1-D convolution's XLA FFI handler symbols (module.cc registers them) and the
// decoding of their buffers into Conv1dParams, shared by the CPU and CUDA handlers.
#pragma once

#include <string>

#include "conv1d/conv1d_params.h"
#include "ffi/dwconv_attrs.h"
#include "ffi/platform.h"
#include "xla/ffi/api/ffi.h"

namespace flashdwc {

XLA_FFI_DECLARE_HANDLER_SYMBOL(Conv1dFwdCpuFfi);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Conv1dBwdCpuFfi);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Conv1dStepCpuFfi);
#ifdef FLASHDWC_WITH_CUDA
XLA_FFI_DECLARE_HANDLER_SYMBOL(Conv1dFwdCudaFfi);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Conv1dBwdCudaFfi);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Conv1dStepCudaFfi);
#endif

// A buffer's data, or null where it is empty (no bias, no segment ids, no state).
template <typename T>
const T* data_or_null(const ffi::AnyBuffer& b) {
  return b.element_count() ? static_cast<const T*>(b.untyped_data()) : nullptr;
}

// The backward pass's four outputs poisoned where the tests ask (ffi/platform.h).
template <typename Platform>
ffi::Error poison_conv1d_gradients(const Platform& platform, ffi::Result<ffi::AnyBuffer>& dx,
                                   ffi::Result<ffi::AnyBuffer>& dstate, ffi::Result<ffi::AnyBuffer>& dw_part,
                                   ffi::Result<ffi::AnyBuffer>& db_part) {
  for (ffi::Result<ffi::AnyBuffer>* out : {&dx, &dstate, &dw_part, &db_part}) {
    if (ffi::Error e = poison_if_asked(platform, (*out)->untyped_data(), (*out)->size_bytes()); e.failure()) {
      return e;
    }
  }
  return ffi::Error::Success();
}

inline ffi::Error conv1d_invalid(const char* pass, const std::string& what) {
  return ffi::Error::InvalidArgument(std::string(pass) + ": " + what);
}

// The forward's result y against x: the same shape and type.
inline ffi::Error check_conv1d_fwd_result(const char* pass, const ffi::AnyBuffer& x, ffi::Result<ffi::AnyBuffer>& y) {
  if (y->element_count() != x.element_count() || y->element_type() != x.element_type()) {
    return conv1d_invalid(pass, "y must have x's shape and type");
  }
  return ffi::Error::Success();
}

// The backward's dy and results against x, the state and p's chunks: dy and dx x's
// shape and type, dstate the state's size, the float32 partials (N * chunks, K, C) and
// (N * chunks, C).
inline ffi::Error check_conv1d_bwd_buffers(const char* pass, Conv1dParams& p, const ffi::AnyBuffer& x,
                                           const ffi::AnyBuffer& state, const ffi::AnyBuffer& dy,
                                           ffi::Result<ffi::AnyBuffer>& dx, ffi::Result<ffi::AnyBuffer>& dstate,
                                           ffi::Result<ffi::AnyBuffer>& dw_part,
                                           ffi::Result<ffi::AnyBuffer>& db_part) {
  // Partials of no elements ask for the input gradient alone.
  p.filter_grad = dw_part->element_count() != 0 || db_part->element_count() != 0;
  const size_t parts = p.filter_grad ? size_t(p.batch * p.chunks_per_row()) : 0;
  if (dy.element_count() != x.element_count() || dy.element_type() != x.element_type() ||
      dx->element_count() != x.element_count() || dx->element_type() != x.element_type() ||
      dstate->element_count() != state.element_count() ||
      dw_part->element_count() != parts * p.kernel_size * p.channels || db_part->element_count() != parts * p.channels ||
      dw_part->element_type() != ffi::DataType::F32 || db_part->element_type() != ffi::DataType::F32) {
    return conv1d_invalid(pass, "dy, dx must match x, dstate the state, the partials (N * chunks, K, C) and "
                                "(N * chunks, C) float32, or both empty for the input gradient alone");
  }
  return ffi::Error::Success();
}

// Checks x (N, L, C), w (K, 1, C), bias (C,) or (0,), seg (N, L) int32 or (0,), state
// (N, S, C) or (N, 0, C) and the attributes against each other; fills `p`.
inline ffi::Error make_conv1d_params(const char* pass, const ffi::AnyBuffer& x, const ffi::AnyBuffer& w,
                                     const ffi::AnyBuffer& bias, const ffi::AnyBuffer& seg,
                                     const ffi::AnyBuffer& state, int64_t pad_lo, int64_t dilation,
                                     int64_t activation, int64_t chunk, Conv1dParams* p) {
  const ffi::DataType dt = x.element_type();
  if (dt != ffi::DataType::F32 && dt != ffi::DataType::F16 && dt != ffi::DataType::BF16) {
    return conv1d_invalid(pass, "x must be F32, F16 or BF16");
  }
  const auto xd = x.dimensions(), wd = w.dimensions(), sd = state.dimensions();
  if (xd.size() != 3 || wd.size() != 3 || wd[1] != 1 || wd[2] != xd[2] || w.element_type() != dt) {
    return conv1d_invalid(pass, "x must be (N, L, C) and w (K, 1, C) of x's type");
  }
  p->batch = xd[0];
  p->length = xd[1];
  p->channels = xd[2];
  p->kernel_size = wd[0];
  p->dilation = dilation;
  p->pad_lo = pad_lo;
  p->chunk = chunk;
  const int64_t span = dilation * (p->kernel_size - 1);
  if (p->kernel_size < 1 || dilation < 1 || pad_lo < 0 || pad_lo > span || chunk < 1) {
    return conv1d_invalid(pass, "need K >= 1, dilation >= 1, 0 <= pad_lo <= dilation * (K - 1), chunk >= 1");
  }
  if (activation < 0 || activation >= kActivationCount) return conv1d_invalid(pass, "unknown activation");
  p->activation = static_cast<Activation>(activation);
  p->has_bias = bias.element_count() > 0;
  if (p->has_bias && (bias.element_count() != size_t(p->channels) || bias.element_type() != dt)) {
    return conv1d_invalid(pass, "bias must be (C,) of x's type or empty");
  }
  p->has_seg = seg.element_count() > 0;
  if (p->has_seg && (seg.element_count() != size_t(p->batch * p->length) || seg.element_type() != ffi::DataType::S32)) {
    return conv1d_invalid(pass, "segment ids must be (N, L) int32 or empty");
  }
  if (sd.size() != 3 || sd[0] != p->batch || sd[2] != p->channels || state.element_type() != dt ||
      (sd[1] != 0 && (sd[1] != span || pad_lo != span))) {
    return conv1d_invalid(pass, "state must be (N, dilation * (K - 1), C) of x's type with causal padding, or "
                                "(N, 0, C)");
  }
  p->state_len = sd[1];
  return ffi::Error::Success();
}

// The decoding step's buffers: x_t (N, C), state (N, K - 1, C), w (K, 1, C), bias
// (C,) or (0,), all of x_t's type, and its results y (N, C) and new_state (the
// state's shape and type; it may be the state's own buffer). Fills `p` as a
// length-1 causal problem whose state holds the K - 1 earlier inputs.
inline ffi::Error make_conv1d_step_params(const char* pass, const ffi::AnyBuffer& x, const ffi::AnyBuffer& state,
                                          const ffi::AnyBuffer& w, const ffi::AnyBuffer& bias, int64_t activation,
                                          ffi::Result<ffi::AnyBuffer>& y, ffi::Result<ffi::AnyBuffer>& new_state,
                                          Conv1dParams* p) {
  const ffi::DataType dt = x.element_type();
  if (dt != ffi::DataType::F32 && dt != ffi::DataType::F16 && dt != ffi::DataType::BF16) {
    return conv1d_invalid(pass, "x_t must be F32, F16 or BF16");
  }
  const auto xd = x.dimensions(), wd = w.dimensions(), sd = state.dimensions();
  if (xd.size() != 2 || wd.size() != 3 || wd[0] < 1 || wd[1] != 1 || wd[2] != xd[1] || w.element_type() != dt) {
    return conv1d_invalid(pass, "x_t must be (N, C) and w (K, 1, C) of x_t's type");
  }
  if (sd.size() != 3 || sd[0] != xd[0] || sd[1] != wd[0] - 1 || sd[2] != xd[1] || state.element_type() != dt) {
    return conv1d_invalid(pass, "state must be (N, K - 1, C) of x_t's type");
  }
  if (activation < 0 || activation >= kActivationCount) return conv1d_invalid(pass, "unknown activation");
  *p = Conv1dParams{};
  p->batch = xd[0];
  p->length = 1;
  p->channels = xd[1];
  p->kernel_size = wd[0];
  p->dilation = 1;
  p->pad_lo = p->state_len = wd[0] - 1;
  p->chunk = 1;
  p->activation = static_cast<Activation>(activation);
  p->has_bias = bias.element_count() > 0;
  p->has_seg = false;
  if (p->has_bias && (bias.element_count() != size_t(p->channels) || bias.element_type() != dt)) {
    return conv1d_invalid(pass, "bias must be (C,) of x_t's type or empty");
  }
  if (y->element_count() != x.element_count() || y->element_type() != dt ||
      new_state->element_count() != state.element_count() || new_state->element_type() != dt) {
    return conv1d_invalid(pass, "y must match x_t and new_state the state");
  }
  return ffi::Error::Success();
}

// The step's results poisoned where the tests ask, except a new state that is the
// state's own buffer (the step reads it).
template <typename Platform>
ffi::Error poison_conv1d_step(const Platform& platform, const ffi::AnyBuffer& state, ffi::Result<ffi::AnyBuffer>& y,
                              ffi::Result<ffi::AnyBuffer>& new_state) {
  if (ffi::Error e = poison_if_asked(platform, y->untyped_data(), y->size_bytes()); e.failure()) return e;
  if (new_state->untyped_data() == state.untyped_data()) return ffi::Error::Success();
  return poison_if_asked(platform, new_state->untyped_data(), new_state->size_bytes());
}

}  // namespace flashdwc
