// The shape of one depthwise 1-D convolution as the 1-D kernels see it, and the
// activations' derivatives their backward pass recomputes.
//
// x, y, dy, dx: (N, L, C) channel-last; w: (K, 1, C); bias: (C,) or absent;
// seg: (N, L) int32 or absent; state: (N, S, C) with S = dilation * (K - 1), or
// absent (zeros). Output t reads input t - pad_lo + k * dilation (k < K): the
// kernels take stride 1 and one output per input (pad_lo + pad_hi = S), the
// problems that segment_ids need; Python routes everything else elsewhere.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/epilogue.h"

namespace flashdwc {

struct Conv1dParams {
  int64_t batch, length, channels;
  int64_t kernel_size, dilation, pad_lo;
  // Rows of the initial state: S when one is given (then pad_lo == S), else 0.
  int64_t state_len;
  // Positions per block of the backward pass: its partial filter gradients are
  // (N * ceil(L / chunk), K, C) float32, summed afterwards in a fixed order.
  int64_t chunk;
  bool has_bias, has_seg;
  Activation activation;
  // Whether the backward pass writes the filter and bias partials: false when its
  // caller asked for the input gradient alone (partial buffers of no elements), which
  // spares the kernels 2K + 1 multiply-adds an element and the partials' reduction.
  bool filter_grad = true;

  FLASHDWC_HOST_DEVICE int64_t chunks_per_row() const { return (length + chunk - 1) / chunk; }
};

// d act / dz at z, in float32, for each Activation (epilogue.h's definitions).
FLASHDWC_HOST_DEVICE inline float activation_grad(Activation act, float z) {
  switch (act) {
    case Activation::kRelu: return z > 0.0f ? 1.0f : 0.0f;
    case Activation::kGelu: {
      const float cdf = 0.5f * (1.0f + erff(z * 0.70710678118654752f));
      return cdf + z * 0.39894228040143268f * expf(-0.5f * z * z);
    }
    case Activation::kGeluTanh: {
      const float u = 0.79788456080286536f * (z + 0.044715f * z * z * z);
      const float th = tanhf(u);
      const float du = 0.79788456080286536f * (1.0f + 3.0f * 0.044715f * z * z);
      return 0.5f * (1.0f + th) + 0.5f * z * (1.0f - th * th) * du;
    }
    case Activation::kSilu: {
      const float s = 1.0f / (1.0f + expf(-z));
      return s * (1.0f + z * (1.0f - s));
    }
    case Activation::kNone: break;
  }
  return 1.0f;
}

}  // namespace flashdwc
