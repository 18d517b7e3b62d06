// The forward plan (plan/fwd.h).
#include "plan/fwd.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "fwd/mma_layout.h"
#include "fwd/stride2_index.h"
#include "fwd/wgmma_layout.h"
#include "plan/thresholds.h"

namespace flashdwc {

const char* fwd_kernel_name(FwdKernel kernel) {
  switch (kernel) {
    case FwdKernel::kWgmma: return "wgmma";
    case FwdKernel::kRegFilter: return "regfilter";
    case FwdKernel::kMma: return "mma";
    case FwdKernel::kRowStream: return "rowstream";
    case FwdKernel::kStride2: return "stride2";
    case FwdKernel::kGemv: return "gemv";
    case FwdKernel::kDirect: return "direct";
  }
  return "direct";
}

// 3x3 and 5x5 filters, stride 1, any dilation (each residue class an undilated image
// read in place), and fp16/bf16 7x7 where dilated (undilated, the tensor-core kernel is
// faster; fp32 dilated problems run on sub-grids: fwd/regfilter.cu), a pixel's 32-bit
// words a multiple of 4 (C a multiple of 8 in
// fp16/bf16, of 4 in fp32: a warp's 32 words are one pixel's, padded to whole warps,
// and each lane copies 16 bytes that are wholly inside or past the pixel), the grid
// within CUDA's limits (blockIdx.y: row residues x row blocks, at most out_h rounded up
// to a multiple of dilation_h).
bool can_implement_fwd_regfilter(const DwConvParams& p, bool half_precision) {
  return p.stride_h == 1 && p.stride_w == 1 && p.dilation_h >= 1 && p.dilation_w >= 1 &&
         p.kernel_h == p.kernel_w &&
         (p.kernel_w == 3 || p.kernel_w == 5 ||
          (p.kernel_w == 7 && half_precision && (p.dilation_h > 1 || p.dilation_w > 1))) &&
         p.channels % (half_precision ? 8 : 4) == 0 &&
         (p.out_h + p.dilation_h - 1) / p.dilation_h * p.dilation_h <= 65535 &&
         (fwd_regfilter_threads_per_row_block(p, half_precision) + kFwdRegFilterThreads - 1) /
                 kFwdRegFilterThreads <=
             INT32_MAX;
}

// fp16/bf16, stride 1, dilation 1, KW <= 135, and the one-tile block's shared memory
// within the device's limit.
bool can_implement_fwd_mma(const DwConvParams& p, bool half_precision, const DeviceLimits& device) {
  using Tr = MmaFwdTraits;
  if (!half_precision) return false;
  if (p.stride_h != 1 || p.stride_w != 1 || p.dilation_h != 1 || p.dilation_w != 1) return false;
  if (p.kernel_h < 1 || p.kernel_w < 1 || p.kernel_h > kMmaMaxKernelH || p.kernel_w > kMmaMaxKernelW) {
    return false;
  }
  if (p.batch < 0 || p.in_h < 0 || p.in_w < 0 || p.out_h < 0 || p.out_w < 0 || p.channels < 0) return false;
  if (p.batch <= 0 || p.out_h <= 0 || p.out_w <= 0 || p.channels <= 0) return true;  // launches nothing
  // Overflow-safe form of batch * tiles_h * tiles_w <= INT32_MAX (the spatial blocks,
  // decoded in 32 bits by fwd/mma.cuh; more images a strip and more tiles a block only
  // take fewer), and the channel blocks within the grid's x.
  const int64_t tiles_w = mma_fwd_ceil_div(p.out_w, Tr::kStripW), tiles_h = mma_fwd_ceil_div(p.out_h, Tr::kRows);
  if (tiles_w > INT32_MAX || tiles_h > INT32_MAX / tiles_w || p.batch > INT32_MAX / (tiles_h * tiles_w)) {
    return false;
  }
  if (mma_fwd_ceil_div(p.channels, Tr::kBlockChannels) > INT32_MAX) return false;
  const MmaFwdGrid g = make_mma_fwd_grid(p, 1, 1);
  return mma_fwd_smem_bytes(g) <= size_t(device.smem_per_block);
}

bool can_implement_fwd_wgmma(const DwConvParams& p, bool half_precision, const DeviceLimits& device) {
  using Tr = WgmmaFwdTraits;
  if (!half_precision || !device.wgmma) return false;
  if (p.stride_h != 1 || p.stride_w != 1 || p.dilation_h != 1 || p.dilation_w != 1) return false;
  if (p.out_h != p.in_h || p.out_w != p.in_w) return false;
  if (p.pad_top < 0 || p.pad_top >= p.kernel_h || p.pad_left < 0 || p.pad_left >= p.kernel_w) return false;
  const int64_t nq = wgmma_fwd_nq(p.kernel_w);
  if (p.kernel_h < 1 || nq < 2 || nq > Tr::kMaxQ) return false;
  if (p.batch <= 0 || p.in_h <= 0 || p.in_w <= 0 || p.channels <= 0 || p.channels % 8 != 0) return false;
  // Grid: (unit blocks, C) for the kernel, (H, N, channel blocks) for the transposes.
  if (p.channels > 65535 || p.batch > 65535 || p.in_h > INT32_MAX) return false;
  const WgmmaFwdGrid g = make_wgmma_fwd_grid(p);
  if (g.transpose_smem_bytes > Tr::kTransposeMaxSmem) return false;
  if (device.smem_per_block > 0 && g.smem_bytes > device.smem_per_block) return false;
  // The kernel's int sizes and unit count; the planar offsets are 64-bit.
  const int64_t units = p.batch * g.strips;
  return units <= INT32_MAX - Tr::kUnits && g.x_pitch <= INT32_MAX && p.kernel_h * p.kernel_w <= INT32_MAX;
}

// Stride 1, dilation 1, KW 3, 5 or 7, KH <= 9, C a multiple of the 16-byte channel
// group (4 fp32, 8 fp16/bf16), the grid within CUDA's limits.
bool can_implement_fwd_rowstream(const DwConvParams& p, bool half_precision) {
  const int64_t width = half_precision ? 8 : 4;
  // One grid dimension holds every block: at most out_h rows an image and strip.
  const int64_t channel_blocks = (p.channels + 8 * width - 1) / (8 * width);
  const int64_t most_blocks =
      p.batch * p.out_h * ((p.out_w + kFwdRowStreamNarrowWidth - 1) / kFwdRowStreamNarrowWidth);
  return p.stride_h == 1 && p.stride_w == 1 && p.dilation_h == 1 && p.dilation_w == 1 &&
         (p.kernel_w == 3 || p.kernel_w == 5 || p.kernel_w == 7) && p.kernel_h <= kFwdRowStreamMaxKernelH &&
         p.channels % width == 0 && most_blocks <= INT32_MAX / std::max<int64_t>(channel_blocks, 1) &&
         p.in_w * p.channels <= INT32_MAX;  // the kernel's copy offsets within a row
}

// stride_w 1 or 2, dilation_w 1, KW <= 512, and the grid within CUDA's limits, checked
// for the most blocks either storage type launches: fp32's 32-channel blocks along y,
// the half types' smaller TM along x.
bool can_implement_fwd_gemv(const DwConvParams& p) {
  const int64_t tm = p.stride_w == 1 ? kFwdGemvHalfTmStride1 : kFwdGemvHalfTmStride2;
  const int64_t segments = (p.batch * p.out_h + kFwdGemvRowsPerWarp - 1) / kFwdGemvRowsPerWarp *
                           kFwdGemvRowsPerWarp * ((p.out_w + tm - 1) / tm);
  return (p.stride_w == 1 || p.stride_w == 2) && p.dilation_w == 1 && p.kernel_w <= kFwdGemvMaxKernelW &&
         (p.channels + kFwdGemvF32BlockChannels - 1) / kFwdGemvF32BlockChannels <= 65535 &&
         (segments + kFwdGemvSegments - 1) / kFwdGemvSegments <= INT32_MAX;
}

bool can_implement_fwd_stride2(const DwConvParams& p, bool half_precision) {
  if (p.stride_h != 2 || p.stride_w != 2 || p.dilation_h != 1 || p.dilation_w != 1) return false;
  if (p.kernel_h != p.kernel_w || (p.kernel_w != 3 && p.kernel_w != 5)) return false;
  const int64_t width = fwd_stride2_width(p.kernel_w, half_precision);
  if (p.channels <= 0 || p.channels % width != 0 || p.channels > INT32_MAX) return false;
  // Rows and columns as int in the kernel: 2 * out + K - pad and the sizes.
  constexpr int64_t kMax = INT32_MAX / 4;
  const auto within = [](int64_t v) { return v >= -kMax && v <= kMax; };
  if (!within(p.in_h) || !within(p.in_w) || !within(p.out_h) || !within(p.out_w) || !within(p.pad_top) ||
      !within(p.pad_left)) {
    return false;
  }
  // An image's threads in blockIdx.x * 128 + threadIdx.x, for the longest runs the
  // launcher may pick (the most threads are at one row a run).
  const FwdStride2Grid g = make_fwd_stride2_grid(p, width, 1);
  return g.slots <= INT32_MAX - 1024;
}

// Square 3x3 and 5x5 fp16/bf16 filters with whole 64-channel blocks go to the
// register-filter kernel at every width, where it was timed faster than the kernels
// that take those problems otherwise (kernel A/B through this dispatcher on the H200,
// docs/design-notes.md). Against the row-stream kernel, 5x5: 0.830 and 0.871 of the
// time in bf16 on the 64- and 32-wide paper maps (C = 256, 1024), 0.846 and 0.919 in
// fp16, 0.793 on 128x56x56x128; 3x3: 0.95-0.99 on the three paper maps in both dtypes,
// 0.833 on 128x56x56x128; under 32 columns, where the row-stream kernel has few
// blocks, 0.38-0.87 (ConvNeXt's 28-, 14- and 7-wide maps at C = 192-768,
// 128x16x16x512, 128x24x24x256). Against the tensor-core kernel over 64 columns, 5x5:
// 0.946 (bf16) and 0.881 (fp16) on 128^4, 0.909 on 128x112x112x128. C = 96 is not
// whole blocks (it took 1.31 of the time there). Other multiples of 8 go there where
// padding the words to whole warps idles at most fwd_regfilter_max_idle_lanes_pct of
// the lanes (plan/thresholds.h). fp32 goes there on maps of at most
// fwd_regfilter_fp32_max_out_w columns only, where the row-stream kernel that takes
// fp32 3x3 and 5x5 otherwise is bound by its small grid.
FwdKernel plan_fwd(const DwConvParams& p, bool half_precision, const DeviceLimits& device) {
  const PlanThresholds& t = kPlanThresholds;
  const int64_t words = fwd_regfilter_words(p.channels, half_precision);
  const int64_t idle = fwd_regfilter_lane_words(p.channels, half_precision) - words;
  const bool few_idle_lanes = 100 * idle <= t.fwd_regfilter_max_idle_lanes_pct * words;
  const bool wanted = half_precision || p.out_w <= t.fwd_regfilter_fp32_max_out_w;
  return wanted && can_implement_fwd_regfilter(p, half_precision) && few_idle_lanes
             ? FwdKernel::kRegFilter
             : plan_fwd_without_regfilter(p, half_precision, device);
}

// The Hopper kernel from fwd_wgmma_min_kernel taps in both directions, on maps of at
// least fwd_wgmma_min_out_w columns or with filters of at least
// fwd_wgmma_narrow_min_kernel columns (plan/thresholds.h).
FwdKernel plan_fwd_without_regfilter(const DwConvParams& p, bool half_precision, const DeviceLimits& device) {
  const PlanThresholds& t = kPlanThresholds;
  const int64_t min_kernel = t.fwd_wgmma_min_kernel;
  const bool wide = p.out_w >= t.fwd_wgmma_min_out_w || p.kernel_w >= t.fwd_wgmma_narrow_min_kernel;
  if (p.kernel_h >= min_kernel && p.kernel_w >= min_kernel && wide &&
      can_implement_fwd_wgmma(p, half_precision, device)) {
    return FwdKernel::kWgmma;
  }
  return plan_fwd_without_wgmma(p, half_precision, device);
}

FwdKernel plan_fwd_without_wgmma(const DwConvParams& p, bool half_precision, const DeviceLimits& device) {
  const PlanThresholds& t = kPlanThresholds;
  const bool mma_faster = p.kernel_w >= t.fwd_mma_min_kernel_w ||
                          (p.kernel_w == t.fwd_mma_kw5_kernel_w &&
                           (p.out_w >= t.fwd_mma_kw5_min_out_w || p.channels % kFwdRowStreamHalfBlockChannels != 0));
  if (mma_faster && can_implement_fwd_mma(p, half_precision, device)) return FwdKernel::kMma;
  if (can_implement_fwd_rowstream(p, half_precision)) return FwdKernel::kRowStream;
  // Stride-2 3x3 and 5x5 ahead of the GEMV kernel wherever the stride-2 kernel can run
  // them: MobileNetV2's 64x112x112x96 3x3 bf16 layer 0.108 ms against the GEMV
  // kernel's 0.158 on an H100 (docs/design-notes.md, "Stride-2 forward").
  if (can_implement_fwd_stride2(p, half_precision)) return FwdKernel::kStride2;
  return can_implement_fwd_gemv(p) ? FwdKernel::kGemv : FwdKernel::kDirect;
}

}  // namespace flashdwc
