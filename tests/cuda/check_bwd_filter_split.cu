// Standalone GPU check of the fp32 filter gradient (run_dwconv_bwd_filter<float>:
// from KW = 9 the forward-as-filter-gradient kernel at stride 1, the split kernel,
// with several filter rows per thread, otherwise) against a CPU reference in double,
// atomic and deterministic modes. The
// shapes cover filter heights that are not a multiple of the rows per thread,
// asymmetric and zero padding, channel counts that are not a multiple of 4, stride 2
// and a small tile count (several lanes per tile).
// Build (from the repository root):
//   nvcc -std=c++17 -arch=sm_90 -O3 --expt-relaxed-constexpr -Icsrc \
//        tests/cuda/check_bwd_filter_split.cu csrc/bwd_filter/*.cu csrc/plan/*.cc -o check_bwd_filter_split
// Run: ./check_bwd_filter_split
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "bwd_filter/launch.h"
#include "common/launch.cuh"
#include "harness.cuh"
#include "plan/bwd_filter.h"

using flashdwc::DwConvParams;

struct Shape {
  const char* name;
  int64_t n, h, w, c, kh, kw, pad_top, pad_left, stride;
};

Shape same(const char* name, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw) {
  return {name, n, h, w, c, kh, kw, (kh - 1) / 2, (kw - 1) / 2, 1};
}

bool run_shape(const Shape& s, std::mt19937& rng, bool deterministic) {
  // "SAME"-style output size for the given padding on both sides.
  const DwConvParams p = conv_params(s.n, s.h, s.w, s.c, s.kh, s.kw, s.pad_top, s.pad_left,
                                     (s.h + 2 * s.pad_top - s.kh) / s.stride + 1,
                                     (s.w + 2 * s.pad_left - s.kw) / s.stride + 1, s.stride);
  const flashdwc::BwdFilterTiling tiling = flashdwc::bwd_filter_tiling(p, false);
  const flashdwc::BwdFilterKernel kernel = flashdwc::plan_bwd_filter(p, false, deterministic, flashdwc::device_limits());
  const int64_t taps = p.kernel_h * p.kernel_w * p.channels;
  const std::vector<float> hx = random_host<float>(p.batch * p.in_h * p.in_w * p.channels, rng);
  const std::vector<float> hdy = random_host<float>(p.batch * p.out_h * p.out_w * p.channels, rng);
  const DeviceBuffer<float> x(hx), dy(hdy);
  DeviceBuffer<float> dw(taps);
  DeviceBuffer<float> ws((std::max<int64_t>(flashdwc::bwd_filter_workspace_bytes(p, deterministic, false), 4) + 3) / 4);
  // NaN in the output and workspace: an element nobody writes fails.
  dw.fill_bytes(0xFF);
  ws.fill_bytes(0xFF);
  CK(flashdwc::run_dwconv_bwd_filter<float>(p, x.get(), dy.get(), dw.get(), ws.get(), deterministic, 0));
  CK(cudaDeviceSynchronize());
  const std::vector<float> hdw = dw.download();
  const Mismatches m = compare_filter_gradient(p, hx, hdy, [&](int64_t i) { return double(hdw[i]); });
  std::printf("  %-28s %-5s width %d tm %2d rows %d %-13s %s (%lld taps, %lld bad, worst err/mag %.2g)\n", s.name,
              flashdwc::bwd_filter_kernel_name(kernel), tiling.width, tiling.tm, tiling.rows,
              deterministic ? "deterministic" : "atomic", m.bad == 0 ? "ok  " : "FAIL", (long long)taps,
              (long long)m.bad, m.worst);
  return m.bad == 0;
}

int main() {
  std::mt19937 rng(2718);
  const std::vector<Shape> shapes = {
      same("k9 W32 H20 N3 C40", 3, 20, 32, 40, 9, 9),
      same("k13 W30 H17 N2 C37", 2, 17, 30, 37, 13, 13),
      same("k17 W24 H19 N2 C33", 2, 19, 24, 33, 17, 17),
      same("k21 W40 H23 N1 C36", 1, 23, 40, 36, 21, 21),
      same("k31 W40 H35 N1 C32", 1, 35, 40, 32, 31, 31),
      same("k51 W60 H9 N1 C12", 1, 9, 60, 12, 51, 51),
      same("13x9 W20 H14 N2 C20", 2, 14, 20, 20, 13, 9),
      same("10x17 W25 H6 N3 C8", 3, 6, 25, 8, 10, 17),
      same("k9 W7 H7 N5 C64", 5, 7, 7, 64, 9, 9),
      same("k9 W16 H2 N9 C5", 9, 2, 16, 5, 9, 9),
      {"11x11 valid W30 H26 C16", 2, 26, 30, 16, 11, 11, 0, 0, 1},
      {"9x13 pad 7,1 W33 H12 C8", 2, 12, 33, 8, 9, 13, 7, 1, 1},
      {"k13 stride 2 W31 H21 C24", 2, 21, 31, 24, 13, 13, 6, 6, 2},
      same("k9 W140 H6 N3 C36 (wide dy rows)", 3, 6, 140, 36, 9, 9),
      same("k31 W12 H40 N7 C8 (pad > W)", 7, 40, 12, 8, 31, 31),
      same("k11 W24 H24 N37 C4 (chunks)", 37, 24, 24, 4, 11, 11),
  };
  bool ok = true;
  for (const Shape& s : shapes) {
    for (bool deterministic : {false, true}) ok &= run_shape(s, rng, deterministic);
  }
  std::printf(ok ? "ALL OK\n" : "FAILURES\n");
  return ok ? 0 : 1;
}
