// What the 2-D convolution's FFI handlers share, CPU and CUDA: the `geometry`
// attribute, the translation of buffer shapes into DwConvParams, and run_pass, the
// body of every handler.
#pragma once

#include <cstdint>
#include <string>

#include "common/epilogue.h"
#include "common/params.h"
#include "ffi/platform.h"
#include "xla/ffi/api/ffi.h"

namespace flashdwc {

// Which buffer plays which role in the convolution: the three passes bind
// (x, w) -> y, (dy, w) -> dx and (x, dy) -> dw.
enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

const char* pass_name(ConvPass pass);

// Checks the buffers against each other and fills `params`. `a`, `b` are the two
// operands and `out` the result, in the order of the pass's binding above.
ffi::Error make_params(ConvPass pass, const ffi::AnyBuffer& a, const ffi::AnyBuffer& b,
                       const ffi::AnyBuffer& out, const ConvGeometry& g, DwConvParams* params);

// The fused forward's epilogue from its `bias` operand ((C,), or (0,) for none) and
// `activation` attribute (epilogue.h's Activation values), checked against the conv.
ffi::Error make_epilogue(const ffi::AnyBuffer& x, const ffi::AnyBuffer& bias, int64_t activation,
                         FwdEpilogue* epilogue);

// The fused forward's prologue from its `scale` and `shift` operands ((C,) float32)
// and `prologue` attribute: -1 for none (the operands are then ignored), else the
// Activation applied after the scale and shift.
ffi::Error make_prologue(const ffi::AnyBuffer& x, const ffi::AnyBuffer& scale, const ffi::AnyBuffer& shift,
                         int64_t prologue, FwdPrologue* out);

// A handler's body: the params from the buffers, nothing to do for an empty output,
// the output poisoned where the tests ask, then run(p, a, b, out) with pointers of
// the platform's element type, through platform.finish.
template <typename Platform, typename Run>
ffi::Error run_pass(const Platform& platform, ConvPass pass, const ffi::AnyBuffer& a, const ffi::AnyBuffer& b,
                    ffi::Result<ffi::AnyBuffer>& out, const ConvGeometry& geometry, Run&& run) {
  DwConvParams p;
  if (ffi::Error err = make_params(pass, a, b, *out, geometry, &p); err.failure()) return err;
  if (out->element_count() == 0) return ffi::Error::Success();
  if (ffi::Error err = poison_if_asked(platform, out->untyped_data(), out->size_bytes()); err.failure()) return err;
  return with_element_type<Platform>(a.element_type(), [&](auto tag) {
    using T = decltype(tag);
    return platform.finish([&] {
      return run(p, static_cast<const T*>(a.untyped_data()), static_cast<const T*>(b.untyped_data()),
                 static_cast<T*>(out->untyped_data()));
    });
  });
}

}  // namespace flashdwc

// ConvGeometry (common/params.h) from the `geometry` dictionary attribute written by
// jax_flashdwc/ops.py.
XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(flashdwc::ConvGeometry,
                                      ::xla::ffi::StructMember<int64_t>("stride_h"),
                                      ::xla::ffi::StructMember<int64_t>("stride_w"),
                                      ::xla::ffi::StructMember<int64_t>("pad_top"),
                                      ::xla::ffi::StructMember<int64_t>("pad_left"),
                                      ::xla::ffi::StructMember<int64_t>("dilation_h"),
                                      ::xla::ffi::StructMember<int64_t>("dilation_w"));
