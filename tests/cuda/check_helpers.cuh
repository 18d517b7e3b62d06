// Helpers shared by the standalone GPU checks (check_fwd_mma.cu, check_bwd_filter_*.cu):
// a CUDA-error macro that ends the check, fp16/bf16 <-> float on the host, and the
// filter gradient's comparison with a reference in double.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/params.h"

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

template <typename T> float tof(T v);
template <> inline float tof<__half>(__half v) { return __half2float(v); }
template <> inline float tof<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> T fromf(float v);
template <> inline __half fromf<__half>(float v) { return __float2half_rn(v); }
template <> inline __nv_bfloat16 fromf<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

inline float to_host_float(float v) { return v; }
inline float to_host_float(__half v) { return tof(v); }
inline float to_host_float(__nv_bfloat16 v) { return tof(v); }

// Compares got(e), e = (kh * KW + kw) * C + c, with dw summed in double from host
// copies of x and dy (NHWC). fp32 sums of exact products in any order: allowed a few
// fp32 ulps of the terms' summed magnitude. Prints the first 5 mismatches; a NaN
// (an unwritten, poisoned element) is one.
struct FilterGradientErrors {
  int64_t bad = 0;
  double worst = 0;  // largest error over the terms' summed magnitude
};
template <typename T, typename Got>
FilterGradientErrors compare_filter_gradient(const flashdwc::DwConvParams& p, const std::vector<T>& x,
                                             const std::vector<T>& dy, Got got) {
  FilterGradientErrors errors;
  for (int64_t kh = 0; kh < p.kernel_h; ++kh)
    for (int64_t kw = 0; kw < p.kernel_w; ++kw)
      for (int64_t c = 0; c < p.channels; ++c) {
        double ref = 0, mag = 0;
        for (int64_t n = 0; n < p.batch; ++n)
          for (int64_t oh = 0; oh < p.out_h; ++oh) {
            const int64_t ih = oh * p.stride_h - p.pad_top + kh * p.dilation_h;
            if (ih < 0 || ih >= p.in_h) continue;
            for (int64_t ow = 0; ow < p.out_w; ++ow) {
              const int64_t iw = ow * p.stride_w - p.pad_left + kw * p.dilation_w;
              if (iw < 0 || iw >= p.in_w) continue;
              const double t = double(to_host_float(dy[((n * p.out_h + oh) * p.out_w + ow) * p.channels + c])) *
                               to_host_float(x[((n * p.in_h + ih) * p.in_w + iw) * p.channels + c]);
              ref += t;
              mag += std::fabs(t);
            }
          }
        const double value = got((kh * p.kernel_w + kw) * p.channels + c);
        const double err = std::fabs(value - ref);
        if (!(err <= 1e-5 * mag + 1e-6)) {
          if (errors.bad < 5) {
            std::printf("    mismatch kh=%lld kw=%lld c=%lld: got %g want %g\n", (long long)kh, (long long)kw,
                        (long long)c, value, ref);
          }
          ++errors.bad;
        }
        if (err == err && mag > 0) errors.worst = std::max(errors.worst, err / mag);
      }
  return errors;
}
