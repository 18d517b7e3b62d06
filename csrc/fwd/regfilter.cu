// Launcher of the register-filter forward kernel (fwd/regfilter.cuh): its
// instantiations, 3x3 at 8 outputs a thread, 5x5 at 4 and 7x7 at 2, launched on the
// grid of plan_fwd_launch (plan/fwd_launch.h).
#include <cstdint>
#include <type_traits>

#include "common/launch.cuh"
#include "fwd/regfilter.cuh"
#include "fwd/regfilter.h"
#include "plan/fwd.h"

namespace flashdwc {
namespace {

// Outputs a thread along the width, and the register cap through the resident blocks
// an SM, per filter size. ptxas for sm_90, fp16/bf16 with and without the epilogue,
// no spills: 3x3 at 8 outputs 120-128 registers (4 blocks), 5x5 at 4 outputs 152-167
// (3 blocks; 195 uncapped, and the 128 of 4 blocks spilled 456 bytes). fp32 (one
// channel a thread, half the filter and accumulator registers) takes the same shapes:
// 91-127 registers, no spills. 7x7 runs dilated fp16/bf16 problems only (plan/fwd.cc;
// fp32 dilated problems run on sub-grids, and fp32 7x7 was never timed): undilated,
// an earlier build took about 1.9 of the tensor-core kernel's time; dilated, the
// alternative is the sub-grid copies (docs/design-notes.md). Its filter and
// accumulators fit 2 outputs a thread: 168 registers at 3 blocks, 8-12 bytes spilled
// without the epilogue and 72-116 with it (218-226 registers and no spills at 2 blocks;
// 166-168 and at most 4 bytes at 1 output a thread).
template <int kK>
struct RegFilterShape;
template <>
struct RegFilterShape<3> {
  static constexpr int kTW = 8;
  static constexpr int kMinBlocks = 4;
};
template <>
struct RegFilterShape<5> {
  static constexpr int kTW = 4;
  static constexpr int kMinBlocks = 3;
};
template <>
struct RegFilterShape<7> {
  static constexpr int kTW = 2;
  static constexpr int kMinBlocks = 3;
};

static_assert(RegFilterShape<3>::kTW == 8 && RegFilterShape<5>::kTW == 4 && RegFilterShape<7>::kTW == 2,
              "fwd_regfilter_outputs_per_thread");
static_assert(RegFilterShape<3>::kMinBlocks == fwd_regfilter_min_blocks(3) &&
              RegFilterShape<5>::kMinBlocks == fwd_regfilter_min_blocks(5) &&
              RegFilterShape<7>::kMinBlocks == fwd_regfilter_min_blocks(7));
static_assert(RegFilterTraits::kThreads == kFwdRegFilterThreads);

template <typename T, int kK>
cudaError_t launch_with_filter_size(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                                    cudaStream_t stream, const FwdEpilogue& epilogue) {
  using Shape = RegFilterShape<kK>;
  const dim3 grid = to_dim3(plan.launch.grid), block = to_dim3(plan.launch.block);
  if (epilogue.active()) {
    dwconv_fwd_regfilter_kernel<T, kK, Shape::kTW, Shape::kMinBlocks, true>
        <<<grid, block, 0, stream>>>(x, w, y, p, plan.regfilter, epilogue);
  } else {
    dwconv_fwd_regfilter_kernel<T, kK, Shape::kTW, Shape::kMinBlocks, false>
        <<<grid, block, 0, stream>>>(x, w, y, p, plan.regfilter, epilogue);
  }
  return cudaGetLastError();
}

}  // namespace

bool fwd_regfilter_aligned(const void* x, const void* w, const void* y, const void* bias) {
  return aligned(x, 16) && aligned(w, 4) && aligned(y, 4) && (bias == nullptr || aligned(bias, 4));
}

template <typename T>
cudaError_t launch_fwd_regfilter(const DwConvParams& p, const FwdLaunchPlan& plan, const T* x, const T* w, T* y,
                                 cudaStream_t stream, const FwdEpilogue& epilogue) {
  switch (p.kernel_w) {
    case 3: return launch_with_filter_size<T, 3>(p, plan, x, w, y, stream, epilogue);
    case 5: return launch_with_filter_size<T, 5>(p, plan, x, w, y, stream, epilogue);
    default:
      // 7x7 is fp16/bf16 only (can_implement_fwd_regfilter).
      if constexpr (std::is_same_v<T, float>) {
        return cudaErrorInvalidValue;
      } else {
        return launch_with_filter_size<T, 7>(p, plan, x, w, y, stream, epilogue);
      }
  }
}

template <typename T>
cudaError_t launch_fwd_regfilter(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                                 const FwdEpilogue& epilogue) {
  constexpr bool half_precision = !std::is_same_v<T, float>;
  if (!can_implement_fwd_regfilter(p, half_precision) || !fwd_regfilter_aligned(x, w, y, epilogue.bias)) {
    return cudaErrorInvalidValue;
  }
  return launch_fwd_regfilter(p, plan_fwd_regfilter_launch(p, half_precision, device_limits()), x, w, y, stream,
                              epilogue);
}

#define FLASHDWC_INSTANTIATE_REGFILTER(T)                                                                        \
  template cudaError_t launch_fwd_regfilter<T>(const DwConvParams&, const FwdLaunchPlan&, const T*, const T*, T*, \
                                               cudaStream_t, const FwdEpilogue&);                                 \
  template cudaError_t launch_fwd_regfilter<T>(const DwConvParams&, const T*, const T*, T*, cudaStream_t,         \
                                               const FwdEpilogue&);

FLASHDWC_INSTANTIATE_REGFILTER(__half)
FLASHDWC_INSTANTIATE_REGFILTER(__nv_bfloat16)
FLASHDWC_INSTANTIATE_REGFILTER(float)

}  // namespace flashdwc
