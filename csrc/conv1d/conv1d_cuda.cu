// Kernel choice and launch geometry of the CUDA 1-D convolution.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>

#include "conv1d/conv1d_cuda.h"
#include "conv1d/conv1d_kernels.cuh"

namespace flashdwc {
namespace {

using namespace conv1d_cuda;

// Launch geometry, from kernel-level timings of every candidate geometry in one run
// (benchmarks/cuda/time_conv1d.cu; H100 80GB HBM3, bf16, K = 4, bias + SiLU, 16k-64k
// tokens x 1536 and 5120 channels; docs/conv1d.md has the table). More loads in
// flight per thread only paid where the registers they cost left the SM as many
// threads: 8 or 16 ahead at 3-4 blocks an SM were slower than 4 ahead at 6.
//
// Forward without segments or state (conv1d_fwd_plain): 4 channels a thread (8 bytes
// bf16/fp16, 16 fp32) and runs of 8 positions, all 11 inputs loaded at once, 6 blocks
// of 128 an SM: 0.75-0.76 of the window kernel's time at every shape (1.65-1.94 TB/s,
// 0.67-0.68 of this card's 2.46-2.87 TB/s copy of the same bytes).
constexpr int64_t kFwdPlainRun = 8;
constexpr int kFwdPlainBlocks = 6;
// The same with segment ids (no state), on the 3-D grid only: the ids of a run's 11
// inputs and 8 outputs take registers, so 5 blocks an SM (in the harness without
// segments 5 and 6 blocks ran within 1% of each other). With a boundary every ~1000
// positions it took 0.79-0.84 of the window kernel's time at the six shapes (H100,
// bf16, K = 4, SiLU: 1.63-2.01 against 1.37-1.60 TB/s; y bit for bit).
constexpr int kFwdPlainSegBlocks = 5;
// Forward with segments or a state (conv1d_fwd_window): runs of 16 positions of 4
// channels, 4 loads ahead, 6 blocks an SM (80 registers; conv1d_kernels.cuh names the spills).
constexpr int64_t kFwdRun = 16;
constexpr int kFwdAhead = 4;
constexpr int kFwdBlocks = 6;
constexpr int kFwdChannels = 4;
// Backward (conv1d_bwd_window_split): 4 channels a thread, 3 of x and dy loaded
// ahead, each 128-position chunk (Conv1dParams::chunk) split over 4 warps, 4 blocks
// of 128 an SM: 0.75-0.77 of the time of the former 2-channel geometry and 0.66-0.84
// of the former one-run-a-thread kernel (16 bytes of channels, 128 positions, 251
// registers) at every shape, 0.85-0.91 TB/s of x, dy and dx. ptxas (sm_90): 101-126
// registers without segments; with them the K = 4 instances spill at 128 (4 blocks)
// on the flat grid, so they run at 3 blocks an SM there; on the 3-D grid (no state)
// they take 112-128 registers at 4 blocks without spills and 0.45-0.49 of the flat
// grid's time (H100, bf16, K = 4, SiLU, a boundary every ~1000 positions: 1.56-1.84
// against 0.77-0.83 TB/s; dx bit for bit, dw within 1e-5).
constexpr int kBwdAhead = 3;
constexpr int kBwdChannels = 4;
constexpr int kBwdWarps = 4;
constexpr int kBwdBlocks = 4;
constexpr int kBwdBlocksWithSegments = 3;
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

// Whether a launch of `pieces` blocks along a row (gridDim.y) and one row a z-block fits
// the 3-D grid: both within 65535, and offsets inside a row within 32 bits, as the
// 3-D-grid kernels index them.
bool fits_grid3(const Conv1dParams& p, int64_t pieces) {
  return pieces <= 65535 && p.batch <= 65535 && p.length * p.channels < (int64_t(1) << 31);
}

// The plain forward at a compile-time activation: on the 3-D grid where it fits (in
// the kernel harness, H100, bf16, K = 4, SiLU: 1.15-1.19x the 1-D grid's speed, 0.93-0.99
// of the card's copy at 16k-64k tokens x 1536 and 5120 channels), else on the 1-D grid.
template <typename T, int V, int KT>
void fwd_plain(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg, T* y, dim3 grid,
               int threads, cudaStream_t stream) {
  const int64_t runs = (p.length + kFwdPlainRun - 1) / kFwdPlainRun;
  const bool grid3 = fits_grid3(p, runs);
  const int64_t groups = (p.channels + V - 1) / V;
  const dim3 grid3_dims(unsigned((groups + threads - 1) / threads), unsigned(runs), unsigned(p.batch));
#define FLASHDWC_FWD_PLAIN(ACT)                                                                                     \
  if (p.has_seg) {                                                                                                  \
    conv1d_fwd_plain_grid3<T, V, KT, kFwdPlainRun, kFwdPlainSegBlocks, ACT, true>                                   \
        <<<grid3_dims, threads, 0, stream>>>(x, w, bias, y, p, seg);                                                \
  } else if (grid3) {                                                                                               \
    conv1d_fwd_plain_grid3<T, V, KT, kFwdPlainRun, kFwdPlainBlocks, ACT>                                            \
        <<<grid3_dims, threads, 0, stream>>>(x, w, bias, y, p);                                                     \
  } else {                                                                                                          \
    conv1d_fwd_plain<T, V, KT, kFwdPlainRun, kFwdPlainBlocks, ACT><<<grid, threads, 0, stream>>>(x, w, bias, y, p); \
  }
  switch (p.activation) {
    case Activation::kNone: FLASHDWC_FWD_PLAIN(Activation::kNone); break;
    case Activation::kRelu: FLASHDWC_FWD_PLAIN(Activation::kRelu); break;
    case Activation::kGelu: FLASHDWC_FWD_PLAIN(Activation::kGelu); break;
    case Activation::kGeluTanh: FLASHDWC_FWD_PLAIN(Activation::kGeluTanh); break;
    case Activation::kSilu: FLASHDWC_FWD_PLAIN(Activation::kSilu); break;
  }
#undef FLASHDWC_FWD_PLAIN
}

// The forward, K = KT at dilation 1: the plain kernel without a state (where C and the
// buffers allow vectors; with segment ids on the 3-D grid only), else the window kernel.
template <typename T, int V, int KT>
cudaError_t fwd_window_kt(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                          const T* state, T* y, cudaStream_t stream) {
  // With segment ids the plain kernel runs on the 3-D grid only.
  const bool plain = V > 1 && p.state_len == 0 &&
                     (!p.has_seg || fits_grid3(p, (p.length + kFwdPlainRun - 1) / kFwdPlainRun));
  const int64_t run = plain ? kFwdPlainRun : kFwdRun;
  int threads;
  cudaError_t err;
  const dim3 grid = grid_for(p, V, (p.length + run - 1) / run, &threads, &err);
  if (err != cudaSuccess) return err;
  if constexpr (V > 1) {
    if (plain) {
      fwd_plain<T, V, KT>(p, x, w, bias, seg, y, grid, threads, stream);
      return cudaGetLastError();
    }
  }
  if (p.has_seg) {
    conv1d_fwd_window<T, V, KT, kFwdAhead, kFwdBlocks, true><<<grid, threads, 0, stream>>>(x, w, bias, seg, state, y,
                                                                                         p, kFwdRun);
  } else {
    conv1d_fwd_window<T, V, KT, kFwdAhead, kFwdBlocks, false><<<grid, threads, 0, stream>>>(x, w, bias, seg, state,
                                                                                          y, p, kFwdRun);
  }
  return cudaGetLastError();
}

template <typename T, int V>
cudaError_t fwd_with(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                     const T* state, T* y, cudaStream_t stream) {
  if (p.dilation == 1 && p.kernel_size == 2) return fwd_window_kt<T, V, 2>(p, x, w, bias, seg, state, y, stream);
  if (p.dilation == 1 && p.kernel_size == 3) return fwd_window_kt<T, V, 3>(p, x, w, bias, seg, state, y, stream);
  if (p.dilation == 1 && p.kernel_size == 4) return fwd_window_kt<T, V, 4>(p, x, w, bias, seg, state, y, stream);
  int threads;
  cudaError_t err;
  const dim3 grid = grid_for(p, V, (p.length + kFwdRun - 1) / kFwdRun, &threads, &err);
  if (err != cudaSuccess) return err;
  conv1d_fwd_generic<T, V><<<grid, threads, 0, stream>>>(x, w, bias, seg, state, y, p, kFwdRun);
  return cudaGetLastError();
}

// The window backward, K = KT at dilation 1 (blocks of 32 channel groups x kBwdWarps
// sub-runs of one chunk): without a state on the 3-D grid where it fits
// (conv1d_bwd_window_split's Grid3), segment ids included, else on the flat grid. The input gradient alone
// (p.filter_grad false) has its own instance on the 3-D grid, without the filter and bias
// sums: 0.84 of the full kernel's time at five of six shapes, 0.93 at 8 x 2048 x 1536
// (H100, bf16, K = 4, SiLU; its geometry as the full kernel's, which led the four others
// timed, or tied within 0.4%, at all but that smallest shape, where 8 channels a thread
// at 3 blocks took 0.92 of its time). Elsewhere (segments, a state, the flat grid)
// the full kernel runs and skips only the partials' stores.
template <typename T, int V, int KT>
cudaError_t bwd_window(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                       const T* state, const T* dy, T* dx, T* dstate, float* dw_part, float* db_part,
                       cudaStream_t stream) {
  const int64_t channel_blocks = (p.channels + 32 * V - 1) / (32 * V);
  const int64_t blocks = channel_blocks * p.chunks_per_row() * p.batch;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  const dim3 grid{unsigned(blocks)}, block{32, kBwdWarps};
#define FLASHDWC_BWD_ARGS x, w, bias, seg, state, dy, dx, dstate, dw_part, db_part, p
  const bool grid3 = p.state_len == 0 && fits_grid3(p, p.chunks_per_row());
  if (grid3) {
    const dim3 grid3_dims(unsigned(channel_blocks), unsigned(p.chunks_per_row()), unsigned(p.batch));
    if (p.has_seg) {
      conv1d_bwd_window_split<T, V, KT, kBwdAhead, kBwdWarps, kBwdBlocks, true, true>
          <<<grid3_dims, block, 0, stream>>>(FLASHDWC_BWD_ARGS);
    } else if (p.filter_grad) {
      conv1d_bwd_window_split<T, V, KT, kBwdAhead, kBwdWarps, kBwdBlocks, false, true, true>
          <<<grid3_dims, block, 0, stream>>>(FLASHDWC_BWD_ARGS);
    } else {
      conv1d_bwd_window_split<T, V, KT, kBwdAhead, kBwdWarps, kBwdBlocks, false, true, false>
          <<<grid3_dims, block, 0, stream>>>(FLASHDWC_BWD_ARGS);
    }
  } else if (p.has_seg) {
    conv1d_bwd_window_split<T, V, KT, kBwdAhead, kBwdWarps, kBwdBlocksWithSegments, true><<<grid, block, 0, stream>>>(
        FLASHDWC_BWD_ARGS);
  } else {
    conv1d_bwd_window_split<T, V, KT, kBwdAhead, kBwdWarps, kBwdBlocks, false><<<grid, block, 0, stream>>>(
        FLASHDWC_BWD_ARGS);
  }
  return cudaGetLastError();
}

template <typename T, int V>
cudaError_t bwd_with(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                     const T* state, const T* dy, T* dx, T* dstate, float* dw_part, float* db_part,
                     cudaStream_t stream) {
  if (p.dilation == 1 && p.kernel_size >= 2 && p.kernel_size <= 4) {
    if (p.kernel_size == 2) return bwd_window<T, V, 2>(p, x, w, bias, seg, state, dy, dx, dstate, dw_part, db_part, stream);
    if (p.kernel_size == 3) return bwd_window<T, V, 3>(p, x, w, bias, seg, state, dy, dx, dstate, dw_part, db_part, stream);
    return bwd_window<T, V, 4>(p, x, w, bias, seg, state, dy, dx, dstate, dw_part, db_part, stream);
  }
  int threads;
  cudaError_t err;
  const dim3 grid = grid_for(p, V, p.chunks_per_row(), &threads, &err);
  if (err != cudaSuccess) return err;
  conv1d_bwd_generic<T, V><<<grid, threads, 0, stream>>>(FLASHDWC_BWD_ARGS);
#undef FLASHDWC_BWD_ARGS
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t run_conv1d_fwd(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                           const T* state, T* y, cudaStream_t stream) {
  if (p.batch * p.length * p.channels == 0) return cudaSuccess;
  // A zero-size buffer's address is arbitrary: it must not force the scalar path.
  if (p.state_len == 0) state = nullptr;
  if (!p.has_bias) bias = nullptr;
  constexpr int kV = vector_width<T, kFwdChannels>();
  // The plain kernel also reads the filter and bias as vectors.
  if (use_vectors<T, kV>(p, {x, state, y, w, bias})) {
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
  constexpr int kV = vector_width<T, kBwdChannels>();
  if (use_vectors<T, kV>(p, {x, state, dy, dx, dstate})) {
    return bwd_with<T, kV>(p, x, w, bias, seg, state, dy, dx, dstate, dw_part, db_part, stream);
  }
  return bwd_with<T, 1>(p, x, w, bias, seg, state, dy, dx, dstate, dw_part, db_part, stream);
}

template <typename T>
cudaError_t run_conv1d_step(const Conv1dParams& p, const T* x, const T* w, const T* bias, const T* state_in, T* y,
                            T* state_out, cudaStream_t stream) {
  if (p.batch * p.channels == 0) return cudaSuccess;
  if (p.state_len == 0) state_in = nullptr, state_out = nullptr;
  if (!p.has_bias) bias = nullptr;
  constexpr int kV = int(16 / sizeof(T));
  const bool vectors = use_vectors<T, kV>(p, {x, w, bias, state_in, y, state_out});
  const int64_t threads = p.batch * p.channels / (vectors ? kV : 1);
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  if (vectors) {
    conv1d_step<T, kV><<<unsigned(blocks), kThreads, 0, stream>>>(x, w, bias, state_in, y, state_out, p);
  } else {
    conv1d_step<T, 1><<<unsigned(blocks), kThreads, 0, stream>>>(x, w, bias, state_in, y, state_out, p);
  }
  return cudaGetLastError();
}

#define FLASHDWC_CONV1D_CUDA(T)                                                                                 \
  template cudaError_t run_conv1d_fwd<T>(const Conv1dParams&, const T*, const T*, const T*, const int32_t*,    \
                                         const T*, T*, cudaStream_t);                                          \
  template cudaError_t run_conv1d_bwd<T>(const Conv1dParams&, const T*, const T*, const T*, const int32_t*,    \
                                         const T*, const T*, T*, T*, float*, float*, cudaStream_t);           \
  template cudaError_t run_conv1d_step<T>(const Conv1dParams&, const T*, const T*, const T*, const T*, T*, T*, \
                                          cudaStream_t);
FLASHDWC_CONV1D_CUDA(float)
FLASHDWC_CONV1D_CUDA(__half)
FLASHDWC_CONV1D_CUDA(__nv_bfloat16)

}  // namespace flashdwc
