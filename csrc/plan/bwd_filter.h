// The filter gradient's plan: which kernel runs a problem, and the split kernel's
// tiling. One can_implement check per kernel family (can it run this problem at all),
// and plan_bwd_filter, which takes the fastest family that can, by the thresholds of
// plan/thresholds.h. Host code only.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "plan/device_limits.h"

namespace flashdwc {

enum class BwdFilterKernel {
  kMma,        // bwd_filter/mma.cuh: tensor cores, fp16/bf16
  kRowStream,  // bwd_filter/rowstream.cuh: KW 3, 5, 7, atomic mode
  kSplit,      // bwd_filter/split.cuh
  kDirect,     // bwd_filter/direct.cuh
  kGemv,       // bwd_filter/gemv.cuh: fp32, wide filters
  kSmall,      // bwd_filter/small.cuh: square 3x3 and 5x5, stride 1 or 2, atomic mode
};
const char* bwd_filter_kernel_name(BwdFilterKernel kernel);

// Sizes of the kernels that the checks below read; the launchers static_assert them
// against the kernels' traits (bwd_filter/launch.cuh).
inline constexpr int64_t kBwdFilterSplitBlockChannels = 32;  // width 4's (the narrower) blocks
inline constexpr int64_t kBwdFilterRowStreamHalfBlockChannels = 64;
inline constexpr int64_t kBwdFilterRowStreamF32BlockChannels = 32;
inline constexpr int kBwdFilterRowStreamNarrowStrip = 32;  // strips are 32 or 64 output columns
// The fp32 filter gradient through the forward GEMV loop: the forward's fp32 TM at
// stride 1, and the widest dy row its two stages hold.
inline constexpr int kBwdFilterGemvTM = 8;
inline constexpr int64_t kBwdFilterGemvMaxOutW = 512;

// The split kernel's tiling: channels per thread (1 or 4 for fp32, 4 or 8 for
// fp16/bf16), filter taps per thread, and filter rows per thread (above 1 only for
// fp32 at stride 1 and dilation 1).
struct BwdFilterTiling {
  int width;
  int tm;
  int rows = 1;
};
BwdFilterTiling bwd_filter_tiling(const DwConvParams& p, bool half_precision);
// Filter rows per thread that width 1 (fp32) runs at each TM where several rows are
// taken (bwd_filter_tiling decides when): 3 at TM 9, 2 at TM 13.
constexpr int bwd_filter_width1_rows(int tm) { return tm == 9 ? 3 : tm == 13 ? 2 : 1; }

bool can_implement_bwd_filter_split(const DwConvParams& p);
bool can_implement_bwd_filter_gemv(const DwConvParams& p, bool half_precision, const DeviceLimits& device);
bool can_implement_bwd_filter_rowstream(const DwConvParams& p, bool half_precision, bool deterministic);
bool can_implement_bwd_filter_small(const DwConvParams& p, bool half_precision, bool deterministic,
                                    const DeviceLimits& device);
bool can_implement_bwd_filter_mma(const DwConvParams& p, bool half_precision, const DeviceLimits& device);

// The kernel the filter gradient runs for the problem on `device`; `deterministic`:
// bit-identical results across runs (no atomics).
BwdFilterKernel plan_bwd_filter(const DwConvParams& p, bool half_precision, bool deterministic,
                                const DeviceLimits& device);

}  // namespace flashdwc
