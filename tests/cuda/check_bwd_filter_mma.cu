// Standalone GPU check of launch_bwd_filter_mma against a CPU reference in double,
// atomic and deterministic (sliced) modes, fp16 and bf16.
// Build (from the repository root):
//   nvcc -std=c++17 -arch=sm_90 -O3 --expt-relaxed-constexpr -Icsrc \
//        tests/cuda/check_bwd_filter_mma.cu csrc/bwd_filter/mma.cu csrc/plan/*.cc -o check_bwd_filter_mma
// Run: ./check_bwd_filter_mma
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "bwd_filter/mma.h"
#include "common/launch.cuh"
#include "harness.cuh"
#include "plan/bwd_filter.h"

using flashdwc::DwConvParams;

struct Shape {
  const char* name;
  int64_t n, h, w, c, kh, kw, pad_top, pad_left, out_h, out_w;
};

Shape same(const char* name, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw) {
  return {name, n, h, w, c, kh, kw, (kh - 1) / 2, (kw - 1) / 2, h, w};
}

// slices: 0 for atomic mode, else the deterministic slice count.
template <typename T>
bool run_shape(const Shape& s, std::mt19937& rng, int64_t slices) {
  const DwConvParams p = conv_params(s.n, s.h, s.w, s.c, s.kh, s.kw, s.pad_top, s.pad_left, s.out_h, s.out_w);
  if (!flashdwc::can_implement_bwd_filter_mma(p, true, flashdwc::device_limits())) {
    std::printf("  %-30s %s: NOT SUPPORTED (unexpected)\n", s.name, dtype_name<T>());
    return false;
  }
  const int64_t taps = p.kernel_h * p.kernel_w * p.channels;
  const int64_t nslices = slices > 0 ? slices : 1;
  const std::vector<T> hx = random_host<T>(p.batch * p.in_h * p.in_w * p.channels, rng);
  const std::vector<T> hdy = random_host<T>(p.batch * p.out_h * p.out_w * p.channels, rng);
  const DeviceBuffer<T> x(hx), dy(hdy);
  DeviceBuffer<float> ws(nslices * taps);
  // Atomic mode adds into zeros; deterministic mode must write every slice whole, so
  // its workspace starts as NaN and an unwritten element fails.
  ws.fill_bytes(slices > 0 ? 0xFF : 0);
  CK(flashdwc::launch_bwd_filter_mma<T>(p, x.get(), dy.get(), ws.get(), slices, 0));
  CK(cudaDeviceSynchronize());
  const std::vector<float> hws = ws.download();
  // Deterministic mode's slices, summed.
  const Mismatches m = compare_filter_gradient(p, hx, hdy, [&](int64_t i) {
    double got = 0;
    for (int64_t z = 0; z < nslices; ++z) got += hws[z * taps + i];
    return got;
  });
  std::printf("  %-30s %-4s slices %lld  %s  (%lld taps, %lld bad, worst err/mag %.2g)\n", s.name, dtype_name<T>(),
              (long long)slices, m.bad == 0 ? "ok  " : "FAIL", (long long)taps, (long long)m.bad, m.worst);
  return m.bad == 0;
}

int main() {
  std::mt19937 rng(4321);
  const std::vector<Shape> shapes = {
      same("k9 W32 H20 N3 C16", 3, 20, 32, 16, 9, 9),
      same("k9 W30 H13 N2 C24", 2, 13, 30, 24, 9, 9),
      same("k13 W32 H11 N3 C8", 3, 11, 32, 8, 13, 13),
      same("k9 W64 H17 N2 C16", 2, 17, 64, 16, 9, 9),
      same("k31 W40 H35 N1 C8", 1, 35, 40, 8, 31, 31),
      same("k9 W7 H7 N5 C16", 5, 7, 7, 16, 9, 9),
      same("17x10 W100 H9 N2 C8", 2, 9, 100, 8, 17, 10),
      same("k51 W60 H5 N1 C12", 1, 5, 60, 12, 51, 51),
      same("k13 W300 H6 N1 C8", 1, 6, 300, 8, 13, 13),
      same("k9 W16 H3 N9 C16", 9, 3, 16, 16, 9, 9),
      same("k9 W20 H9 N2 C12 (8-byte loads)", 2, 9, 20, 12, 9, 9),
      {"7x9 valid W40 C16", 2, 15, 40, 16, 7, 9, 0, 0, 9, 32},
      {"9x9 pad 6,2 W33 C8", 2, 12, 33, 8, 9, 9, 6, 2, 10, 29},
  };
  bool ok = true;
  for (const Shape& s : shapes) {
    for (int64_t slices : {int64_t(0), int64_t(3)}) {
      ok &= run_shape<__half>(s, rng, slices);
      ok &= run_shape<__nv_bfloat16>(s, rng, slices);
    }
  }
  std::printf(ok ? "ALL OK\n" : "FAILURES\n");
  return ok ? 0 : 1;
}
