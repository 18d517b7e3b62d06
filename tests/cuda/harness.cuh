// What the stand-alone CUDA programs share: the GPU checks of tests/cuda/ and the
// kernel-level timings and probes of benchmarks/cuda/. Error checks, device buffers
// (random fill, NaN poisoning, canary guards), event timing, the problem builders and
// the comparison with a reference in double.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/direct_index.h"
#include "common/params.h"

// Ends the program on a CUDA error, naming the call's place.
#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

// ---- element types on the host -------------------------------------------------

inline float to_host_float(float v) { return v; }
inline float to_host_float(__half v) { return __half2float(v); }
inline float to_host_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
T from_host_float(float v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

template <typename T>
const char* dtype_name() {
  return std::is_same_v<T, float> ? "f32" : std::is_same_v<T, __half> ? "f16" : "bf16";
}

// Relative rounding error of one store in T (fp16: 11 significand bits, bf16: 8).
template <typename T>
constexpr double unit_roundoff() {
  return std::is_same_v<T, __half> ? 1.0 / 2048 : 1.0 / 256;
}

// Calls fn(T{}) for the element type named f32, bf16 or f16; false for another name.
template <typename Fn>
bool with_dtype(const std::string& name, Fn&& fn) {
  if (name == "f32") fn(float{});
  else if (name == "bf16") fn(__nv_bfloat16{});
  else if (name == "f16") fn(__half{});
  else return false;
  return true;
}

// U(-1, 1) values on the host, drawn from rng in order.
template <typename T>
std::vector<T> random_host(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<T> v(n);
  for (auto& e : v) e = from_host_float<T>(u(rng));
  return v;
}

// ---- device buffers --------------------------------------------------------------

// U(-1, 1) data filled on the device from a hash of the index and a seed (no host copy).
template <typename T>
__global__ void fill_uniform(T* p, int64_t n, unsigned seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    p[i] = T(float(h) * (2.0f / 4294967296.0f) - 1.0f);
  }
}

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(int64_t n) : n_(n) { CK(cudaMalloc(&p_, bytes())); }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(int64_t(host.size())) {
    CK(cudaMemcpy(p_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(p_); }

  T* get() const { return p_; }
  int64_t size() const { return n_; }
  size_t bytes() const { return size_t(n_) * sizeof(T); }
  void fill_uniform(unsigned seed) { ::fill_uniform<<<1024, 256>>>(p_, n_, seed); }
  // Every byte set to `byte`: 0xFF makes every fp32, fp16 and bf16 element a NaN.
  void fill_bytes(int byte) { CK(cudaMemset(p_, byte, bytes())); }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    CK(cudaMemcpy(host.data(), p_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* p_ = nullptr;
  int64_t n_;
};

// An output poisoned with NaN (an element the kernel does not write fails the
// comparison) between two runs of canary bytes (a store past either end shows).
template <typename T>
class GuardedOutput {
 public:
  static constexpr size_t kGuardBytes = 256;  // keeps the tensor inside 16-byte aligned
  static constexpr uint8_t kCanary = 0xA5;

  explicit GuardedOutput(int64_t n) : n_(n), raw_(int64_t(n * sizeof(T) + 2 * kGuardBytes)) {
    CK(cudaMemset(raw_.get(), kCanary, kGuardBytes));
    CK(cudaMemset(raw_.get() + kGuardBytes, 0xFF, n * sizeof(T)));
    CK(cudaMemset(raw_.get() + kGuardBytes + n * sizeof(T), kCanary, kGuardBytes));
  }
  T* get() const { return reinterpret_cast<T*>(raw_.get() + kGuardBytes); }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    CK(cudaMemcpy(host.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  bool guards_intact() const {
    const std::vector<uint8_t> bytes = raw_.download();
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (bytes[i] != kCanary || bytes[bytes.size() - 1 - i] != kCanary) return false;
    }
    return true;
  }

 private:
  int64_t n_;
  DeviceBuffer<uint8_t> raw_;
};

// ---- timing ----------------------------------------------------------------------

// The median time of a launch, in ms, by CUDA events: `warmups` untimed launches,
// then `launches` timed one at a time (record, launch, record, synchronize).
template <typename Launch>
float median_launch_ms(Launch launch, int warmups, int launches) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < warmups; ++i) launch();
  std::vector<float> times;
  for (int i = 0; i < launches; ++i) {
    cudaEventRecord(start);
    launch();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// ---- problems --------------------------------------------------------------------

// Undilated problem with the given padding before and output size.
inline flashdwc::DwConvParams conv_params(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                                          int64_t pad_top, int64_t pad_left, int64_t out_h, int64_t out_w,
                                          int64_t stride = 1, bool flip = false) {
  const flashdwc::ConvGeometry g{stride, stride, pad_top, pad_left, 1, 1};
  return flashdwc::make_dwconv_params(n, h, w, out_h, out_w, c, kh, kw, g, flip);
}

// A square k x k filter with TF's "SAME" padding at stride s (the benchmarks' points).
inline flashdwc::DwConvParams same_params(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t s = 1) {
  const int64_t out_h = (h + s - 1) / s, out_w = (w + s - 1) / s;
  const int64_t ph = std::max<int64_t>((out_h - 1) * s + k - h, 0), pw = std::max<int64_t>((out_w - 1) * s + k - w, 0);
  return conv_params(n, h, w, c, k, k, ph / 2, pw / 2, out_h, out_w, s);
}

// ---- comparison with a reference in double ---------------------------------------

// The elements outside their tolerance (a NaN is one), the first 5 printed.
struct Mismatches {
  int64_t checked = 0, bad = 0;
  double worst = 0;  // largest error over its scale

  // where() prints the element's coordinates.
  template <typename Where>
  void check(double got, double want, double tolerance, double scale, Where where) {
    ++checked;
    const double err = std::fabs(got - want);
    if (!(err <= tolerance)) {
      if (bad < 5) {
        std::printf("    mismatch ");
        where();
        std::printf(": got %g want %g\n", got, want);
      }
      ++bad;
    }
    if (err == err && scale > 0) worst = std::max(worst, err / scale);
  }
};

// One forward output in double from host copies of x and w; *mag is the sum of the
// terms' magnitudes, for the tolerance.
template <typename T>
double reference_fwd_at(const flashdwc::DwConvParams& p, const std::vector<T>& x, const std::vector<T>& w, int64_t n,
                        int64_t oh, int64_t ow, int64_t c, double* mag) {
  double acc = 0, m = 0;
  const int64_t ih0 = oh * p.stride_h - p.pad_top, iw0 = ow * p.stride_w - p.pad_left;
  int kh_lo, kh_hi, kw_lo, kw_hi;
  flashdwc::valid_taps(ih0, p.dilation_h, p.kernel_h, p.in_h, kh_lo, kh_hi);
  flashdwc::valid_taps(iw0, p.dilation_w, p.kernel_w, p.in_w, kw_lo, kw_hi);
  for (int64_t kh = kh_lo; kh < kh_hi; ++kh) {
    const int64_t ih = ih0 + kh * p.dilation_h;
    for (int64_t kw = kw_lo; kw < kw_hi; ++kw) {
      const int64_t iw = iw0 + kw * p.dilation_w;
      const double t = double(to_host_float(x[((n * p.in_h + ih) * p.in_w + iw) * p.channels + c])) *
                       to_host_float(w[flashdwc::filter_tap(p, kh, kw) * p.channels + c]);
      acc += t;
      m += std::fabs(t);
    }
  }
  *mag = m;
  return acc;
}

// Compares y with the forward reference, relu(conv + bias) where `bias` is given:
// every element, or `samples` random ones and the first and last. Allowed one
// rounding of the result in T and 1e-5 of the terms' summed magnitude.
template <typename T>
Mismatches compare_fwd(const flashdwc::DwConvParams& p, const std::vector<T>& x, const std::vector<T>& w,
                       const std::vector<T>& y, const std::vector<T>* bias = nullptr, int64_t samples = 0,
                       std::mt19937* rng = nullptr) {
  Mismatches m;
  auto check_one = [&](int64_t idx) {
    const int64_t c = idx % p.channels;
    const int64_t ow = (idx / p.channels) % p.out_w;
    const int64_t oh = (idx / p.channels / p.out_w) % p.out_h;
    const int64_t n = idx / p.channels / p.out_w / p.out_h;
    double mag;
    double want = reference_fwd_at(p, x, w, n, oh, ow, c, &mag);
    if (bias != nullptr) want = std::max(want + double(to_host_float((*bias)[c])), 0.0);
    const double tolerance = 1.01 * unit_roundoff<T>() * std::fabs(want) + 1e-5 * mag + 1e-6;
    m.check(to_host_float(y[idx]), want, tolerance, std::fabs(want) + mag * 1e-3, [&] {
      std::printf("n=%lld oh=%lld ow=%lld c=%lld", (long long)n, (long long)oh, (long long)ow, (long long)c);
    });
  };
  const int64_t ny = int64_t(y.size());
  if (samples <= 0 || samples >= ny) {
    for (int64_t i = 0; i < ny; ++i) check_one(i);
  } else {
    std::uniform_int_distribution<int64_t> pick(0, ny - 1);
    for (int64_t i = 0; i < samples; ++i) check_one(pick(*rng));
    check_one(0);
    check_one(ny - 1);
  }
  return m;
}

// Compares got(e), e = (kh * KW + kw) * C + c, with dw summed in double from host
// copies of x and dy. fp32 sums of exact products in any order: allowed a few fp32
// ulps of the terms' summed magnitude.
template <typename T, typename Got>
Mismatches compare_filter_gradient(const flashdwc::DwConvParams& p, const std::vector<T>& x,
                                   const std::vector<T>& dy, Got got) {
  Mismatches m;
  for (int64_t kh = 0; kh < p.kernel_h; ++kh)
    for (int64_t kw = 0; kw < p.kernel_w; ++kw)
      for (int64_t c = 0; c < p.channels; ++c) {
        double want = 0, mag = 0;
        for (int64_t n = 0; n < p.batch; ++n)
          for (int64_t oh = 0; oh < p.out_h; ++oh) {
            const int64_t ih = oh * p.stride_h - p.pad_top + kh * p.dilation_h;
            if (ih < 0 || ih >= p.in_h) continue;
            for (int64_t ow = 0; ow < p.out_w; ++ow) {
              const int64_t iw = ow * p.stride_w - p.pad_left + kw * p.dilation_w;
              if (iw < 0 || iw >= p.in_w) continue;
              const double t = double(to_host_float(dy[((n * p.out_h + oh) * p.out_w + ow) * p.channels + c])) *
                               to_host_float(x[((n * p.in_h + ih) * p.in_w + iw) * p.channels + c]);
              want += t;
              mag += std::fabs(t);
            }
          }
        m.check(got((kh * p.kernel_w + kw) * p.channels + c), want, 1e-5 * mag + 1e-6, mag, [&] {
          std::printf("kh=%lld kw=%lld c=%lld", (long long)kh, (long long)kw, (long long)c);
        });
      }
  return m;
}
