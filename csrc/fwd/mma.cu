// Launcher of the tensor-core forward kernel (fwd/mma.cuh, fwd/mma_stream.cuh): the
// kernel instance for the grid plan_fwd_launch (plan/fwd_launch.h) chose.
#include "fwd/mma.h"

#include <cstdint>

#include "common/launch.cuh"
#include "fwd/mma.cuh"
#include "fwd/mma_layout.h"
#include "fwd/mma_stream.cuh"

namespace flashdwc {
namespace {

template <typename T, bool kVec, bool kPrologue>
cudaError_t launch(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                   cudaStream_t stream, const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  using Tr = MmaFwdTraits;
  const MmaFwdGrid& g = plan.mma;
  const size_t smem = size_t(plan.launch.smem_bytes);
  const bool one_copy = g.filter_copies == 1;
  auto kernel = g.split > 1 ? (one_copy ? mma_fwd::dwconv_fwd_mma_kernel<T, kVec, kPrologue, true, true>
                                        : mma_fwd::dwconv_fwd_mma_kernel<T, kVec, kPrologue, true, false>)
                            : (one_copy ? mma_fwd::dwconv_fwd_mma_kernel<T, kVec, kPrologue, false, true>
                                        : mma_fwd::dwconv_fwd_mma_kernel<T, kVec, kPrologue, false, false>);
  if constexpr (kVec) {
    if (g.filter_rows > Tr::kTallChunk) {  // one image a strip (tall_multi_tile_grid)
      kernel = one_copy ? mma_fwd::dwconv_fwd_mma_kernel<T, true, kPrologue, false, true, true>
                        : mma_fwd::dwconv_fwd_mma_kernel<T, true, kPrologue, false, false, true>;
    }
    if (g.raw_rows > 0) {  // one image a strip (stream_grid)
      kernel = one_copy ? mma_fwd::dwconv_fwd_mma_stream_kernel<T, kPrologue, true>
                        : mma_fwd::dwconv_fwd_mma_stream_kernel<T, kPrologue, false>;
    }
  }
  if (cudaError_t err = allow_dynamic_smem(kernel, smem); err != cudaSuccess) return err;
  kernel<<<to_dim3(plan.launch.grid), to_dim3(plan.launch.block), smem, stream>>>(x, w, y, p, g, epilogue, prologue);
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t launch_fwd_mma(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                           cudaStream_t stream, const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  if (plan.status == LaunchStatus::kNothing) return cudaSuccess;
  // The prologue is a template flag: the kernels without it compile as before.
  if (prologue.active()) {
    return plan.vec ? launch<T, true, true>(p, plan, x, w, y, stream, epilogue, prologue)
                    : launch<T, false, true>(p, plan, x, w, y, stream, epilogue, prologue);
  }
  return plan.vec ? launch<T, true, false>(p, plan, x, w, y, stream, epilogue, prologue)
                  : launch<T, false, false>(p, plan, x, w, y, stream, epilogue, prologue);
}

template <typename T>
cudaError_t launch_fwd_mma(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                           const FwdEpilogue& epilogue, const FwdPrologue& prologue, int tiles_per_block) {
  FwdCall call;
  call.half_precision = true;
  call.x_align = address_alignment(x);
  call.w_align = address_alignment(w);
  call.y_align = address_alignment(y);
  const FwdLaunchPlan plan = plan_fwd_mma_launch(p, call, device_limits(), tiles_per_block);
  return launch_fwd_mma(p, plan, x, w, y, stream, epilogue, prologue);
}

#define FLASHDWC_INSTANTIATE_MMA(T)                                                                              \
  template cudaError_t launch_fwd_mma<T>(const DwConvParams&, const FwdLaunchPlan&, const T*, const T*, T*,       \
                                         cudaStream_t, const FwdEpilogue&, const FwdPrologue&);                   \
  template cudaError_t launch_fwd_mma<T>(const DwConvParams&, const T*, const T*, T*, cudaStream_t,               \
                                         const FwdEpilogue&, const FwdPrologue&, int);

FLASHDWC_INSTANTIATE_MMA(__half)
FLASHDWC_INSTANTIATE_MMA(__nv_bfloat16)

}  // namespace flashdwc
