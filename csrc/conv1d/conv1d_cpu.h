// The CPU 1-D kernels: plain loops, the reference the CUDA kernels are held to.
#pragma once

#include "common/host_half.h"
#include "conv1d/conv1d_params.h"

namespace flashdwc {

// y = act(conv(x, w) + bias), masked by segments, the state in place of the
// causal zero padding.
template <typename T>
void conv1d_fwd_cpu(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                    const T* state, T* y);

// From dy: dx (N, L, C), dstate (N, state_len, C), and the per-chunk partial
// filter and bias gradients dw_part (N * chunks, K, C) and db_part (N * chunks, C)
// in float32. dz = dy * act'(z) is recomputed from x, never read from memory.
template <typename T>
void conv1d_bwd_cpu(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                    const T* state, const T* dy, T* dx, T* dstate, float* dw_part, float* db_part);

// One decoding step (p.length == 1, p.state_len == K - 1): y (N, C) from x_t (N, C)
// and the last K - 1 inputs state_in (N, K - 1, C); state_out gets state_in shifted
// by one with x_t last. state_out may be state_in (the state updated in place).
template <typename T>
void conv1d_step_cpu(const Conv1dParams& p, const T* x, const T* w, const T* bias, const T* state_in, T* y,
                     T* state_out);

}  // namespace flashdwc
