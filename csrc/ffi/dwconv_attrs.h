// What the FFI handlers share: the `geometry` attribute, the output-poisoning
// switch for tests, and the translation of buffer shapes into DwConvParams.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "common/epilogue.h"
#include "common/params.h"
#include "xla/ffi/api/ffi.h"

namespace flashdwc {

namespace ffi = xla::ffi;

// When set, every handler fills its output with NaN bit patterns (all bytes 0xFF)
// before its kernel runs, so that an element the kernel fails to write shows up in
// tests. Off by default; costs one memset when on.
std::atomic<bool>& poison_outputs_flag();

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
