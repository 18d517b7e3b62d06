// Rows a block and outputs a thread of the register-filter forward (fwd/regfilter.cuh)
// on the small maps of the model registry (tests/shapes.py), bf16.
//
// Why: the plan gives a row block at least 16 output rows (plan/fwd_launch.cc), so a
// map of 7-31 rows runs one row block a column of threads, and a 64x7x7x256 5x5 layer
// launches 128 blocks of 128 threads on 132 SMs (a third of one wave at 3 blocks an
// SM), each thread walking all 11 input rows in turn. Through JAX such layers take
// 17-30 us against 1-10 us of bytes at the copy's speed, and XLA's conv about as long.
// Fewer rows a block (each block rereads K - 1 halo rows, from the L2 on these sizes)
// and fewer outputs a thread (more threads, the same FMAs) both add threads; this
// harness times both against the plan's grid, each output checked bit for bit against
// the plan's.
//
// Timing: batches of 50 back-to-back launches between two events (the kernels last a
// few microseconds, so a launch timed alone is mostly its own launch), median of 7
// batches, after warm-up; the inputs stay in the L2 between launches, as they do in a
// network where the layer before has just written them. "copy" is cudaMemcpyAsync of
// x's bytes to y, timed the same way.
//
// Build (from the repository root) and run:
//   nvcc -std=c++17 -arch=sm_90 -O3 --expt-relaxed-constexpr -Icsrc \
//        benchmarks/cuda/time_fwd_regfilter_rows.cu csrc/plan/*.cc -o time_fwd_regfilter_rows
//   ./time_fwd_regfilter_rows
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../../tests/cuda/harness.cuh"
#include "common/launch.cuh"
#include "fwd/regfilter.cuh"
#include "plan/fwd.h"
#include "plan/fwd_launch.h"

using flashdwc::DwConvParams;
using flashdwc::RegFilterGrid;
using T = __nv_bfloat16;

template <typename Launch>
float batch_us(Launch launch, int per_batch = 50, int batches = 7) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 10; ++i) launch();
  std::vector<float> times;
  for (int b = 0; b < batches; ++b) {
    cudaEventRecord(start);
    for (int i = 0; i < per_batch; ++i) launch();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(1e3f * ms / float(per_batch));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The plan's grid with other outputs a thread (kTW) and rows a block.
RegFilterGrid variant_grid(const DwConvParams& p, RegFilterGrid g, int64_t tw, int64_t rows) {
  const int64_t residue_rows = p.out_h;  // dilation 1 here
  g.strips = (p.out_w + tw - 1) / tw;
  g.columns = p.batch * g.strips * g.lane_words;
  g.rows_per_block = std::min(rows, residue_rows);
  g.row_blocks = (residue_rows + g.rows_per_block - 1) / g.rows_per_block;
  return g;
}

template <int kK, int kTW, int kMinBlocks>
float time_variant(const DwConvParams& p, const RegFilterGrid& g, const T* x, const T* w, T* y) {
  const dim3 grid(unsigned((g.columns + 127) / 128), unsigned(g.row_blocks));
  return batch_us([&] {
    flashdwc::dwconv_fwd_regfilter_kernel<T, kK, kTW, kMinBlocks, false>
        <<<grid, 128>>>(x, w, y, p, g, flashdwc::FwdEpilogue{});
  });
}

template <int kK, int kTW, int kMinBlocks>
void row(const char* model, const DwConvParams& p, const RegFilterGrid& base, int64_t rows, const T* x, const T* w,
         T* y, const std::vector<T>& expected, float plan_us) {
  const RegFilterGrid g = variant_grid(p, base, kTW, rows);
  cudaMemset(y, 0xFF, expected.size() * sizeof(T));
  const float us = time_variant<kK, kTW, kMinBlocks>(p, g, x, w, y);
  std::vector<T> got(expected.size());
  CK(cudaMemcpy(got.data(), y, got.size() * sizeof(T), cudaMemcpyDeviceToHost));
  const bool same = std::memcmp(got.data(), expected.data(), got.size() * sizeof(T)) == 0;
  const int64_t blocks = (g.columns + 127) / 128 * g.row_blocks;
  std::printf("  %-16s tw %d rows %3lld: %6lld blocks %7.2f us (%.2f of the plan's) %s %s\n", model, kTW,
              (long long)g.rows_per_block, (long long)blocks, us, us / plan_us, same ? "same" : "DIFFERENT",
              cudaGetErrorString(cudaGetLastError()));
}

template <int kK>
void layer(const char* model, int64_t n, int64_t hw, int64_t c) {
  constexpr int kTW = kK == 3 ? 8 : 4;
  constexpr int kMinBlocks = kK == 3 ? 4 : 3;
  const DwConvParams p = same_params(n, hw, hw, c, kK);
  if (flashdwc::plan_fwd(p, true, flashdwc::device_limits()) != flashdwc::FwdKernel::kRegFilter) {
    std::printf("%s %lldx%lldx%lldx%lld k%d: not the register-filter kernel's\n", model, (long long)n,
                (long long)hw, (long long)hw, (long long)c, kK);
    return;
  }
  const flashdwc::FwdLaunchPlan plan = flashdwc::plan_fwd_regfilter_launch(p, true, flashdwc::device_limits());
  const RegFilterGrid& base = plan.regfilter;
  const int64_t elems = n * hw * hw * c;
  DeviceBuffer<T> x(elems), w(kK * kK * c), y(elems);
  x.fill_uniform(1u);
  w.fill_uniform(2u);
  const dim3 grid(unsigned(plan.launch.grid.x), unsigned(plan.launch.grid.y));
  const float plan_us = batch_us([&] {
    flashdwc::dwconv_fwd_regfilter_kernel<T, kK, kTW, kMinBlocks, false>
        <<<grid, 128>>>(x.get(), w.get(), y.get(), p, base, flashdwc::FwdEpilogue{});
  });
  const std::vector<T> expected = y.download();
  const size_t bytes = size_t(elems) * sizeof(T);
  const float copy_us = batch_us([&] { cudaMemcpyAsync(y.get(), x.get(), bytes, cudaMemcpyDeviceToDevice); });
  std::printf("%s %lldx%lldx%lldx%lld k%d: plan tw %d rows %lld, %lld blocks %.2f us; copy %.2f us; %.1f GB/s\n",
              model, (long long)n, (long long)hw, (long long)hw, (long long)c, kK, kTW,
              (long long)base.rows_per_block, (long long)(grid.x * grid.y), plan_us, copy_us,
              2.0 * bytes / plan_us / 1e3);
  for (int64_t rows : {8, 4, 2, 1}) {
    if (rows < base.rows_per_block) row<kK, kTW, kMinBlocks>(model, p, base, rows, x.get(), w.get(), y.get(),
                                                             expected, plan_us);
  }
  for (int64_t rows : {int64_t(1) << 20, int64_t(4), int64_t(2)}) {
    row<kK, kTW / 2, kMinBlocks>(model, p, base, rows, x.get(), w.get(), y.get(), expected, plan_us);
  }
}

int main() {
  // The registry's bf16 forwards on the register-filter kernel with maps under 32 rows,
  // and two larger maps as controls (the plan gives them several row blocks already).
  layer<3>("mobilenet_v2", 64, 56, 144);
  layer<3>("mobilenet_v2", 64, 28, 192);
  layer<3>("mobilenet_v2", 64, 14, 384);
  layer<3>("mobilenet_v2", 64, 14, 576);
  layer<3>("mobilenet_v2", 64, 7, 960);
  layer<3>("mobilenet_v3", 64, 14, 480);
  layer<3>("mobilenet_v3", 64, 14, 672);
  layer<5>("mobilenet_v3", 64, 28, 120);
  layer<5>("mobilenet_v3", 64, 7, 960);
  layer<3>("efficientnet_b0", 64, 7, 1152);
  layer<5>("efficientnet_b0", 64, 7, 1152);
  layer<5>("efficientnet_b0", 64, 14, 672);
  layer<5>("efficientnet_b0", 64, 28, 240);
  layer<3>("efficientnet_b3", 32, 10, 1392);
  layer<5>("efficientnet_b3", 32, 19, 816);
  layer<3>("efficientnet_b3", 32, 19, 576);
  layer<3>("van_b0", 64, 7, 2048);
  layer<3>("van_b0", 64, 14, 1280);
  layer<5>("van_b0", 64, 7, 256);
  layer<5>("van_b0", 64, 14, 160);
  layer<5>("replknet_31b", 32, 7, 1024);
  layer<5>("replknet_31b", 32, 14, 512);
  layer<5>("replknet_31b", 32, 56, 128);
  layer<5>("slak_t", 32, 7, 768);
  layer<5>("slak_t", 32, 14, 384);
  layer<5>("unireplknet_t", 64, 7, 640);
  layer<5>("unireplknet_t", 64, 14, 320);
  return 0;
}
