// Kernel-level timing of run_dwconv_fwd (the dispatcher, no JAX) at benchmark
// points, fp32 and bf16: median of 20 launches after 3 warm-up, cudaEvent timed,
// U(-1, 1) data filled on the device. Used for A/B tests of kernel variants,
// where building the JAX extension twice would cost more device time.
// Build (from the repository root) and run:
//   nvcc -std=c++17 -arch=sm_90 -O3 --expt-relaxed-constexpr -Icsrc \
//        benchmarks/cuda/time_fwd.cu csrc/fwd/{launch,mma,regfilter}.cu csrc/plan/*.cc \
//        -o time_fwd
//   ./time_fwd <tag>
// or, against the objects of an installed build (no second compile of the kernels):
//   nvcc ... benchmarks/cuda/time_fwd.cu build/*/CMakeFiles/_jax_flashdwc.dir/csrc/{fwd,bwd_data,bwd_filter,plan}/*.o
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "../../tests/cuda/harness.cuh"
#include "fwd/launch.h"

// Dilation d > 1 at stride 1: "SAME" padding d (k - 1) / 2 on each side (k odd).
template <typename T>
void point(const char* tag, int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t s, int64_t d = 1) {
  flashdwc::DwConvParams p = same_params(n, h, w, c, k, s);
  if (d > 1) {
    const int64_t pad = d * (k - 1) / 2;
    const flashdwc::ConvGeometry g{1, 1, pad, pad, d, d};
    p = flashdwc::make_dwconv_params(n, h, w, h, w, c, k, k, g, false);
  }
  const int64_t ye = n * p.out_h * p.out_w * c;
  DeviceBuffer<T> x(n * h * w * c), y(ye), wt(k * k * c);
  x.fill_uniform(1u);
  wt.fill_uniform(2u);
  const float ms = median_launch_ms([&] { flashdwc::run_dwconv_fwd(p, x.get(), wt.get(), y.get(), nullptr); }, 3, 20);
  std::printf("%s %s %lldx%lldx%lldx%lld k%lld s%lld d%lld %.3f ms %.1f TF/s %s\n", tag, dtype_name<T>(),
              (long long)n, (long long)h, (long long)w, (long long)c, (long long)k, (long long)s, (long long)d, ms,
              2.0 * ye * k * k / ms / 1e9, cudaGetErrorString(cudaGetLastError()));
}
// One point from the command line (for Nsight Compute, `.ci/gpu profile`):
//   ./time_fwd <tag> f32|bf16|f16 N H W C K STRIDE [DILATION]
bool point_from_args(int argc, char** argv) {
  if (argc != 9 && argc != 10) return false;
  int64_t v[7] = {0, 0, 0, 0, 0, 0, 1};
  for (int i = 0; i < argc - 3; ++i) v[i] = std::atoll(argv[3 + i]);
  if (!with_dtype(argv[2],
                  [&](auto tag) { point<decltype(tag)>(argv[1], v[0], v[1], v[2], v[3], v[4], v[5], v[6]); })) {
    std::fprintf(stderr, "dtype %s: expected f32, bf16 or f16\n", argv[2]);
  }
  return true;
}
int main(int argc, char** argv) {
  const char* tag = argc > 1 ? argv[1] : "run";
  if (point_from_args(argc, argv)) return 0;
  for (int k : {3, 7, 13, 31, 51}) point<float>(tag, 128, 64, 64, 256, k, 1);
  for (int k : {3, 13, 31}) point<float>(tag, 128, 128, 128, 128, k, 1);
  for (int k : {3, 13, 51}) point<float>(tag, 128, 32, 32, 1024, k, 1);
  point<float>(tag, 128, 56, 56, 96, 7, 1);
  point<float>(tag, 128, 56, 56, 128, 31, 1);
  // The row-stream kernel's other filter widths (k = 3 above), fp32.
  for (int k : {5, 7}) point<float>(tag, 128, 128, 128, 128, k, 1);
  for (int k : {5, 7}) point<float>(tag, 128, 32, 32, 1024, k, 1);
  point<float>(tag, 128, 112, 112, 96, 3, 2);
  point<float>(tag, 128, 56, 56, 144, 3, 2);
  // fp32 from KW = 9 (the GEMV kernel): the paper's other k and the other
  // RepLKNet-31B layers.
  for (int k : {9, 17, 21}) point<float>(tag, 128, 64, 64, 256, k, 1);
  for (int k : {9, 51}) point<float>(tag, 128, 128, 128, 128, k, 1);
  point<float>(tag, 128, 28, 28, 256, 29, 1);
  point<float>(tag, 128, 14, 14, 512, 27, 1);
  point<float>(tag, 128, 7, 7, 1024, 13, 1);
  for (int k : {3, 7, 13, 17, 31, 51}) point<__nv_bfloat16>(tag, 128, 64, 64, 256, k, 1);
  for (int k : {7, 31}) point<__nv_bfloat16>(tag, 128, 128, 128, 128, k, 1);
  for (int k : {7, 31}) point<__nv_bfloat16>(tag, 128, 32, 32, 1024, k, 1);
  // Half precision below the tensor-core kernel's k = 7 (row-stream at stride 1, GEMV at stride 2).
  for (int k : {3, 5}) point<__nv_bfloat16>(tag, 128, 128, 128, 128, k, 1);
  for (int k : {3, 5}) point<__nv_bfloat16>(tag, 128, 32, 32, 1024, k, 1);
  for (int k : {3, 5}) point<__half>(tag, 128, 64, 64, 256, k, 1);
  // ConvNeXt-T's depthwise layers in bf16 (k = 7: tensor cores, or the row-stream
  // kernel in a build with kMmaMinKernelW raised).
  for (auto [h, c] : {std::pair{56, 96}, {28, 192}, {14, 384}, {7, 768}}) {
    point<__nv_bfloat16>(tag, 128, h, h, c, 7, 1);
  }
  point<__nv_bfloat16>(tag, 128, 112, 112, 96, 3, 2);
  point<__nv_bfloat16>(tag, 128, 56, 56, 144, 3, 2);
  point<__nv_bfloat16>(tag, 128, 28, 28, 192, 3, 2);
  return 0;
}
