// Standalone GPU check of the register-filter forward kernel (fwd/regfilter.cuh)
// against a CPU reference in double, through the dispatcher run_dwconv_fwd: every shape
// here is a square 3x3 or 5x5 with C a multiple of 64, or of 8 with few padding lanes,
// which it sends there in fp16/bf16, and in fp32 where the map has at most 31 columns
// (plus fp32-only channel counts, multiples of 4).
// Build (from the repository root):
//   nvcc -std=c++17 -arch=sm_90 -O3 --expt-relaxed-constexpr -Icsrc tests/cuda/check_fwd_regfilter.cu \
//        csrc/fwd/{launch,mma,regfilter}.cu csrc/plan/*.cc -o check_fwd_regfilter
// Run: ./check_fwd_regfilter
// Every shape checks that the dispatcher picks the kernel, poisons y with NaN and
// guards it with canary bytes, and compares every output (y = relu(conv + bias) on
// the shapes marked so).
#include <cstdint>
#include <cstdio>
#include <random>
#include <type_traits>
#include <vector>

#include "common/launch.cuh"
#include "fwd/launch.h"
#include "harness.cuh"
#include "plan/fwd.h"

using flashdwc::DwConvParams;

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

template <typename T>
bool run_shape(const Shape& s, std::mt19937& rng) {
  const DwConvParams p = conv_params(s.n, s.h, s.w, s.c, s.k, s.k, s.pad_top, s.pad_left, s.out_h, s.out_w, 1, s.flip);
  const char* dtype = dtype_name<T>();
  const bool half_precision = !std::is_same_v<T, float>;
  if (flashdwc::plan_fwd(p, half_precision, flashdwc::device_limits()) != flashdwc::FwdKernel::kRegFilter) {
    std::printf("  %-30s %-4s: the dispatcher does not pick the register-filter kernel\n", s.name, dtype);
    return false;
  }
  const std::vector<T> hx = random_host<T>(p.batch * p.in_h * p.in_w * p.channels, rng);
  const std::vector<T> hw = random_host<T>(p.kernel_h * p.kernel_w * p.channels, rng);
  const std::vector<T> hb = random_host<T>(p.channels, rng);
  const DeviceBuffer<T> x(hx), w(hw), bias(hb);
  const GuardedOutput<T> y(p.batch * p.out_h * p.out_w * p.channels);
  flashdwc::FwdEpilogue epilogue;
  if (s.epilogue) epilogue.bias = bias.get(), epilogue.activation = flashdwc::Activation::kRelu;
  CK(flashdwc::run_dwconv_fwd<T>(p, x.get(), w.get(), y.get(), nullptr, epilogue));
  CK(cudaDeviceSynchronize());
  bool ok = y.guards_intact();
  if (!ok) std::printf("  %s: guard bytes around y were overwritten\n", s.name);
  const Mismatches m = compare_fwd(p, hx, hw, y.download(), s.epilogue ? &hb : nullptr);
  ok &= m.bad == 0;
  std::printf("  %-30s %-4s %s  (%lld checked, %lld bad, worst scaled err %.3g)\n", s.name, dtype,
              ok ? "ok  " : "FAIL", (long long)m.checked, (long long)m.bad, m.worst);
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
      // C not a multiple of 64: pairs padded to whole warps (lanes idle: 20%, 7%, 10%, 14%).
      same("k3_c160_pad_lanes", 2, 11, 19, 160, 3, false, true),
      same("k3_c480_w14", 4, 14, 14, 480, 3),                   // EfficientNet-B0's 14x14x480
      padded("k3_c232_pad", 2, 9, 13, 232, 3, 2, 0, 0, 1),
      same("k5_c56_one_warp", 3, 8, 10, 56, 5, true),         // 28 pairs: one warp, 4 lanes idle
      same("k5_c672_w14", 2, 14, 14, 672, 5, false, true),
      padded("k3_crop", 2, 26, 36, 64, 3, -1, 2, -1, 1),      // negative padding crops
      same("k3_tall_rowblocks", 1, 300, 40, 64, 3),           // 18 row blocks of 17 rows
      same("k3_w7_c768", 4, 7, 7, 768, 3),                    // one strip, 7 of its 8 columns
  };
  // fp32 only: C a multiple of 4 but not of 8 (15 and 31 words of 16 and 32 lanes).
  const Shape fp32_shapes[] = {
      same("fp32_k3_c60_w20", 2, 11, 20, 60, 3, false, true),
      same("fp32_k5_c124_w9", 3, 12, 9, 124, 5, true),
  };
  std::mt19937 rng(20261203);
  bool ok = true;
  for (const Shape& s : shapes) {
    ok &= run_shape<__nv_bfloat16>(s, rng);
    ok &= run_shape<__half>(s, rng);
    if (s.out_w <= 31) ok &= run_shape<float>(s, rng);
  }
  for (const Shape& s : fp32_shapes) ok &= run_shape<float>(s, rng);
  std::printf(ok ? "ALL OK\n" : "FAILURES\n");
  return ok ? 0 : 1;
}
