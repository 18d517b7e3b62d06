#include "ffi/dwconv_attrs.h"

namespace flashdwc {

std::atomic<bool>& poison_outputs_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

const char* pass_name(ConvPass pass) {
  switch (pass) {
    case ConvPass::kForward: return "flashdwc_fwd";
    case ConvPass::kBackwardData: return "flashdwc_bwd_data";
    case ConvPass::kBackwardFilter: return "flashdwc_bwd_filter";
  }
  return "flashdwc";
}

namespace {

std::string dims_string(const ffi::AnyBuffer& b) {
  std::string s = "(";
  const auto dims = b.dimensions();
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + ")";
}

ffi::Error invalid(ConvPass pass, const std::string& what) {
  return ffi::Error::InvalidArgument(std::string(pass_name(pass)) + ": " + what);
}

}  // namespace

ffi::Error make_params(ConvPass pass, const ffi::AnyBuffer& a, const ffi::AnyBuffer& b,
                       const ffi::AnyBuffer& out, const ConvGeometry& g, DwConvParams* params) {
  const ffi::DataType dtype = a.element_type();
  if (dtype != ffi::DataType::F32 && dtype != ffi::DataType::F16 && dtype != ffi::DataType::BF16) {
    return invalid(pass, "unsupported element type; expected one of F32, F16, BF16");
  }
  if (b.element_type() != dtype || out.element_type() != dtype) {
    return invalid(pass, "operands and result must share one element type");
  }
  if (a.dimensions().size() != 4 || b.dimensions().size() != 4 || out.dimensions().size() != 4) {
    return invalid(pass, "expected rank-4 buffers, got " + dims_string(a) + ", " + dims_string(b) +
                             " -> " + dims_string(out));
  }
  if (g.stride_h < 1 || g.stride_w < 1 || g.dilation_h < 1 || g.dilation_w < 1) {
    return invalid(pass, "strides and dilations must be >= 1");
  }
  // Name each buffer by its role: x (N,H,W,C), y (N,Ho,Wo,C), w (KH,KW,1,C).
  const ffi::AnyBuffer* x = nullptr;
  const ffi::AnyBuffer* y = nullptr;
  const ffi::AnyBuffer* w = nullptr;
  switch (pass) {
    case ConvPass::kForward: x = &a, w = &b, y = &out; break;
    case ConvPass::kBackwardData: y = &a, w = &b, x = &out; break;
    case ConvPass::kBackwardFilter: x = &a, y = &b, w = &out; break;
  }
  const auto xd = x->dimensions(), yd = y->dimensions(), wd = w->dimensions();
  if (xd[0] != yd[0] || xd[3] != yd[3] || wd[3] != xd[3] || wd[2] != 1) {
    return invalid(pass, "inconsistent shapes: x " + dims_string(*x) + ", y " + dims_string(*y) +
                             ", w " + dims_string(*w) + "; expected (N,H,W,C), (N,Ho,Wo,C), (KH,KW,1,C)");
  }
  *params = make_dwconv_params(xd[0], xd[1], xd[2], yd[1], yd[2], xd[3], wd[0], wd[1], g);
  return ffi::Error::Success();
}

ffi::Error make_epilogue(const ffi::AnyBuffer& x, const ffi::AnyBuffer& bias, int64_t activation,
                         FwdEpilogue* epilogue) {
  constexpr ConvPass pass = ConvPass::kForward;
  if (activation < 0 || activation >= kActivationCount) {
    return invalid(pass, "activation must be in [0, " + std::to_string(kActivationCount) + "); got " +
                             std::to_string(activation));
  }
  const auto xd = x.dimensions();
  const auto bd = bias.dimensions();
  if (bd.size() != 1 || (bd[0] != 0 && (xd.size() != 4 || bd[0] != xd[3]))) {
    return invalid(pass, "bias must be (C,) or (0,); got " + dims_string(bias) + " for x " + dims_string(x));
  }
  if (bd[0] != 0 && bias.element_type() != x.element_type()) {
    return invalid(pass, "bias must have x's element type");
  }
  epilogue->bias = bd[0] != 0 ? bias.untyped_data() : nullptr;
  epilogue->activation = static_cast<Activation>(activation);
  return ffi::Error::Success();
}

ffi::Error make_prologue(const ffi::AnyBuffer& x, const ffi::AnyBuffer& scale, const ffi::AnyBuffer& shift,
                         int64_t prologue, FwdPrologue* out) {
  constexpr ConvPass pass = ConvPass::kForward;
  if (prologue < -1 || prologue >= kActivationCount) {
    return invalid(pass, "prologue must be -1 (none) or an activation in [0, " +
                             std::to_string(kActivationCount) + "); got " + std::to_string(prologue));
  }
  *out = FwdPrologue{};
  if (prologue < 0) return ffi::Error::Success();
  const auto xd = x.dimensions();
  for (const ffi::AnyBuffer* operand : {&scale, &shift}) {
    const auto d = operand->dimensions();
    if (xd.size() != 4 || d.size() != 1 || d[0] != xd[3] || operand->element_type() != ffi::DataType::F32) {
      return invalid(pass, "the prologue's scale and shift must be (C,) float32; got " + dims_string(*operand) +
                               " for x " + dims_string(x));
    }
  }
  out->scale = static_cast<const float*>(scale.untyped_data());
  out->shift = static_cast<const float*>(shift.untyped_data());
  out->activation = static_cast<Activation>(prologue);
  return ffi::Error::Success();
}

}  // namespace flashdwc
