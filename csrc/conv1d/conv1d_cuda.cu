// Kernel choice and launch geometry of the CUDA 1-D convolution.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "conv1d/conv1d_cuda.h"
#include "common/launch.cuh"
#include "conv1d/conv1d_kernels.cuh"

namespace flashdwc {
namespace {

using namespace conv1d_cuda;

// Launch geometry. ncu (H100, bf16, K = 4, SiLU + bias, 8x2048x1536) measured the
// forward with 64-position runs, 8 channels and 8 loads ahead a thread at 168
// registers, 13% of peak warps active and 14% of DRAM bandwidth (184 us, where an
// XLA fusion moving the same bytes takes 35 us), and the backward with 128-position
// runs at 251 registers, 9% warps active, 14% of DRAM (300 us): too few threads, each
// holding too many registers. The forward's constants trade per-thread lookahead for
// resident threads; the backward's do not (below).
//
// Forward: 16-position runs of 4 channels (8 bytes bf16/fp16, 16 fp32), 4 loads ahead.
// 16k tokens x 1536 channels then give 393k threads (the H100 holds 270k; 132 SMs x
// 2048), 64k x 5120 give 5.2M; each run rereads K - 1 = 3 halo inputs (19% more
// loads, from L2: the neighbouring run's block is a few blocks away in the grid).
// ptxas (sm_90) fits every window instance in 80 registers without spills at 6
// blocks an SM (bf16 K = 4: 80, against 152 at 8 channels and 128 with spills at 4
// blocks an SM); 8 loads ahead spill at 80 registers.
constexpr int64_t kFwdRun = 16;
constexpr int kFwdAhead = 4;
constexpr int kFwdChannels = 4;
// Backward, two window kernels over the same 128-position chunks (Conv1dParams::chunk)
// and the same filter and bias partial slots:
// - one run a thread (conv1d_bwd_window): 16 bytes of channels, U = 4 positions of x
//   and dy loaded ahead; bf16 K = 4 at 251 registers, 2 blocks of 128 an SM;
// - a chunk split over 4 warps (conv1d_bwd_window_split): 2 channels a thread, 3
//   ahead, the warps' partials summed in shared memory in warp order; 76-95
//   registers, 5 blocks an SM, 16x the threads (bf16).
// Measured on an H100 (bf16, K = 4, bench_conv1d, 2 builds in one session): the split
// kernel took 0.85-0.95 of the time at 16k-64k tokens x 1536 channels and 16k x 5120,
// where the one-run kernel's grid is 0.7-2.9 waves of resident threads (2 blocks of
// 128 an SM: 33.8k on 132 SMs), and 1.09-1.10 at 32k-64k x 5120 (4.8-9.7 waves). The
// split kernel runs where the one-run grid would be under kBwdSplitBelowWaves waves.
constexpr int kBwdAhead = 4;
constexpr int kBwdChannels = 8;
constexpr int kBwdSplitAhead = 3;
constexpr int kBwdSplitChannels = 2;
constexpr int kBwdSplitWarps = 4;
constexpr int64_t kBwdBlocksPerSm = 2;  // conv1d_bwd_window's residency at 128 threads
constexpr int64_t kBwdSplitBelowWaves = 4;
constexpr int kThreads = 128;

// Channels a thread owns: `channels`, at most 16 bytes of them.
template <typename T, int channels>
constexpr int vector_width() {
  return int(16 / sizeof(T)) < channels ? int(16 / sizeof(T)) : channels;
}

// Whether every buffer allows V channels a thread: C a multiple of V and every base
// address aligned to V elements (XLA's are 16-byte aligned); else one channel.
template <typename T, int V>
bool use_vectors(const Conv1dParams& p, std::initializer_list<const void*> ptrs) {
  if (p.channels % V != 0) return false;
  for (const void* ptr : ptrs) {
    if (ptr != nullptr && reinterpret_cast<uintptr_t>(ptr) % (sizeof(T) * V) != 0) return false;
  }
  return true;
}

dim3 grid_for(const Conv1dParams& p, int v, int64_t runs, int* threads, cudaError_t* err) {
  const int64_t groups = (p.channels + v - 1) / v;
  *threads = int(groups < kThreads ? ((groups + 31) / 32) * 32 : kThreads);
  const int64_t blocks = (groups + *threads - 1) / *threads * runs * p.batch;
  *err = blocks > 0x7fffffffLL ? cudaErrorInvalidConfiguration : cudaSuccess;
  return dim3(unsigned(blocks));
}

template <typename T, int V>
cudaError_t fwd_with(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                     const T* state, T* y, cudaStream_t stream) {
  int threads;
  cudaError_t err;
  const dim3 grid = grid_for(p, V, (p.length + kFwdRun - 1) / kFwdRun, &threads, &err);
  if (err != cudaSuccess) return err;
  const bool window = p.dilation == 1 && p.kernel_size >= 2 && p.kernel_size <= 4;
  if (window && p.kernel_size == 2) {
    conv1d_fwd_window<T, V, 2, kFwdAhead><<<grid, threads, 0, stream>>>(x, w, bias, seg, state, y, p, kFwdRun);
  } else if (window && p.kernel_size == 3) {
    conv1d_fwd_window<T, V, 3, kFwdAhead><<<grid, threads, 0, stream>>>(x, w, bias, seg, state, y, p, kFwdRun);
  } else if (window && p.kernel_size == 4) {
    conv1d_fwd_window<T, V, 4, kFwdAhead><<<grid, threads, 0, stream>>>(x, w, bias, seg, state, y, p, kFwdRun);
  } else {
    conv1d_fwd_generic<T, V><<<grid, threads, 0, stream>>>(x, w, bias, seg, state, y, p, kFwdRun);
  }
  return cudaGetLastError();
}

template <typename T, int V>
cudaError_t bwd_with(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                     const T* state, const T* dy, T* dx, T* dstate, float* dw_part, float* db_part,
                     cudaStream_t stream) {
  int threads;
  cudaError_t err;
  const dim3 grid = grid_for(p, V, p.chunks_per_row(), &threads, &err);
  if (err != cudaSuccess) return err;
  const bool window = p.dilation == 1 && p.kernel_size >= 2 && p.kernel_size <= 4;
#define FLASHDWC_BWD_ARGS x, w, bias, seg, state, dy, dx, dstate, dw_part, db_part, p
  if (window && p.kernel_size == 2) {
    conv1d_bwd_window<T, V, 2, kBwdAhead><<<grid, threads, 0, stream>>>(FLASHDWC_BWD_ARGS);
  } else if (window && p.kernel_size == 3) {
    conv1d_bwd_window<T, V, 3, kBwdAhead><<<grid, threads, 0, stream>>>(FLASHDWC_BWD_ARGS);
  } else if (window && p.kernel_size == 4) {
    conv1d_bwd_window<T, V, 4, kBwdAhead><<<grid, threads, 0, stream>>>(FLASHDWC_BWD_ARGS);
  } else {
    conv1d_bwd_generic<T, V><<<grid, threads, 0, stream>>>(FLASHDWC_BWD_ARGS);
  }
#undef FLASHDWC_BWD_ARGS
  return cudaGetLastError();
}

// The split window kernel, K = 2..4 at dilation 1 (blocks of 32 channel groups x
// kBwdSplitWarps sub-runs of one chunk).
template <typename T, int V>
cudaError_t bwd_split_with(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                           const T* state, const T* dy, T* dx, T* dstate, float* dw_part, float* db_part,
                           cudaStream_t stream) {
  const int64_t blocks = (p.channels + 32 * V - 1) / (32 * V) * p.chunks_per_row() * p.batch;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  const dim3 grid{unsigned(blocks)}, block{32, kBwdSplitWarps};
#define FLASHDWC_BWD_ARGS x, w, bias, seg, state, dy, dx, dstate, dw_part, db_part, p
  if (p.kernel_size == 2) {
    conv1d_bwd_window_split<T, V, 2, kBwdSplitAhead, kBwdSplitWarps><<<grid, block, 0, stream>>>(FLASHDWC_BWD_ARGS);
  } else if (p.kernel_size == 3) {
    conv1d_bwd_window_split<T, V, 3, kBwdSplitAhead, kBwdSplitWarps><<<grid, block, 0, stream>>>(FLASHDWC_BWD_ARGS);
  } else {
    conv1d_bwd_window_split<T, V, 4, kBwdSplitAhead, kBwdSplitWarps><<<grid, block, 0, stream>>>(FLASHDWC_BWD_ARGS);
  }
#undef FLASHDWC_BWD_ARGS
  return cudaGetLastError();
}

// Whether the split window kernel takes this backward: K = 2..4 at dilation 1, and the
// one-run kernel's grid (chunks x 16-byte channel groups) under kBwdSplitBelowWaves
// waves of its resident threads.
template <typename T>
bool bwd_takes_split(const Conv1dParams& p) {
  if (p.dilation != 1 || p.kernel_size < 2 || p.kernel_size > 4) return false;
  const int64_t groups = (p.channels + vector_width<T, kBwdChannels>() - 1) / vector_width<T, kBwdChannels>();
  const int64_t one_run_threads = groups * p.chunks_per_row() * p.batch;
  const int64_t resident = std::max<int64_t>(device_limits().sms, 1) * kBwdBlocksPerSm * kThreads;
  return one_run_threads < kBwdSplitBelowWaves * resident;
}

}  // namespace

template <typename T>
cudaError_t run_conv1d_fwd(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                           const T* state, T* y, cudaStream_t stream) {
  if (p.batch * p.length * p.channels == 0) return cudaSuccess;
  if (p.state_len == 0) state = nullptr;
  constexpr int kV = vector_width<T, kFwdChannels>();
  if (use_vectors<T, kV>(p, {x, state, y})) {
    return fwd_with<T, kV>(p, x, w, bias, seg, state, y, stream);
  }
  return fwd_with<T, 1>(p, x, w, bias, seg, state, y, stream);
}

template <typename T>
cudaError_t run_conv1d_bwd(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                           const T* state, const T* dy, T* dx, T* dstate, float* dw_part, float* db_part,
                           cudaStream_t stream) {
  if (p.batch * p.length * p.channels == 0) return cudaSuccess;
  // A zero-size buffer's address is arbitrary: it must not force the scalar path.
  if (p.state_len == 0) state = nullptr, dstate = nullptr;
  if (bwd_takes_split<T>(p)) {
    constexpr int kV = vector_width<T, kBwdSplitChannels>();
    if (use_vectors<T, kV>(p, {x, state, dy, dx, dstate})) {
      return bwd_split_with<T, kV>(p, x, w, bias, seg, state, dy, dx, dstate, dw_part, db_part, stream);
    }
    return bwd_split_with<T, 1>(p, x, w, bias, seg, state, dy, dx, dstate, dw_part, db_part, stream);
  }
  constexpr int kV = vector_width<T, kBwdChannels>();
  if (use_vectors<T, kV>(p, {x, state, dy, dx, dstate})) {
    return bwd_with<T, kV>(p, x, w, bias, seg, state, dy, dx, dstate, dw_part, db_part, stream);
  }
  return bwd_with<T, 1>(p, x, w, bias, seg, state, dy, dx, dstate, dw_part, db_part, stream);
}

#define FLASHDWC_CONV1D_CUDA(T)                                                                                 \
  template cudaError_t run_conv1d_fwd<T>(const Conv1dParams&, const T*, const T*, const T*, const int32_t*,    \
                                         const T*, T*, cudaStream_t);                                          \
  template cudaError_t run_conv1d_bwd<T>(const Conv1dParams&, const T*, const T*, const T*, const int32_t*,    \
                                         const T*, const T*, T*, T*, float*, float*, cudaStream_t);
FLASHDWC_CONV1D_CUDA(float)
FLASHDWC_CONV1D_CUDA(__half)
FLASHDWC_CONV1D_CUDA(__nv_bfloat16)

}  // namespace flashdwc
