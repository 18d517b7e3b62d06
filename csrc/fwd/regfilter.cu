// Launcher of the register-filter forward kernel (fwd/regfilter.cuh): its grid and
// its instantiations, 3x3 at 8 outputs a thread and 5x5 at 4.
#include <algorithm>
#include <cstdint>

#include "fwd/regfilter.cuh"
#include "fwd/regfilter.h"
#include "common/launch.cuh"
#include "plan/fwd.h"

namespace flashdwc {
namespace {

// Outputs a thread along the width, and the register cap through the resident blocks
// an SM, per filter size. ptxas for sm_90, fp16/bf16 with and without the epilogue,
// no spills: 3x3 at 8 outputs 120-128 registers (4 blocks), 5x5 at 4 outputs 152-167
// (3 blocks; 195 uncapped, and the 128 of 4 blocks spilled 456 bytes). 7x7 is not
// built: its filter and accumulators fit only 2 outputs a thread, and an earlier
// build took about 1.9 of the tensor-core kernel's time (docs/design-notes.md).
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
// Output rows a row block keeps at least: its K - 1 halo rows are read twice.
constexpr int64_t kMinRowsPerBlock = 16;

static_assert(RegFilterShape<3>::kTW == 8 && RegFilterShape<5>::kTW == 4, "fwd_regfilter_outputs_per_thread");
static_assert(RegFilterTraits::kThreads == kFwdRegFilterThreads);

template <typename T, int kK>
cudaError_t launch_with_filter_size(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                                    const FwdEpilogue& epilogue) {
  using Shape = RegFilterShape<kK>;
  constexpr int64_t kThreads = RegFilterTraits::kThreads;
  RegFilterGrid g;
  g.pairs = p.channels / 2;
  g.lane_pairs = fwd_regfilter_lane_pairs(p.channels);
  g.strips = (p.out_w + Shape::kTW - 1) / Shape::kTW;
  g.columns = fwd_regfilter_threads_per_row_block(p);
  // One row block per column of threads unless that leaves under two waves of resident
  // threads, then more, of at least kMinRowsPerBlock rows.
  const int64_t resident = std::max<int64_t>(device_limits().sms, 1) * Shape::kMinBlocks * kThreads;
  const int64_t max_row_blocks = std::max<int64_t>(p.out_h / kMinRowsPerBlock, 1);
  const int64_t wanted = std::clamp<int64_t>((2 * resident + g.columns - 1) / g.columns, 1, max_row_blocks);
  g.rows_per_block = (p.out_h + wanted - 1) / wanted;
  const int64_t row_blocks = (p.out_h + g.rows_per_block - 1) / g.rows_per_block;
  const dim3 blocks(unsigned((g.columns + kThreads - 1) / kThreads), unsigned(row_blocks));
  if (epilogue.active()) {
    dwconv_fwd_regfilter_kernel<T, kK, Shape::kTW, Shape::kMinBlocks, true>
        <<<blocks, unsigned(kThreads), 0, stream>>>(x, w, y, p, g, epilogue);
  } else {
    dwconv_fwd_regfilter_kernel<T, kK, Shape::kTW, Shape::kMinBlocks, false>
        <<<blocks, unsigned(kThreads), 0, stream>>>(x, w, y, p, g, epilogue);
  }
  return cudaGetLastError();
}

}  // namespace

bool fwd_regfilter_aligned(const void* x, const void* w, const void* y, const void* bias) {
  return aligned(x, 16) && aligned(w, 4) && aligned(y, 4) && (bias == nullptr || aligned(bias, 4));
}

template <typename T>
cudaError_t launch_fwd_regfilter(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                                 const FwdEpilogue& epilogue) {
  if (!can_implement_fwd_regfilter(p, true) || !fwd_regfilter_aligned(x, w, y, epilogue.bias)) {
    return cudaErrorInvalidValue;
  }
  return p.kernel_w == 3 ? launch_with_filter_size<T, 3>(p, x, w, y, stream, epilogue)
                         : launch_with_filter_size<T, 5>(p, x, w, y, stream, epilogue);
}

template cudaError_t launch_fwd_regfilter<__half>(const DwConvParams&, const __half*, const __half*, __half*,
                                                  cudaStream_t, const FwdEpilogue&);
template cudaError_t launch_fwd_regfilter<__nv_bfloat16>(const DwConvParams&, const __nv_bfloat16*,
                                                         const __nv_bfloat16*, __nv_bfloat16*, cudaStream_t,
                                                         const FwdEpilogue&);

}  // namespace flashdwc
