// The forward pass's optional fused elementwise work, applied by every forward
// kernel (CPU and CUDA alike) so that it costs no extra pass over memory:
// - the epilogue, y = act(conv + bias), as each output is stored;
// - the prologue, x' = act(x * scale + shift) per channel, as each input is read
//   (the paper's BN + Act + DWC, section 5.2: a folded batch norm and its
//   activation ahead of the convolution, without writing x').
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.h"

namespace flashdwc {

// Values of the `activation` attribute (jax_flashdwc/conv.py ACTIVATIONS).
enum class Activation : int32_t { kNone = 0, kRelu = 1, kGelu = 2, kGeluTanh = 3, kSilu = 4 };
constexpr int32_t kActivationCount = 5;

// act(z) in fp32, as jax.nn.relu, gelu(approximate=False), gelu(approximate=True), silu.
FLASHDWC_HOST_DEVICE inline float apply_activation(Activation act, float z) {
  switch (act) {
    case Activation::kRelu: return z > 0.0f ? z : 0.0f;
    case Activation::kGelu: return 0.5f * z * (1.0f + erff(z * 0.70710678118654752f));
    case Activation::kGeluTanh:
      return 0.5f * z * (1.0f + tanhf(0.79788456080286536f * (z + 0.044715f * z * z * z)));
    case Activation::kSilu: return z / (1.0f + expf(-z));
    case Activation::kNone: break;
  }
  return z;
}

// What the forward kernels apply as they store: y = activation(conv + bias). `bias`
// is (C,) in the conv's element type, or null. The default leaves the conv as is.
// A kernel argument of its own rather than part of DwConvParams: growing the params
// struct cost the tensor-core kernel 12 bytes of register spill.
struct FwdEpilogue {
  const void* bias = nullptr;
  Activation activation = Activation::kNone;

  FLASHDWC_HOST_DEVICE bool active() const { return bias != nullptr || activation != Activation::kNone; }
};

// What the forward kernels apply to every input element inside the image as they
// read it: x' = activation(x * scale + shift), with `scale` and `shift` (C,) fp32.
// Zero padding stays zero, as in conv(x') with x' materialized. `scale` null: none.
struct FwdPrologue {
  const float* scale = nullptr;
  const float* shift = nullptr;
  Activation activation = Activation::kNone;

  FLASHDWC_HOST_DEVICE bool active() const { return scale != nullptr; }
  // x' for an input value of channel c, from the channel's scale and shift wherever
  // a kernel keeps them (here in global memory; the GEMV kernel holds them in registers).
  FLASHDWC_HOST_DEVICE static float transform(Activation activation, float v, float scale, float shift) {
    return apply_activation(activation, v * scale + shift);
  }
  FLASHDWC_HOST_DEVICE float apply(int64_t c, float v) const { return transform(activation, v, scale[c], shift[c]); }
#ifdef __CUDACC__
  // transform() for the CUDA kernels' load loops, which apply it at every input
  // element they read: none and relu inline, the others through one out-of-line
  // call. With all four activations inlined at each element, the GEMV kernels with
  // the prologue were 4x the code of those without (340 against 80 KB of SASS,
  // bf16 stride 1) and the fused bf16 k = 3 forward took 8.75 ms on 128x128x128x128
  // where conv after XLA's elementwise pass took 0.69 (H200, bench_dwconv.py
  // fwd_bn_relu against fwd_bn_relu_unfused).
  __device__ static float transform_compact(Activation activation, float v, float scale, float shift) {
    const float z = v * scale + shift;
    if (activation == Activation::kNone) return z;
    if (activation == Activation::kRelu) return z > 0.0f ? z : 0.0f;
    return apply_activation_out_of_line(activation, z);
  }

 private:
  __device__ __noinline__ static float apply_activation_out_of_line(Activation activation, float z) {
    return apply_activation(activation, z);
  }
#endif
};

#ifdef __CUDACC__
// The prologue's scale and shift for kWidth consecutive channels of one thread, held
// in registers for a whole pass instead of read from global memory at every element.
template <int kWidth>
struct ChannelAffine {
  float scale[kWidth];
  float shift[kWidth];
  Activation activation;
  // Channels [c0, c0 + kWidth); those >= C get 0 and 0, which every activation keeps
  // at 0.
  __device__ __forceinline__ void load(const FwdPrologue& prologue, int64_t c0, int64_t channels) {
    activation = prologue.activation;
#pragma unroll
    for (int i = 0; i < kWidth; ++i) {
      const bool ok = c0 + i < channels;
      scale[i] = ok ? prologue.scale[c0 + i] : 0.0f;
      shift[i] = ok ? prologue.shift[c0 + i] : 0.0f;
    }
  }
  __device__ __forceinline__ float apply(int i, float v) const {
    return FwdPrologue::transform_compact(activation, v, scale[i], shift[i]);
  }
};
#endif

}  // namespace flashdwc
