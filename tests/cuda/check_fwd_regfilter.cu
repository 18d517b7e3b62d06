// Standalone GPU check of the register-filter forward kernel (fwd_regfilter.cuh)
// against a CPU reference in double, through the dispatcher run_dwconv_fwd: every shape
// here is a square 3x3 or 5x5 with C a multiple of 64, which it sends there.
// Build (from the repository root):
//   nvcc -std=c++17 -arch=sm_90 -O3 --expt-relaxed-constexpr -Icsrc tests/cuda/check_fwd_regfilter.cu \
//        csrc/fwd/*.cu csrc/plan/fwd.cc -o check_fwd_regfilter
// Run: ./check_fwd_regfilter
// Every shape checks that the dispatcher picks the kernel, poisons y with NaN and
// guards it with canary bytes, and compares every output (y = relu(conv + bias) on
// the shapes marked so).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <type_traits>
#include <vector>

#include "check_helpers.cuh"
#include "common/launch.cuh"
#include "fwd/launch.h"
#include "plan/fwd.h"

using flashdwc::DwConvParams;

template <typename T> constexpr double unit_roundoff() { return std::is_same_v<T, __half> ? 1.0 / 2048 : 1.0 / 256; }

struct Shape {
  const char* name;
  int64_t n, h, w, c, k, pad_top, pad_left, out_h, out_w;
  bool flip, epilogue;
};

Shape same(const char* name, int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, bool flip = false,
           bool epilogue = false) {
  return {name, n, h, w, c, k, (k - 1) / 2, (k - 1) / 2, h, w, flip, epilogue};
}
// Explicit padding before (pt, pl) and after (pb, pr), as flax.linen.Conv takes it.
Shape padded(const char* name, int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t pt, int64_t pb,
             int64_t pl, int64_t pr) {
  return {name, n, h, w, c, k, pt, pl, h + pt + pb - k + 1, w + pl + pr - k + 1, false, false};
}

DwConvParams params_of(const Shape& s) {
  DwConvParams p{};
  p.batch = s.n, p.in_h = s.h, p.in_w = s.w, p.out_h = s.out_h, p.out_w = s.out_w, p.channels = s.c;
  p.kernel_h = p.kernel_w = s.k, p.stride_h = p.stride_w = 1, p.pad_top = s.pad_top, p.pad_left = s.pad_left;
  p.dilation_h = p.dilation_w = 1, p.flip_filter = s.flip;
  return p;
}

constexpr size_t kGuardBytes = 256;
constexpr uint8_t kCanary = 0xA5;

template <typename T>
bool run_shape(const Shape& s, std::mt19937& rng) {
  const DwConvParams p = params_of(s);
  const char* dtype = std::is_same_v<T, __half> ? "f16" : "bf16";
  // The dispatcher's rule (dwconv_cuda.cu, regfilter_takes).
  if (flashdwc::plan_fwd(p, true, flashdwc::device_limits()) != flashdwc::FwdKernel::kRegFilter) {
    std::printf("  %-30s %-4s: the dispatcher does not pick the register-filter kernel\n", s.name, dtype);
    return false;
  }
  const int64_t nx = p.batch * p.in_h * p.in_w * p.channels;
  const int64_t nw = p.kernel_h * p.kernel_w * p.channels;
  const int64_t ny = p.batch * p.out_h * p.out_w * p.channels;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<T> hx(nx), hw(nw), hb(p.channels), hy(ny);
  for (auto& v : hx) v = fromf<T>(u(rng));
  for (auto& v : hw) v = fromf<T>(u(rng));
  for (auto& v : hb) v = fromf<T>(u(rng));

  uint8_t *dx, *dw, *db, *dy;
  CK(cudaMalloc(&dx, nx * sizeof(T)));
  CK(cudaMalloc(&dw, nw * sizeof(T)));
  CK(cudaMalloc(&db, p.channels * sizeof(T)));
  CK(cudaMalloc(&dy, ny * sizeof(T) + 2 * kGuardBytes));
  CK(cudaMemcpy(dx, hx.data(), nx * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, hw.data(), nw * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, hb.data(), p.channels * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemset(dy, kCanary, kGuardBytes));
  CK(cudaMemset(dy + kGuardBytes, 0xFF, ny * sizeof(T)));  // 0xFFFF is NaN in fp16 and bf16
  CK(cudaMemset(dy + kGuardBytes + ny * sizeof(T), kCanary, kGuardBytes));
  T* y = reinterpret_cast<T*>(dy + kGuardBytes);
  flashdwc::FwdEpilogue epilogue;
  if (s.epilogue) epilogue.bias = db, epilogue.activation = flashdwc::Activation::kRelu;

  const T* x = reinterpret_cast<const T*>(dx);
  const T* w = reinterpret_cast<const T*>(dw);
  CK(flashdwc::run_dwconv_fwd<T>(p, x, w, y, nullptr, epilogue));
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(hy.data(), y, ny * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<uint8_t> guard(2 * kGuardBytes);
  CK(cudaMemcpy(guard.data(), dy, kGuardBytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(guard.data() + kGuardBytes, dy + kGuardBytes + ny * sizeof(T), kGuardBytes, cudaMemcpyDeviceToHost));
  CK(cudaFree(dx));
  CK(cudaFree(dw));
  CK(cudaFree(db));
  CK(cudaFree(dy));

  bool ok = true;
  for (uint8_t b : guard) ok &= b == kCanary;
  if (!ok) std::printf("  %s: guard bytes around y were overwritten\n", s.name);

  int64_t bad = 0;
  double worst = 0;
  for (int64_t idx = 0; idx < ny; ++idx) {
    const int64_t c = idx % p.channels;
    const int64_t ow = (idx / p.channels) % p.out_w;
    const int64_t oh = (idx / p.channels / p.out_w) % p.out_h;
    const int64_t n = idx / p.channels / p.out_w / p.out_h;
    double acc = 0, mag = 0;
    for (int64_t kh = 0; kh < p.kernel_h; ++kh) {
      const int64_t ih = oh - p.pad_top + kh;
      if (ih < 0 || ih >= p.in_h) continue;
      for (int64_t kw = 0; kw < p.kernel_w; ++kw) {
        const int64_t iw = ow - p.pad_left + kw;
        if (iw < 0 || iw >= p.in_w) continue;
        const double t = double(tof(hx[((n * p.in_h + ih) * p.in_w + iw) * p.channels + c])) *
                         tof(hw[flashdwc::filter_tap(p, kh, kw) * p.channels + c]);
        acc += t;
        mag += std::fabs(t);
      }
    }
    if (s.epilogue) acc = std::max(acc + double(tof(hb[c])), 0.0);
    const double got = tof(hy[idx]);
    const double err = std::fabs(got - acc);
    const double tol = 1.01 * unit_roundoff<T>() * std::fabs(acc) + 1e-5 * mag + 1e-6;
    if (!(err <= tol)) {  // also catches NaN
      if (bad < 5) {
        std::printf("    mismatch n=%lld oh=%lld ow=%lld c=%lld: got %g want %g\n", (long long)n, (long long)oh,
                    (long long)ow, (long long)c, got, acc);
      }
      ++bad;
    }
    if (err == err && mag > 0) worst = std::max(worst, err / (std::fabs(acc) + mag * 1e-3));
  }
  ok &= bad == 0;
  std::printf("  %-30s %-4s %s  (%lld checked, %lld bad, worst scaled err %.3g)\n", s.name, dtype,
              ok ? "ok  " : "FAIL", (long long)ny, (long long)bad, worst);
  return ok;
}

int main() {
  const Shape shapes[] = {
      same("same_w40_c64", 2, 21, 40, 64, 5),
      same("same_w32_c128", 3, 17, 32, 128, 5),
      same("epilogue_w64_c256", 2, 18, 64, 256, 5, false, true),
      same("flip_w48_c64", 2, 20, 48, 64, 5, true),    // backward data's rotated filter
      same("same_w35_c64", 2, 21, 35, 64, 5),          // a last strip of 3 columns
      same("w13_n3", 3, 17, 13, 64, 5),                // strips of 4, 4, 4, 1 over 3 images
      same("w9_c128_rowblocks", 2, 40, 9, 128, 5),     // row blocks of 16 rows
      same("w1", 4, 9, 1, 64, 5),                      // one column: every window column but one outside
      same("h2_w3", 3, 2, 3, 64, 5),                   // smaller than the filter
      same("w130", 1, 12, 130, 64, 5),                 // over 64 columns
      same("flip_epilogue", 2, 18, 30, 64, 5, true, true),
      same("epilogue_c192", 2, 18, 30, 192, 5, false, true),
      padded("valid", 2, 20, 30, 64, 5, 0, 0, 0, 0),
      padded("pad_4_1_0_3", 2, 20, 30, 64, 5, 4, 1, 0, 3),  // rows wholly in the padding
      padded("crop", 2, 26, 30, 64, 5, -2, 1, -1, 4),       // negative padding crops
      same("tall_rowblocks", 1, 300, 6, 64, 5),             // 18 row blocks
      same("w7_c768", 4, 7, 7, 768, 5),                     // ConvNeXt's last stage's map
      // 3x3, 8 outputs a thread.
      same("k3_w40_c64", 2, 21, 40, 64, 3),                  // whole strips
      same("k3_w37_c128", 3, 17, 37, 128, 3),                // a last strip of 5
      same("k3_epilogue_w64_c256", 2, 18, 64, 256, 3, false, true),
      same("k3_flip_w33", 2, 20, 33, 64, 3, true),           // a last strip of 1
      same("k3_w130_c192", 1, 12, 130, 192, 3),
      same("k3_w13_n3", 3, 17, 13, 64, 3),
      same("k3_w1", 4, 9, 1, 64, 3),
      same("k3_h1_w2", 3, 1, 2, 64, 3),
      same("k3_flip_epilogue", 2, 18, 30, 64, 3, true, true),
      padded("k3_valid", 2, 20, 30, 64, 3, 0, 0, 0, 0),
      padded("k3_pad_3_0_0_2", 2, 20, 35, 64, 3, 3, 0, 0, 2),  // a row wholly in the padding
      padded("k3_crop", 2, 26, 36, 64, 3, -1, 2, -1, 1),      // negative padding crops
      same("k3_tall_rowblocks", 1, 300, 40, 64, 3),           // 18 row blocks of 17 rows
      same("k3_w7_c768", 4, 7, 7, 768, 3),                    // one strip, 7 of its 8 columns
  };
  std::mt19937 rng(20261203);
  bool ok = true;
  for (const Shape& s : shapes) {
    ok &= run_shape<__nv_bfloat16>(s, rng);
    ok &= run_shape<__half>(s, rng);
  }
  std::printf(ok ? "ALL OK\n" : "FAILURES\n");
  return ok ? 0 : 1;
}
