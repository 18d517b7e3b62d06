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

// Forward positions per thread: a 64-run rereads K - 1 = 3 halo inputs (4.7%, from
// L2, where the neighbouring run just read them) and gives 64k tokens x 5120 bf16
// channels 655k threads, about 5 waves of a 132-SM GPU at 1024 threads an SM.
constexpr int64_t kFwdRun = 64;
// Positions loaded ahead of use per thread: U 16-byte loads in flight (two tensors,
// x and dy, backward). ptxas (sm_90) gives the bf16 K = 4 backward 251 registers at
// U = 4 and 217 at U = 2: two 128-thread blocks an SM either way, so U = 4 keeps
// twice the loads in flight for the same occupancy.
constexpr int kFwdAhead = 8;
constexpr int kBwdAhead = 4;
constexpr int kThreads = 128;

bool aligned16(const void* ptr) { return ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

template <typename T>
constexpr int vector_width() {
  return int(16 / sizeof(T));
}

// The vector width every buffer allows: 16 bytes where C is a multiple of it and
// every base address is 16-byte aligned (XLA's are), else one channel per thread.
template <typename T>
bool use_vectors(const Conv1dParams& p, std::initializer_list<const void*> ptrs) {
  if (p.channels % vector_width<T>() != 0) return false;
  for (const void* ptr : ptrs) {
    if (!aligned16(ptr)) return false;
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

}  // namespace

template <typename T>
cudaError_t run_conv1d_fwd(const Conv1dParams& p, const T* x, const T* w, const T* bias, const int32_t* seg,
                           const T* state, T* y, cudaStream_t stream) {
  if (p.batch * p.length * p.channels == 0) return cudaSuccess;
  if (p.state_len == 0) state = nullptr;
  if (use_vectors<T>(p, {x, state, y})) {
    return fwd_with<T, vector_width<T>()>(p, x, w, bias, seg, state, y, stream);
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
  if (use_vectors<T>(p, {x, state, dy, dx, dstate})) {
    return bwd_with<T, vector_width<T>()>(p, x, w, bias, seg, state, dy, dx, dstate, dw_part, db_part, stream);
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
