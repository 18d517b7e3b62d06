#include "cpu/dwconv_cpu.h"

#include <algorithm>
#include <vector>

#include "common/direct_index.h"
#include "common/host_half.h"
#include "common/parallel_for.h"

namespace flashdwc {
namespace {

// Rows (n, output row) per thread below which spawning another thread costs more
// than it saves; a row of a small test layer is a few microseconds of work.
constexpr int64_t kMinRowsPerThread = 4;

// The filter as float, rotated if the params ask for it: (KH*KW, C).
template <typename T>
std::vector<float> filter_as_float(const DwConvParams& p, const T* w) {
  const int64_t taps = p.kernel_h * p.kernel_w;
  std::vector<float> out(taps * p.channels);
  for (int64_t kh = 0; kh < p.kernel_h; ++kh)
    for (int64_t kw = 0; kw < p.kernel_w; ++kw) {
      const T* src = w + filter_tap(p, kh, kw) * p.channels;
      float* dst = out.data() + (kh * p.kernel_w + kw) * p.channels;
      for (int64_t c = 0; c < p.channels; ++c) dst[c] = to_float(src[c]);
    }
  return out;
}

}  // namespace

template <typename T>
void dwconv_fwd_cpu(const DwConvParams& p, const T* x, const T* w, T* y, const FwdEpilogue& epilogue,
                    const FwdPrologue& prologue) {
  const std::vector<float> wf = filter_as_float(p, w);
  const int64_t C = p.channels;
  const int64_t rows = p.batch * p.out_h;
  parallel_for(rows, cpu_thread_count(rows, kMinRowsPerThread), [&](int, int64_t begin, int64_t end) {
    std::vector<float> acc(C);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / p.out_h, oh = row % p.out_h;
      const int64_t ih0 = oh * p.stride_h - p.pad_top;
      int kh_lo, kh_hi;
      valid_taps(ih0, p.dilation_h, p.kernel_h, p.in_h, kh_lo, kh_hi);
      for (int64_t ow = 0; ow < p.out_w; ++ow) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        const int64_t iw0 = ow * p.stride_w - p.pad_left;
        int kw_lo, kw_hi;
        valid_taps(iw0, p.dilation_w, p.kernel_w, p.in_w, kw_lo, kw_hi);
        for (int64_t kh = kh_lo; kh < kh_hi; ++kh) {
          const int64_t ih = ih0 + kh * p.dilation_h;
          for (int64_t kw = kw_lo; kw < kw_hi; ++kw) {
            const int64_t iw = iw0 + kw * p.dilation_w;
            const T* xs = x + ((n * p.in_h + ih) * p.in_w + iw) * C;
            const float* ws = wf.data() + (kh * p.kernel_w + kw) * C;
            if (prologue.active()) {
              for (int64_t c = 0; c < C; ++c) acc[c] += prologue.apply(c, to_float(xs[c])) * ws[c];
            } else {
              for (int64_t c = 0; c < C; ++c) acc[c] += to_float(xs[c]) * ws[c];
            }
          }
        }
        T* ys = y + ((n * p.out_h + oh) * p.out_w + ow) * C;
        if (epilogue.active()) {
          const T* bias = static_cast<const T*>(epilogue.bias);
          for (int64_t c = 0; c < C; ++c) {
            acc[c] = apply_activation(epilogue.activation, acc[c] + (bias != nullptr ? to_float(bias[c]) : 0.0f));
          }
        }
        for (int64_t c = 0; c < C; ++c) ys[c] = from_float<T>(acc[c]);
      }
    }
  });
}

template <typename T>
void dwconv_bwd_data_cpu(const DwConvParams& p, const T* dy, const T* w, T* dx) {
  const std::vector<float> wf = filter_as_float(p, w);
  const int64_t C = p.channels;
  const int64_t rows = p.batch * p.in_h;
  // Output row oh reads input row ih through tap kh when oh * s = ih + pad - kh * d.
  const int step_h = strided_tap_step(p.stride_h, p.dilation_h);
  const int step_w = strided_tap_step(p.stride_w, p.dilation_w);
  const int64_t out_step_h = step_h * p.dilation_h / p.stride_h;
  const int64_t out_step_w = step_w * p.dilation_w / p.stride_w;
  parallel_for(rows, cpu_thread_count(rows, kMinRowsPerThread), [&](int, int64_t begin, int64_t end) {
    std::vector<float> acc(C);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / p.in_h, ih = row % p.in_h;
      const StridedTaps th = strided_taps(ih, p.pad_top, p.stride_h, p.dilation_h, step_h, p.kernel_h);
      for (int64_t iw = 0; iw < p.in_w; ++iw) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        const StridedTaps tw = strided_taps(iw, p.pad_left, p.stride_w, p.dilation_w, step_w, p.kernel_w);
        int64_t oh = th.out_first;
        for (int64_t kh = th.first; kh < p.kernel_h; kh += step_h, oh -= out_step_h) {
          if (oh < 0) break;
          if (oh >= p.out_h) continue;
          int64_t ow = tw.out_first;
          for (int64_t kw = tw.first; kw < p.kernel_w; kw += step_w, ow -= out_step_w) {
            if (ow < 0) break;
            if (ow >= p.out_w) continue;
            const T* ds = dy + ((n * p.out_h + oh) * p.out_w + ow) * C;
            const float* ws = wf.data() + (kh * p.kernel_w + kw) * C;
            for (int64_t c = 0; c < C; ++c) acc[c] += to_float(ds[c]) * ws[c];
          }
        }
        T* xs = dx + ((n * p.in_h + ih) * p.in_w + iw) * C;
        for (int64_t c = 0; c < C; ++c) xs[c] = from_float<T>(acc[c]);
      }
    }
  });
}

template <typename T>
void dwconv_bwd_filter_cpu(const DwConvParams& p, const T* x, const T* dy, T* dw) {
  const int64_t C = p.channels;
  const int64_t taps = p.kernel_h * p.kernel_w;
  const int64_t rows = p.batch * p.out_h;
  const int threads = cpu_thread_count(rows, kMinRowsPerThread);
  // One fp32 partial sum per thread, merged below in thread order: fixed reduction order.
  std::vector<std::vector<float>> partial(threads, std::vector<float>(taps * C, 0.0f));
  parallel_for(rows, threads, [&](int t, int64_t begin, int64_t end) {
    float* acc = partial[t].data();
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / p.out_h, oh = row % p.out_h;
      const int64_t ih0 = oh * p.stride_h - p.pad_top;
      int kh_lo, kh_hi;
      valid_taps(ih0, p.dilation_h, p.kernel_h, p.in_h, kh_lo, kh_hi);
      for (int64_t ow = 0; ow < p.out_w; ++ow) {
        const T* ds = dy + ((n * p.out_h + oh) * p.out_w + ow) * C;
        const int64_t iw0 = ow * p.stride_w - p.pad_left;
        int kw_lo, kw_hi;
        valid_taps(iw0, p.dilation_w, p.kernel_w, p.in_w, kw_lo, kw_hi);
        for (int64_t kh = kh_lo; kh < kh_hi; ++kh) {
          const int64_t ih = ih0 + kh * p.dilation_h;
          for (int64_t kw = kw_lo; kw < kw_hi; ++kw) {
            const int64_t iw = iw0 + kw * p.dilation_w;
            const T* xs = x + ((n * p.in_h + ih) * p.in_w + iw) * C;
            float* as = acc + (kh * p.kernel_w + kw) * C;
            for (int64_t c = 0; c < C; ++c) as[c] += to_float(xs[c]) * to_float(ds[c]);
          }
        }
      }
    }
  });
  for (int64_t i = 0; i < taps * C; ++i) {
    float sum = 0.0f;
    for (int t = 0; t < threads; ++t) sum += partial[t][i];
    dw[i] = from_float<T>(sum);
  }
}

#define FLASHDWC_INSTANTIATE_CPU(T)                                                         \
  template void dwconv_fwd_cpu<T>(const DwConvParams&, const T*, const T*, T*, const FwdEpilogue&, \
                                  const FwdPrologue&);                                            \
  template void dwconv_bwd_data_cpu<T>(const DwConvParams&, const T*, const T*, T*);     \
  template void dwconv_bwd_filter_cpu<T>(const DwConvParams&, const T*, const T*, T*);

FLASHDWC_INSTANTIATE_CPU(float)
FLASHDWC_INSTANTIATE_CPU(HostHalf)
FLASHDWC_INSTANTIATE_CPU(HostBFloat16)

}  // namespace flashdwc
