// Kernel-level timing of run_dwconv_bwd_filter (atomic mode, no JAX) at benchmark
// points: median of 20 launches after 3 warm-up, cudaEvent timed, U(-1, 1) data
// filled on the device. For A/B tests of filter-gradient variants; the workspace is
// a fixed 512 MiB, so that one harness builds against any version of the launcher.
// Build (from the repository root) and run:
//   nvcc -std=c++17 -arch=sm_90 -O3 --expt-relaxed-constexpr -Icsrc \
//        benchmarks/cuda/time_bwd_filter.cu csrc/bwd_filter/*.cu csrc/plan/bwd_filter.cc -o time_bwd_filter
//   ./time_bwd_filter <tag>
// or, against the objects of an installed build (no second compile of the kernels):
//   nvcc ... benchmarks/cuda/time_bwd_filter.cu build/*/CMakeFiles/_jax_flashdwc.dir/csrc/{fwd,bwd_data,bwd_filter,plan}/*.o
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>
#include "bwd_filter/launch.h"
#include "plan/bwd_filter.h"
#include "fill_uniform.cuh"
using flashdwc::DwConvParams;
constexpr size_t kWorkspaceBytes = size_t(512) << 20;
template <typename T>
void point(const char* tag, float* ws, int64_t n, int64_t h, int64_t w, int64_t c, int64_t k) {
  DwConvParams p{};
  p.batch = n, p.in_h = p.out_h = h, p.in_w = p.out_w = w, p.channels = c, p.kernel_h = p.kernel_w = k;
  p.stride_h = p.stride_w = 1, p.dilation_h = p.dilation_w = 1;
  p.pad_top = p.pad_left = (k - 1) / 2;
  const int64_t elements = n * h * w * c;
  T *x, *dy, *dw;
  cudaMalloc(&x, elements * sizeof(T)); cudaMalloc(&dy, elements * sizeof(T)); cudaMalloc(&dw, k * k * c * sizeof(T));
  fill_uniform<<<1024, 256>>>(x, elements, 1u);
  fill_uniform<<<1024, 256>>>(dy, elements, 2u);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) flashdwc::run_dwconv_bwd_filter(p, x, dy, dw, ws, false, nullptr);
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    cudaEventRecord(a); flashdwc::run_dwconv_bwd_filter(p, x, dy, dw, ws, false, nullptr); cudaEventRecord(b);
    cudaEventSynchronize(b); float t; cudaEventElapsedTime(&t, a, b); ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  std::printf("%s bwd_filter %s %lldx%lldx%lldx%lld k%lld %.3f ms %.1f TF/s %.2f TB/s %s\n", tag,
              sizeof(T) == 4 ? "f32" : std::is_same_v<T, __half> ? "f16" : "bf16", (long long)n, (long long)h,
              (long long)w, (long long)c, (long long)k, ms[10], 2.0 * elements * k * k / ms[10] / 1e9,
              2.0 * elements * sizeof(T) / ms[10] / 1e9, cudaGetErrorString(cudaGetLastError()));
  cudaFree(x); cudaFree(dy); cudaFree(dw);
}
// One point from the command line (for Nsight Compute, `.ci/gpu profile`):
//   ./time_bwd_filter <tag> f32|bf16|f16 N H W C K
bool point_from_args(int argc, char** argv, float* ws) {
  if (argc != 8) return false;
  const std::string dtype = argv[2];
  int64_t v[5];
  for (int i = 0; i < 5; ++i) v[i] = std::atoll(argv[3 + i]);
  if (dtype == "f32") point<float>(argv[1], ws, v[0], v[1], v[2], v[3], v[4]);
  else if (dtype == "bf16") point<__nv_bfloat16>(argv[1], ws, v[0], v[1], v[2], v[3], v[4]);
  else if (dtype == "f16") point<__half>(argv[1], ws, v[0], v[1], v[2], v[3], v[4]);
  else std::fprintf(stderr, "dtype %s: expected f32, bf16 or f16\n", argv[2]);
  return true;
}
int main(int argc, char** argv) {
  const char* tag = argc > 1 ? argv[1] : "run";
  float* ws;
  cudaMalloc(&ws, kWorkspaceBytes);
  if (point_from_args(argc, argv, ws)) {
    cudaFree(ws);
    return 0;
  }
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
  cudaFree(ws);
  return 0;
}
