#include "conv1d/conv1d_cpu.h"

#include <algorithm>
#include <vector>

#include "common/parallel_for.h"

namespace flashdwc {
namespace {

// Reads of one row n: inputs at any position (state before 0, zeros outside) and
// segment ids (position 0's before it, L - 1's after it).
template <typename T>
struct Row {
  const Conv1dParams& p;
  const T* x;
  const T* state;
  const int32_t* seg;

  float input(int64_t pos, int64_t c) const {
    if (pos >= 0 && pos < p.length) return to_float(x[pos * p.channels + c]);
    if (pos < 0 && pos >= -p.state_len) return to_float(state[(p.state_len + pos) * p.channels + c]);
    return 0.0f;
  }
  bool same_segment(int64_t pos, int64_t t) const {
    if (!p.has_seg) return true;
    const int64_t q = std::min(std::max<int64_t>(pos, 0), p.length - 1);
    return seg[q] == seg[t];
  }
  // The pre-activation at output t, channel c.
  float z(const T* w, const T* bias, int64_t t, int64_t c) const {
    float acc = p.has_bias ? to_float(bias[c]) : 0.0f;
    for (int64_t k = 0; k < p.kernel_size; ++k) {
      const int64_t pos = t - p.pad_lo + k * p.dilation;
      if (same_segment(pos, t)) acc += to_float(w[k * p.channels + c]) * input(pos, c);
    }
    return acc;
  }
};

template <typename T>
Row<T> row(const Conv1dParams& p, int64_t n, const T* x, const T* state, const int32_t* seg) {
  return Row<T>{p, x + n * p.length * p.channels, state ? state + n * p.state_len * p.channels : nullptr,
                seg ? seg + n * p.length : nullptr};
}

}  // namespace

template <typename T>
void conv1d_fwd_cpu(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                    const T* state, T* y) {
  const int64_t rows = p.batch * p.length;
  parallel_for(rows, cpu_thread_count(rows * p.channels * p.kernel_size, 1 << 16),
               [&](int, int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   const int64_t n = r / p.length, t = r % p.length;
                   const Row<T> in = row(p, n, x, state, seg);
                   for (int64_t c = 0; c < p.channels; ++c) {
                     y[r * p.channels + c] = from_float<T>(apply_activation(p.activation, in.z(w, bias, t, c)));
                   }
                 }
               });
}

template <typename T>
void conv1d_bwd_cpu(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                    const T* state, const T* dy, T* dx, T* dstate, float* dw_part, float* db_part) {
  const int64_t chunks = p.chunks_per_row();
  const int64_t span = p.dilation * (p.kernel_size - 1);
  const int64_t C = p.channels;
  parallel_for(p.batch * chunks, cpu_thread_count(p.batch * p.length * C * p.kernel_size, 1 << 16),
               [&](int, int64_t begin, int64_t end) {
                 std::vector<float> dz;
                 for (int64_t task = begin; task < end; ++task) {
                   const int64_t n = task / chunks, i0 = (task % chunks) * p.chunk;
                   const int64_t i1 = std::min(i0 + p.chunk, p.length);
                   const Row<T> in = row(p, n, x, state, seg);
                   const T* dy_row = dy + n * p.length * C;
                   // dz over every output that reaches this chunk's inputs (and the
                   // state's, for the first chunk): t in [i0 + pad_lo - span, i1 + pad_lo).
                   const int64_t first = i0 == 0 ? -p.state_len : i0;
                   const int64_t t0 = std::max<int64_t>(first + p.pad_lo - span, 0);
                   const int64_t t1 = std::min(i1 + p.pad_lo, p.length);
                   dz.assign(std::max<int64_t>(t1 - t0, 0) * C, 0.0f);
                   for (int64_t t = t0; t < t1; ++t) {
                     for (int64_t c = 0; c < C; ++c) {
                       float g = to_float(dy_row[t * C + c]);
                       if (p.activation != Activation::kNone) g *= activation_grad(p.activation, in.z(w, bias, t, c));
                       dz[(t - t0) * C + c] = g;
                     }
                   }
                   // Filter and bias partials over the outputs this chunk owns, [i0, i1).
                   if (p.filter_grad) {
                     float* dwp = dw_part + task * p.kernel_size * C;
                     float* dbp = db_part + task * C;
                     std::fill(dwp, dwp + p.kernel_size * C, 0.0f);
                     std::fill(dbp, dbp + C, 0.0f);
                     for (int64_t t = i0; t < i1; ++t) {
                       for (int64_t c = 0; c < C; ++c) {
                         const float g = dz[(t - t0) * C + c];
                         dbp[c] += g;
                         for (int64_t k = 0; k < p.kernel_size; ++k) {
                           const int64_t pos = t - p.pad_lo + k * p.dilation;
                           if (in.same_segment(pos, t)) dwp[k * C + c] += g * in.input(pos, c);
                         }
                       }
                     }
                   }
                   // Input gradient: input i is read by output t = i + pad_lo - k * dilation.
                   for (int64_t i = first; i < i1; ++i) {
                     for (int64_t c = 0; c < C; ++c) {
                       float acc = 0.0f;
                       for (int64_t k = 0; k < p.kernel_size; ++k) {
                         const int64_t t = i + p.pad_lo - k * p.dilation;
                         if (t < t0 || t >= t1 || !in.same_segment(i, t)) continue;
                         acc += to_float(w[k * C + c]) * dz[(t - t0) * C + c];
                       }
                       if (i >= 0) {
                         dx[(n * p.length + i) * C + c] = from_float<T>(acc);
                       } else {
                         dstate[(n * p.state_len + p.state_len + i) * C + c] = from_float<T>(acc);
                       }
                     }
                   }
                 }
               });
}

template <typename T>
void conv1d_step_cpu(const Conv1dParams& p, const T* x, const T* w, const T* bias, const T* state_in, T* y,
                     T* state_out) {
  const int64_t C = p.channels, S = p.state_len;
  parallel_for(p.batch, cpu_thread_count(p.batch * C * p.kernel_size, 1 << 16), [&](int, int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const T* s_in = state_in + n * S * C;
      T* s_out = state_out + n * S * C;
      for (int64_t c = 0; c < C; ++c) {
        const T xt = x[n * C + c];
        float acc = p.has_bias ? to_float(bias[c]) : 0.0f;
        for (int64_t j = 0; j < S; ++j) acc += to_float(w[j * C + c]) * to_float(s_in[j * C + c]);
        acc += to_float(w[S * C + c]) * to_float(xt);
        y[n * C + c] = from_float<T>(apply_activation(p.activation, acc));
        // Ascending j reads slot j + 1 before anything writes it: safe in place.
        for (int64_t j = 0; j + 1 < S; ++j) s_out[j * C + c] = s_in[(j + 1) * C + c];
        if (S > 0) s_out[(S - 1) * C + c] = xt;
      }
    }
  });
}

#define FLASHDWC_CONV1D_CPU(T)                                                                              \
  template void conv1d_fwd_cpu<T>(const Conv1dParams&, const T*, const T*, const T*, const int32_t*, const T*, \
                                  T*);                                                                      \
  template void conv1d_bwd_cpu<T>(const Conv1dParams&, const T*, const T*, const T*, const int32_t*, const T*, \
                                  const T*, T*, T*, float*, float*);                                           \
  template void conv1d_step_cpu<T>(const Conv1dParams&, const T*, const T*, const T*, const T*, T*, T*);
FLASHDWC_CONV1D_CPU(float)
FLASHDWC_CONV1D_CPU(HostHalf)
FLASHDWC_CONV1D_CPU(HostBFloat16)

}  // namespace flashdwc
