// Standalone GPU check of launch_fwd_mma against a CPU fp32 reference.
// Build (from the repository root):
//   nvcc -std=c++17 -arch=sm_90 -O3 --expt-relaxed-constexpr -Icsrc \
//        tests/cuda/check_fwd_mma.cu csrc/fwd/mma.cu csrc/plan/*.cc -o check_fwd_mma
// Run: ./check_fwd_mma   (--big adds a > 2^31-element sampled case; --time times
// the kernel on the benchmark's bf16 points, median of 20 calls after warm-up)
// Every shape runs once with the launcher's choice of output tiles per block and
// once with each fixed count 1 to 4, 8 and 16.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/launch.cuh"
#include "fwd/mma.h"
#include "harness.cuh"
#include "plan/fwd.h"

using flashdwc::DwConvParams;

struct Shape {
  const char* name;
  int64_t n, h, w, c, kh, kw, pad_top, pad_left, out_h, out_w;
  bool flip;
};

// "SAME" output with the usual TF padding.
Shape same(const char* name, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw, bool flip = false) {
  return {name, n, h, w, c, kh, kw, (kh - 1) / 2, (kw - 1) / 2, h, w, flip};
}
Shape valid(const char* name, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw) {
  return {name, n, h, w, c, kh, kw, 0, 0, h - kh + 1, w - kw + 1, false};
}

DwConvParams params_of(const Shape& s) {
  return conv_params(s.n, s.h, s.w, s.c, s.kh, s.kw, s.pad_top, s.pad_left, s.out_h, s.out_w, 1, s.flip);
}

// tiles: output tiles per block passed to launch_fwd_mma (0: its own choice).
template <typename T>
bool run_shape(const Shape& s, std::mt19937& rng, int64_t samples, int tiles = 0) {
  const DwConvParams p = params_of(s);
  if (!flashdwc::can_implement_fwd_mma(p, true, flashdwc::device_limits())) {
    std::printf("  %-28s %s: NOT SUPPORTED (unexpected)\n", s.name, dtype_name<T>());
    return false;
  }
  const std::vector<T> hx = random_host<T>(p.batch * p.in_h * p.in_w * p.channels, rng);
  const std::vector<T> hw = random_host<T>(p.kernel_h * p.kernel_w * p.channels, rng);
  const DeviceBuffer<T> x(hx), w(hw);
  const GuardedOutput<T> y(p.batch * p.out_h * p.out_w * p.channels);
  CK(flashdwc::launch_fwd_mma<T>(p, x.get(), w.get(), y.get(), 0, {}, {}, tiles));
  CK(cudaDeviceSynchronize());
  bool ok = y.guards_intact();
  if (!ok) std::printf("  %s: guard bytes around y were overwritten\n", s.name);
  const Mismatches m = compare_fwd<T>(p, hx, hw, y.download(), nullptr, samples, &rng);
  ok &= m.bad == 0;
  std::printf("  %-28s %-4s tiles %d  %s  (%lld checked, %lld bad, worst scaled err %.3g)\n", s.name,
              dtype_name<T>(), tiles, ok ? "ok  " : "FAIL", (long long)m.checked, (long long)m.bad, m.worst);
  return ok;
}

// Median time of launch_fwd_mma over 20 calls after 3 warm-up calls, on random bf16.
void time_point(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k) {
  const DwConvParams p = same_params(n, h, w, c, k);
  const int64_t elems = n * h * w * c;
  DeviceBuffer<__nv_bfloat16> x(elems), y(elems), wt(k * k * c);
  x.fill_uniform(1u);
  wt.fill_uniform(2u);
  const double med =
      median_launch_ms([&] { CK(flashdwc::launch_fwd_mma(p, x.get(), wt.get(), y.get(), nullptr)); }, 3, 20);
  std::printf("  time bf16 %lldx%lldx%lldx%lld k%lld: %.3f ms  %.1f TFLOP/s  %.0f GB/s\n", (long long)n,
              (long long)h, (long long)w, (long long)c, (long long)k, med, 2.0 * elems * k * k / med / 1e9,
              2.0 * elems * 2 / med / 1e6);
}

int main(int argc, char** argv) {
  const bool big = argc > 1 && std::strcmp(argv[1], "--big") == 0;
  if (argc > 1 && std::strcmp(argv[1], "--time") == 0) {
    for (int64_t k : {3, 7, 13, 17, 31, 51}) time_point(128, 64, 64, 256, k);
    for (int64_t k : {7, 31}) time_point(128, 128, 128, 128, k);
    for (int64_t k : {7, 31}) time_point(128, 32, 32, 1024, k);
    return 0;
  }
  std::mt19937 rng(1234);
  std::vector<Shape> shapes = {
      same("k3 same C16 W130", 2, 17, 130, 16, 3, 3),
      same("k3 same C96 W7", 2, 9, 7, 96, 3, 3),
      same("k7 same C96", 2, 20, 20, 96, 7, 7),
      same("k9 same C13 W7", 3, 11, 7, 13, 9, 9),
      valid("k13 valid C16 W140", 1, 30, 140, 16, 13, 13),
      same("k31 same C16", 1, 40, 40, 16, 31, 31),
      same("k31 same C40 W130", 1, 33, 130, 40, 31, 31),
      same("51x5 same C24", 1, 60, 33, 24, 51, 5),
      same("5x51 same C8 W200", 1, 9, 200, 8, 5, 51),
      same("k1 C16", 2, 5, 129, 16, 1, 1),
      same("17x10 same C16", 1, 37, 131, 16, 17, 10),
      same("10x17 same C13", 1, 19, 70, 13, 10, 17),
      same("k3 flip C16", 2, 17, 130, 16, 3, 3, true),
      same("7x5 flip C21", 1, 23, 45, 21, 7, 5, true),
      // Partial windows: padding larger than the filter needs, outputs past the input.
      {"3x7 partial C16", 2, 12, 100, 16, 3, 7, 2, 9, 16, 110, false},
      // Cropping: negative padding.
      {"5x5 crop C16", 1, 20, 150, 16, 5, 5, -2, -3, 12, 140, false},
      // Outputs entirely outside the input.
      {"3x3 far pad C16", 1, 4, 5, 16, 3, 3, 20, 200, 30, 260, false},
      // Fragments and filter rows skipped for blocks whose windows miss the image.
      {"2x127 shifted C16", 1, 3, 40, 16, 2, 127, 0, 150, 3, 200, false},
      {"1x18 fragment edge C16", 1, 2, 10, 16, 1, 18, 0, 144, 2, 130, false},
      {"3x127 W20 C16", 1, 4, 20, 16, 3, 127, 1, 63, 4, 20, false},
      {"29x3 tall pad C16", 2, 6, 10, 16, 29, 3, 20, 1, 30, 10, false},
      same("k63 same C16", 1, 70, 70, 16, 63, 63),
      // Where the last fragment's ninth tap lies: past the filter (KW = 8, 16, 24),
      // on its last tap (KW = 9, 17, 25, 33), and a 9-tap last fragment of one tap
      // beyond an 8-tap one (KW = 26).
      same("k8 same C16 W130", 1, 12, 130, 16, 8, 8),
      same("16x16 same C16 W64 N3", 3, 20, 64, 16, 16, 16),
      same("k24 same C16 W140", 1, 28, 140, 16, 24, 24),
      same("k25 same C16 W32 N5", 5, 30, 32, 16, 25, 25),
      same("k26 same C16 W90", 1, 30, 90, 16, 26, 26),
      same("k33 same C16 W130", 1, 36, 130, 16, 33, 33),
      // Images side by side in a strip: 4 per strip (W <= 32) over two strips, the
      // last holding one image; 2 per strip (W <= 64) with an odd N; W = 33.
      same("k7 same C16 W32 N5", 5, 12, 32, 16, 7, 7),
      same("k9 same C24 W64 N3", 3, 10, 64, 24, 9, 9),
      same("k13 same C16 W33 N2", 2, 14, 33, 16, 13, 13),
      same("3x127 same C16", 1, 10, 300, 16, 3, 127),
      same("k3 C4000", 1, 9, 9, 4000, 3, 3),
      // Several output tiles per block: a last tile block with fewer tiles (9 tiles),
      // 4 images per strip, and tiles whose first filter rows read only padding.
      same("k9 same C16 W40 H70 N3", 3, 70, 40, 16, 9, 9),
      same("k9 same C32 W32 H45 N6", 6, 45, 32, 32, 9, 9),
      same("k5 same C24 W130 H33", 1, 33, 130, 24, 5, 5),
      {"9x9 tall pad C16", 1, 10, 20, 16, 9, 9, 20, 4, 40, 20, false},
      {"8x3 bottom pad C16", 2, 20, 50, 16, 8, 3, 0, 1, 41, 50, false},
      // Half chunks (4 filter rows a stage, an 11-row ring) where 8-row stages leave a
      // block alone on its SM: k = 21 and 31 over 4 images a strip (two strips, the
      // second with 1 image), 51 over 2 (odd N), and a 23-tall filter (chunks 4 x 5 + 3).
      same("k21 same C16 W32 N5 (short chunks)", 5, 30, 32, 16, 21, 21),
      same("k31 same C24 W30 N4 (short chunks)", 4, 36, 30, 24, 31, 31),
      same("k51 same C16 W64 N3 (short chunks)", 3, 60, 64, 16, 51, 51),
      same("23x29 same C16 W32 N4 (short chunks)", 4, 27, 32, 16, 23, 29),
      // Stages of 9 filter rows for filters taller than 9 (with_nine_row_chunks): 17
      // rows as 9 + 8 over three channel blocks, 27 as 9 x 3 over two images, 51 with
      // one filter copy, a 26x17 filter 2 images a strip, 45 rows 4 images a strip.
      same("k17 same C40 W100 (nine-row chunks)", 1, 20, 100, 40, 17, 17),
      same("k27 same C16 W128 N2 (nine-row chunks)", 2, 30, 128, 16, 27, 27),
      same("k51 same C16 W130 (nine-row chunks, one copy)", 1, 56, 130, 16, 51, 51),
      same("26x17 same C16 W60 N3 (nine-row chunks)", 3, 28, 60, 16, 26, 17),
      same("k45 same C16 W32 N4 (nine-row chunks)", 4, 50, 32, 16, 45, 45),
      // Channel blocks fastest in the grid: several tiles a block, 2 images a strip
      // and 3 channel blocks.
      same("k9 same C48 W64 H40 N3 (channel blocks)", 3, 40, 64, 48, 9, 9),
      // The streaming kernel's look-ahead (fwd/mma_stream.cuh, one image a strip): 19
      // tile rows (with 16 tiles a block, a last tile block of 3), 7 and 9 rows, a
      // ragged last channel block over two strips, and no padding.
      same("k9 same C16 W130 H150 N2 (look-ahead)", 2, 150, 130, 16, 9, 9),
      same("k7 same C32 W129 H150 (look-ahead)", 1, 150, 129, 32, 7, 7),
      same("9x5 same C24 W200 H70 N2 (look-ahead)", 2, 70, 200, 24, 9, 5),
      valid("k9 valid C16 W140 H90 (look-ahead)", 1, 90, 140, 16, 9, 9),
      // Several tiles a block for filters 10-13 rows tall (one image a strip, 16-byte
      // pixels; one chunk of KH rows, run as 9 + the rest): 13 rows over two images and
      // a ragged channel block, 11x13 with a last tile block of fewer tiles, 10x10 with
      // C % 8 != 0 and 12x7 over 2 images a strip (both one tile a block), and tiles
      // whose filter rows read only padding.
      same("k13 same C24 W130 H40 N2 (tall tiles)", 2, 40, 130, 24, 13, 13),
      same("11x13 same C16 W150 H70 (tall tiles)", 1, 70, 150, 16, 11, 13),
      same("10x10 same C12 W140 H30 (tall tiles, scalar)", 1, 30, 140, 12, 10, 10),
      same("12x7 same C16 W60 H28 N3 (tall tiles, two images)", 3, 28, 60, 16, 12, 7),
      {"13x13 tall pad C16 W130 (tall tiles)", 1, 12, 130, 16, 13, 13, 20, 6, 48, 130, false},
      // Several tiles a block with chunks, odd tiles' chunks in reverse order
      // (chunked_multi_tile_grid): 17 rows as 9 + 8 over a ragged channel block, 21 over
      // 2 images a strip (8 + 8 + 5), 31 in half chunks over 4 images, and a 19-row
      // filter whose top tiles read only padding (chunk starts that move from tile to
      // tile).
      same("k17 same C24 W130 H70 N2 (chunked tiles)", 2, 70, 130, 24, 17, 17),
      same("k21 same C16 W64 H60 N3 (chunked tiles, two images)", 3, 60, 64, 16, 21, 21),
      same("k31 same C16 W32 H50 N5 (chunked tiles, short chunks)", 5, 50, 32, 16, 31, 31),
      {"19x5 tall pad C16 W60 (chunked tiles)", 1, 20, 60, 16, 19, 5, 25, 2, 60, 60, false},
  };
  bool ok = true;
  for (const Shape& s : shapes) {
    for (int tiles : {0, 1, 2, 3, 4, 8, 16}) {
      ok &= run_shape<__half>(s, rng, 0, tiles);
      ok &= run_shape<__nv_bfloat16>(s, rng, 0, tiles);
    }
  }
  {
    // Rejected geometry.
    DwConvParams p = params_of(same("s2", 1, 8, 8, 16, 3, 3));
    p.stride_w = 2;
    if (flashdwc::can_implement_fwd_mma(p, true, flashdwc::device_limits())) {
      std::printf("  stride 2 accepted (unexpected)\n");
      ok = false;
    }
  }
  if (big) {
    // More than 2^31 elements in x and y: 64-bit addressing; sampled reference.
    const Shape s = same("big 2^31+ k7 C2056", 1, 1024, 1040, 2056, 7, 7);
    ok &= run_shape<__half>(s, rng, 20000);
  }
  std::printf(ok ? "ALL OK\n" : "FAILURES\n");
  return ok ? 0 : 1;
}
