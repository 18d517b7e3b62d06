// Launchers for the CUDA kernels: grid computation, kernel choice, launch.
#include <algorithm>

#include "dwconv/direct_kernels.cuh"
#include "dwconv/dwconv_cuda.h"

namespace flashdwc {
namespace {

constexpr int kDirectThreads = 256;
// Grid-stride loops cover any size; more blocks than this buys nothing on an
// H200 (132 SMs x 8 resident blocks of 256 threads = 1056).
constexpr int64_t kMaxDirectBlocks = 65536;

dim3 direct_grid(int64_t elements) {
  const int64_t blocks = (elements + kDirectThreads - 1) / kDirectThreads;
  return dim3(unsigned(std::clamp<int64_t>(blocks, 1, kMaxDirectBlocks)));
}

}  // namespace

template <typename T>
cudaError_t run_dwconv_fwd(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream) {
  const int64_t elements = p.batch * p.out_h * p.out_w * p.channels;
  dwconv_fwd_direct_kernel<T><<<direct_grid(elements), kDirectThreads, 0, stream>>>(x, w, y, p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t run_dwconv_bwd_data(const DwConvParams& p, const T* dy, const T* w, T* dx,
                                cudaStream_t stream) {
  if (p.stride_h == 1 && p.stride_w == 1) {
    return run_dwconv_fwd(stride1_bwd_data_as_fwd(p), dy, w, dx, stream);
  }
  const int64_t elements = p.batch * p.in_h * p.in_w * p.channels;
  dwconv_bwd_data_direct_kernel<T><<<direct_grid(elements), kDirectThreads, 0, stream>>>(dy, w, dx, p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t run_dwconv_bwd_filter(const DwConvParams& p, const T* x, const T* dy, T* dw,
                                  cudaStream_t stream) {
  const dim3 grid(unsigned(p.kernel_h * p.kernel_w),
                  unsigned((p.channels + kBwdFilterChannels - 1) / kBwdFilterChannels));
  const dim3 block(kBwdFilterChannels, kBwdFilterRows);
  dwconv_bwd_filter_direct_kernel<T><<<grid, block, 0, stream>>>(x, dy, dw, p);
  return cudaGetLastError();
}

#define FLASHDWC_INSTANTIATE_CUDA(T)                                                               \
  template cudaError_t run_dwconv_fwd<T>(const DwConvParams&, const T*, const T*, T*, cudaStream_t); \
  template cudaError_t run_dwconv_bwd_data<T>(const DwConvParams&, const T*, const T*, T*,            \
                                              cudaStream_t);                                          \
  template cudaError_t run_dwconv_bwd_filter<T>(const DwConvParams&, const T*, const T*, T*,          \
                                                cudaStream_t);

FLASHDWC_INSTANTIATE_CUDA(float)
FLASHDWC_INSTANTIATE_CUDA(__half)
FLASHDWC_INSTANTIATE_CUDA(__nv_bfloat16)

}  // namespace flashdwc
