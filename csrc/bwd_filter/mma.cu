// Launcher of the tensor-core filter gradient (bwd_filter/mma.cuh).
#include <algorithm>
#include <cstdint>

#include "bwd_filter/mma.cuh"
#include "bwd_filter/mma_layout.h"
#include "bwd_filter/mma.h"
#include "common/launch.cuh"

namespace flashdwc {
// The kernel instance for the block's tile grid (m_tiles x n_per_group, at most 4),
// with k_tiles a constant for one M tile on maps at most 32 columns wide (k = 9 and
// 13 filters at most 16 tall: ConvMixer's, RepLKNet's 13 x 13 on its last stages).
template <typename T, bool kVec>
auto mma_kernel_for(const MmaBwdFilterGrid& g) {
  if (g.m_tiles == 1 && g.n_per_group <= 2 && g.k_tiles <= 2) {
    if (g.n_per_group == 1) {
      return g.k_tiles == 1 ? dwconv_bwd_filter_mma_kernel<T, kVec, 1, 1, 1>
                            : dwconv_bwd_filter_mma_kernel<T, kVec, 1, 1, 2>;
    }
    return g.k_tiles == 1 ? dwconv_bwd_filter_mma_kernel<T, kVec, 1, 2, 1>
                          : dwconv_bwd_filter_mma_kernel<T, kVec, 1, 2, 2>;
  }
  switch (g.m_tiles * 8 + g.n_per_group) {
    case 8 + 1: return dwconv_bwd_filter_mma_kernel<T, kVec, 1, 1, 0>;
    case 8 + 2: return dwconv_bwd_filter_mma_kernel<T, kVec, 1, 2, 0>;
    case 8 + 3: return dwconv_bwd_filter_mma_kernel<T, kVec, 1, 3, 0>;
    case 8 + 4: return dwconv_bwd_filter_mma_kernel<T, kVec, 1, 4, 0>;
    case 16 + 1: return dwconv_bwd_filter_mma_kernel<T, kVec, 2, 1, 0>;
    case 16 + 2: return dwconv_bwd_filter_mma_kernel<T, kVec, 2, 2, 0>;
    case 24 + 1: return dwconv_bwd_filter_mma_kernel<T, kVec, 3, 1, 0>;
    default: return dwconv_bwd_filter_mma_kernel<T, kVec, 4, 1, 0>;  // m_tiles 4 (KW <= 64)
  }
}

template <typename T>
cudaError_t launch_bwd_filter_mma(const DwConvParams& p, const T* x, const T* dy, float* workspace,
                                  int64_t slices, cudaStream_t stream) {
  using Tr = MmaBwdFilterTraits;
  const MmaBwdFilterGrid g = make_mma_bwd_filter_grid(p, slices, max_smem_per_block());
  const int64_t chunks = slices > 0 ? slices : mma_bwd_filter_ceil_div(g.rows, g.rows_per_split);
  const bool vec = p.channels % 8 == 0 && aligned(x, 16) && aligned(dy, 16);
  auto kernel = vec ? mma_kernel_for<T, true>(g) : mma_kernel_for<T, false>(g);
  const int64_t smem = mma_bwd_filter_smem_bytes(g);
  if (cudaError_t err = allow_dynamic_smem(kernel, size_t(smem)); err != cudaSuccess) return err;
  const dim3 blocks(unsigned(g.groups), unsigned(mma_bwd_filter_ceil_div(p.channels, Tr::kBlockChannels)), unsigned(chunks));
  kernel<<<blocks, Tr::kThreads, size_t(smem), stream>>>(x, dy, workspace, p, g);
  return cudaGetLastError();
}

template cudaError_t launch_bwd_filter_mma<__half>(const DwConvParams&, const __half*, const __half*, float*,
                                                   int64_t, cudaStream_t);
template cudaError_t launch_bwd_filter_mma<__nv_bfloat16>(const DwConvParams&, const __nv_bfloat16*,
                                                          const __nv_bfloat16*, float*, int64_t, cudaStream_t);

}  // namespace flashdwc
