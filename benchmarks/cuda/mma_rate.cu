// The compute roofs of the kernels, measured rather than quoted: how many dense
// FLOP/s the m16n8k16 mma.sync (fp16 and bf16 in, fp32 accumulate) and the fp32 FFMA
// reach on this GPU when nothing else is issued. Why: issue 4's tensor-core forward
// is an mma.sync kernel, and the roof the perf notes compared it with was the bf16
// matmul's 778 TFLOP/s (../shared/perf/README.md), which cuBLAS reaches with wgmma,
// an instruction the mma.sync kernels do not use; a kernel at 56% useful density can
// reach at most 56% of the mma.sync rate, and that rate was never measured here.
// Build (from the repository root) and run:
//   nvcc -std=c++17 -arch=sm_90 -O3 -Icsrc benchmarks/cuda/mma_rate.cu -o mma_rate
//   ./mma_rate
// Each line: the instruction, independent accumulator chains a warp, warps an SM,
// the median time of 10 launches after 2 warm-ups (cudaEvent), and dense TFLOP/s
// (4096 FLOPs an m16n8k16, 2 an FFMA).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "common/mma_sync.cuh"
#include "../../tests/cuda/harness.cuh"

namespace {

constexpr int kThreads = 128;

// kChains independent m16n8k16 chains a warp, so that one MMA's latency is hidden
// behind the others'. The operands are fixed per thread and not foldable (they come
// from `seed`); the sums are stored so that the loop is not removed.
template <typename T, int kChains>
__global__ void __launch_bounds__(kThreads) mma_loop(float* out, int iters, uint32_t seed) {
  // bits of 1.0 in the type (0x3f80 in bf16, 0x3c00 in fp16) with low mantissa bits varied
  const uint32_t one = std::is_same_v<T, __half> ? 0x3c00u : 0x3f80u;
  const uint32_t lo = one | ((seed + threadIdx.x) & 7u), hi = one | ((seed >> 3) & 7u);
  const uint32_t a[4] = {lo | (hi << 16), hi | (lo << 16), lo | (lo << 16), hi | (hi << 16)};
  const uint32_t b0 = a[1], b1 = a[2];
  float d[kChains][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) flashdwc::mma_16816<T>(d[c], a, b0, b1);
  }
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
  out[blockIdx.x * kThreads + threadIdx.x] = s;
}

// kChains independent fp32 FMA chains a thread.
template <int kChains>
__global__ void __launch_bounds__(kThreads) ffma_loop(float* out, int iters, uint32_t seed) {
  const float y = 1.0f + 1e-7f * float(seed & 15u), z = 1e-7f * float(threadIdx.x);
  float x[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) x[c] = float(c + threadIdx.x);
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) x[c] = fmaf(x[c], y, z);
  }
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s += x[c];
  out[blockIdx.x * kThreads + threadIdx.x] = s;
}

template <typename Kernel>
void report(const char* what, Kernel kernel, int chains, int warps_per_sm, int sms, float* out, int iters,
            double flops_per_iter_thread) {
  const int blocks = sms * warps_per_sm / (kThreads / 32);
  const float ms = median_launch_ms([&] { kernel<<<blocks, kThreads>>>(out, iters, 12345u); }, 2, 10);
  const cudaError_t err = cudaGetLastError();
  const double flops = double(blocks) * kThreads * iters * flops_per_iter_thread;
  std::printf("%-8s chains %d  warps/SM %2d  %8.3f ms  %7.1f TFLOP/s  %s\n", what, chains, warps_per_sm, ms,
              flops / (ms * 1e-3) / 1e12, cudaGetErrorString(err));
}

}  // namespace

int main() {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device);
  std::printf("%s, %d SMs\n", prop.name, sms);
  DeviceBuffer<float> out_buffer(int64_t(sms) * 64 * kThreads);
  float* out = out_buffer.get();
  const int mma_iters = 1 << 14, ffma_iters = 1 << 16;
  // An m16n8k16 is 4096 FLOPs for the warp: 128 a thread.
  for (int warps : {4, 8, 16, 32}) {
    report("bf16 mma", mma_loop<__nv_bfloat16, 2>, 2, warps, sms, out, mma_iters, 2 * 128.0);
    report("bf16 mma", mma_loop<__nv_bfloat16, 4>, 4, warps, sms, out, mma_iters, 4 * 128.0);
    report("bf16 mma", mma_loop<__nv_bfloat16, 8>, 8, warps, sms, out, mma_iters, 8 * 128.0);
    report("fp16 mma", mma_loop<__half, 4>, 4, warps, sms, out, mma_iters, 4 * 128.0);
    report("fp16 mma", mma_loop<__half, 8>, 8, warps, sms, out, mma_iters, 8 * 128.0);
  }
  for (int warps : {8, 16, 32, 64}) {
    report("fp32 fma", ffma_loop<4>, 4, warps, sms, out, ffma_iters, 4 * 2.0);
    report("fp32 fma", ffma_loop<8>, 8, warps, sms, out, ffma_iters, 8 * 2.0);
  }
  return 0;
}
