// Kernel-level timing of run_dwconv_bwd_filter (atomic mode, no JAX) at benchmark
// points: median of 20 launches after 3 warm-up, cudaEvent timed, U(-1, 1) data
// filled on the device. For A/B tests of filter-gradient variants; the workspace is
// a fixed 512 MiB, so that one harness builds against any version of the launcher.
// Build (from the repository root) and run:
//   nvcc -std=c++17 -arch=sm_90 -O3 --expt-relaxed-constexpr -Icsrc \
//        benchmarks/cuda/time_bwd_filter.cu csrc/bwd_filter/*.cu csrc/plan/*.cc -o time_bwd_filter
//   ./time_bwd_filter <tag>
// or, against the objects of an installed build (no second compile of the kernels):
//   nvcc ... benchmarks/cuda/time_bwd_filter.cu build/*/CMakeFiles/_jax_flashdwc.dir/csrc/{fwd,bwd_data,bwd_filter,plan}/*.o
#include <cstdio>
#include <cstdlib>

#include "../../tests/cuda/harness.cuh"
#include "bwd_filter/launch.h"
#include "plan/bwd_filter.h"

constexpr size_t kWorkspaceBytes = size_t(512) << 20;
template <typename T>
void point(const char* tag, float* ws, int64_t n, int64_t h, int64_t w, int64_t c, int64_t k) {
  const flashdwc::DwConvParams p = same_params(n, h, w, c, k);
  const int64_t elements = n * h * w * c;
  DeviceBuffer<T> x(elements), dy(elements), dw(k * k * c);
  x.fill_uniform(1u);
  dy.fill_uniform(2u);
  const float ms = median_launch_ms(
      [&] { flashdwc::run_dwconv_bwd_filter(p, x.get(), dy.get(), dw.get(), ws, false, nullptr); }, 3, 20);
  std::printf("%s bwd_filter %s %lldx%lldx%lldx%lld k%lld %.3f ms %.1f TF/s %.2f TB/s %s\n", tag, dtype_name<T>(),
              (long long)n, (long long)h, (long long)w, (long long)c, (long long)k, ms,
              2.0 * elements * k * k / ms / 1e9, 2.0 * elements * sizeof(T) / ms / 1e9,
              cudaGetErrorString(cudaGetLastError()));
}
// One point from the command line (for Nsight Compute, `.ci/gpu profile`):
//   ./time_bwd_filter <tag> f32|bf16|f16 N H W C K
bool point_from_args(int argc, char** argv, float* ws) {
  if (argc != 8) return false;
  int64_t v[5];
  for (int i = 0; i < 5; ++i) v[i] = std::atoll(argv[3 + i]);
  if (!with_dtype(argv[2], [&](auto tag) { point<decltype(tag)>(argv[1], ws, v[0], v[1], v[2], v[3], v[4]); })) {
    std::fprintf(stderr, "dtype %s: expected f32, bf16 or f16\n", argv[2]);
  }
  return true;
}
int main(int argc, char** argv) {
  const char* tag = argc > 1 ? argv[1] : "run";
  DeviceBuffer<uint8_t> workspace(kWorkspaceBytes);
  float* ws = reinterpret_cast<float*>(workspace.get());
  if (point_from_args(argc, argv, ws)) return 0;
  for (int k : {3, 5, 7, 13, 31}) point<__nv_bfloat16>(tag, ws, 128, 128, 128, 128, k);
  // The filter widths where the fp16/bf16 tiling rule changes between widths 4 and 8.
  for (int k : {5, 9, 13, 17, 21, 27, 29, 31, 51}) point<__nv_bfloat16>(tag, ws, 128, 64, 64, 256, k);
  for (int k : {3, 7}) point<__nv_bfloat16>(tag, ws, 128, 64, 64, 256, k);
  for (int k : {3, 7}) point<__nv_bfloat16>(tag, ws, 128, 32, 32, 1024, k);
  for (int k : {3, 7}) point<__half>(tag, ws, 128, 64, 64, 256, k);
  for (int k : {3, 7, 31}) point<float>(tag, ws, 128, 64, 64, 256, k);
  // fp32 from KW = 9, where one channel per lane competes with width 4.
  for (int k : {9, 13, 17, 21, 51}) point<float>(tag, ws, 128, 64, 64, 256, k);
  point<float>(tag, ws, 128, 128, 128, 128, 31);
  return 0;
}
