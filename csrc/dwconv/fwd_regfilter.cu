// Launcher of the register-filter forward kernel (fwd_regfilter.cuh): its grid and
// its one instantiation, 5x5 at 4 outputs a thread.
#include <algorithm>
#include <cstdint>

#include "dwconv/fwd_regfilter.cuh"
#include "dwconv/fwd_regfilter.h"
#include "dwconv/launch_helpers.cuh"

namespace flashdwc {
namespace {

// Filter size, outputs a thread along the width, and the register cap through the
// resident blocks an SM. ptxas for sm_90, 4 outputs: 195 registers uncapped (bf16),
// 152-167 without spills under the cap of 3 blocks (fp16/bf16, with and without the
// epilogue); the 128 of 4 blocks spilled 456 bytes. Only 5x5 is built: at 3x3 and 7x7
// an earlier build was slower than the library's kernels (1.07-1.12 and about 1.9 of
// the time; docs/perf-notes.md, thirty-second session).
constexpr int kK = 5;
constexpr int kTW = 4;
constexpr int kMinBlocks = 3;
// Output rows a row block keeps at least: its K - 1 halo rows are read twice.
constexpr int64_t kMinRowsPerBlock = 16;

int64_t threads_per_row_block(const DwConvParams& p) {
  return p.batch * ((p.out_w + kTW - 1) / kTW) * (p.channels / 2);
}

}  // namespace

bool fwd_regfilter_supports(const DwConvParams& p) {
  constexpr int64_t kThreads = RegFilterTraits::kThreads;
  return p.stride_h == 1 && p.stride_w == 1 && p.dilation_h == 1 && p.dilation_w == 1 && p.kernel_h == kK &&
         p.kernel_w == kK && p.channels % 64 == 0 && p.out_h <= 65535 &&
         (threads_per_row_block(p) + kThreads - 1) / kThreads <= INT32_MAX;
}

bool fwd_regfilter_aligned(const void* x, const void* w, const void* y, const void* bias) {
  return aligned(x, 16) && aligned(w, 4) && aligned(y, 4) && (bias == nullptr || aligned(bias, 4));
}

template <typename T>
cudaError_t launch_fwd_regfilter(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                                 const FwdEpilogue& epilogue) {
  constexpr int64_t kThreads = RegFilterTraits::kThreads;
  if (!fwd_regfilter_supports(p) || !fwd_regfilter_aligned(x, w, y, epilogue.bias)) {
    return cudaErrorInvalidValue;
  }
  RegFilterGrid g;
  g.pairs = p.channels / 2;
  g.strips = (p.out_w + kTW - 1) / kTW;
  g.columns = threads_per_row_block(p);
  // One row block per column of threads unless that leaves under two waves of resident
  // threads, then more, of at least kMinRowsPerBlock rows.
  const int64_t resident = std::max<int64_t>(device_limits().sms, 1) * kMinBlocks * kThreads;
  const int64_t max_row_blocks = std::max<int64_t>(p.out_h / kMinRowsPerBlock, 1);
  const int64_t wanted = std::clamp<int64_t>((2 * resident + g.columns - 1) / g.columns, 1, max_row_blocks);
  g.rows_per_block = (p.out_h + wanted - 1) / wanted;
  const int64_t row_blocks = (p.out_h + g.rows_per_block - 1) / g.rows_per_block;
  const dim3 blocks(unsigned((g.columns + kThreads - 1) / kThreads), unsigned(row_blocks));
  if (epilogue.active()) {
    dwconv_fwd_regfilter_kernel<T, kK, kTW, kMinBlocks, true>
        <<<blocks, unsigned(kThreads), 0, stream>>>(x, w, y, p, g, epilogue);
  } else {
    dwconv_fwd_regfilter_kernel<T, kK, kTW, kMinBlocks, false>
        <<<blocks, unsigned(kThreads), 0, stream>>>(x, w, y, p, g, epilogue);
  }
  return cudaGetLastError();
}

template cudaError_t launch_fwd_regfilter<__half>(const DwConvParams&, const __half*, const __half*, __half*,
                                                  cudaStream_t, const FwdEpilogue&);
template cudaError_t launch_fwd_regfilter<__nv_bfloat16>(const DwConvParams&, const __nv_bfloat16*,
                                                         const __nv_bfloat16*, __nv_bfloat16*, cudaStream_t,
                                                         const FwdEpilogue&);

}  // namespace flashdwc
