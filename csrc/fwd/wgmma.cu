// Launcher of the Hopper forward (fwd/wgmma.cuh): transpose x into its planar copy,
// run the kernel instance for the plan's k-steps and rows a wgmma, transpose y back.
// This translation unit is compiled for sm_90a alone (CMakeLists.txt).
#include "fwd/wgmma.h"

#include <cstdint>

#include "common/launch.cuh"
#include "fwd/wgmma.cuh"

namespace flashdwc {
namespace {

template <typename T, int NQ, int RN>
cudaError_t launch_conv(const wgmma_fwd::ConvArgs& a, const LaunchConfig& launch, cudaStream_t stream) {
  auto kernel = wgmma_fwd::dwconv_fwd_wgmma_kernel<T, NQ, RN>;
  const size_t smem = size_t(launch.smem_bytes);
  if (cudaError_t err = allow_dynamic_smem(kernel, smem); err != cudaSuccess) return err;
  kernel<<<to_dim3(launch.grid), to_dim3(launch.block), smem, stream>>>(a);
  return cudaGetLastError();
}

// The instances the plan can pick: NQ 2-4 (KW 10-57), 8 rows a wgmma at NQ = 2 and
// 16 from NQ = 3 (wgmma_fwd_rows_per_mma).
template <typename T>
cudaError_t launch_conv_any(const WgmmaFwdGrid& g, const wgmma_fwd::ConvArgs& a, const LaunchConfig& launch,
                            cudaStream_t stream) {
  switch (g.nq) {
    case 2: return launch_conv<T, 2, wgmma_fwd_rows_per_mma(2)>(a, launch, stream);
    case 3: return launch_conv<T, 3, wgmma_fwd_rows_per_mma(3)>(a, launch, stream);
    case 4: return launch_conv<T, 4, wgmma_fwd_rows_per_mma(4)>(a, launch, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

template <typename T>
cudaError_t launch_fwd_wgmma(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                             void* workspace, cudaStream_t stream, const FwdEpilogue& epilogue) {
  using Tr = WgmmaFwdTraits;
  if (plan.status == LaunchStatus::kNothing) return cudaSuccess;
  const WgmmaFwdGrid& g = plan.wgmma;
  if (workspace == nullptr || g.rows_per_mma != wgmma_fwd_rows_per_mma(g.nq)) return cudaErrorInvalidValue;
  const wgmma_fwd::ConvArgs a = wgmma_fwd::make_conv_args(p, g, workspace, w, epilogue);
  const dim3 transpose_grid(unsigned(p.in_h), unsigned(p.batch),
                            unsigned((p.channels + Tr::kTransposeChannels - 1) / Tr::kTransposeChannels));
  const size_t transpose_smem = size_t(g.transpose_smem_bytes);
  wgmma_fwd::dwconv_to_planar_kernel<T><<<transpose_grid, Tr::kTransposeThreads, transpose_smem, stream>>>(
      reinterpret_cast<const uint16_t*>(x), const_cast<uint16_t*>(a.xt), p, g.x_pitch);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  if (cudaError_t err = launch_conv_any<T>(g, a, plan.launch, stream); err != cudaSuccess) return err;
  wgmma_fwd::dwconv_from_planar_kernel<T><<<transpose_grid, Tr::kTransposeThreads, transpose_smem, stream>>>(
      a.yt, reinterpret_cast<uint16_t*>(y), p, g.y_pitch);
  return cudaGetLastError();
}

template cudaError_t launch_fwd_wgmma<__half>(const DwConvParams&, const FwdLaunchPlan&, const __half*, const __half*,
                                              __half*, void*, cudaStream_t, const FwdEpilogue&);
template cudaError_t launch_fwd_wgmma<__nv_bfloat16>(const DwConvParams&, const FwdLaunchPlan&,
                                                     const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*,
                                                     void*, cudaStream_t, const FwdEpilogue&);

}  // namespace flashdwc
