// Launchers for the CUDA kernels: kernel choice, grid computation, launch.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "dwconv/bwd_filter_split.cuh"
#include "dwconv/direct_kernels.cuh"
#include "dwconv/dwconv_cuda.h"
#include "dwconv/fwd_gemv.cuh"
#include "dwconv/fwd_gemv_lane.cuh"
#include "dwconv/fwd_mma.h"
#include "dwconv/fwd_rowstream.cuh"

namespace flashdwc {
namespace {

constexpr int kDirectThreads = 256;
// Grid-stride loops cover any size; more blocks than this buys nothing on an
// H200 (132 SMs x 8 resident blocks of 256 threads = 1056).
constexpr int64_t kMaxDirectBlocks = 65536;

// Outputs per thread along the width in the GEMV kernel, and the register cap
// (through the minimum resident blocks per SM). fp32 stride 1: the paper's TM = 8,
// capped at 128 registers (4 blocks of 128 threads per SM; uncapped, ptxas takes
// 143-168 and only 3 fit). Stride 2 needs a window of 2*TM - 1 columns: TM = 8
// took 202-255 registers and spilled kilobytes when capped, TM = 4 fits in 128.
// fp16/bf16 threads hold 8 channels, twice fp32's 4, so half the TM keeps the
// accumulators and the window the same size.
template <typename T, int kStride>
struct GemvConfig {
  static constexpr int kTM = (kStride == 1 ? 8 : 4) * 4 / GemvFwdTraits<T>::kChannelsPerThread;
  static constexpr int kMinBlocksPerSM = 4;
};
// Widest filter row the GEMV kernel keeps in shared memory: 2 rows x 512 taps x
// 128 bytes of channels = 128 KiB, within the 227 KiB an sm_90 block may use.
constexpr int64_t kGemvMaxKernelW = 512;
// Filter bytes per pipeline stage: whole filters up to 11x11 (fp32) in one stage,
// four 31-wide rows per stage, while two stages stay small next to L1.
constexpr int64_t kGemvStageBytes = 16 * 1024;

dim3 direct_grid(int64_t elements) {
  const int64_t blocks = (elements + kDirectThreads - 1) / kDirectThreads;
  return dim3(unsigned(std::clamp<int64_t>(blocks, 1, kMaxDirectBlocks)));
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <typename T>
cudaError_t launch_fwd_direct(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                              const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  const int64_t elements = p.batch * p.out_h * p.out_w * p.channels;
  dwconv_fwd_direct_kernel<T><<<direct_grid(elements), kDirectThreads, 0, stream>>>(x, w, y, p, epilogue, prologue);
  return cudaGetLastError();
}

template <typename T, int kStride, bool kVec, bool kPrologue>
cudaError_t launch_fwd_gemv(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                            const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  using Tr = GemvFwdTraits<T>;
  constexpr int kTM = GemvConfig<T, kStride>::kTM;
  GemvFwdGrid grid;
  grid.segments_per_row = (p.out_w + kTM - 1) / kTM;
  grid.rows = p.batch * p.out_h;
  grid.segments = (grid.rows + Tr::kRowsPerWarp - 1) / Tr::kRowsPerWarp * Tr::kRowsPerWarp * grid.segments_per_row;
  const int64_t row_bytes = p.kernel_w * Tr::kBlockChannels * int64_t(sizeof(T));
  grid.rows_per_stage = std::clamp<int64_t>(kGemvStageBytes / row_bytes, 1, p.kernel_h);
  const dim3 blocks(unsigned((grid.segments + Tr::kSegments - 1) / Tr::kSegments),
                    unsigned((p.channels + Tr::kBlockChannels - 1) / Tr::kBlockChannels));
  const size_t smem = 2 * size_t(grid.rows_per_stage * row_bytes);
  // The prologue's scale and shift take 2 x 4 (fp32) or 2 x 8 (half) more registers
  // per thread: under the 128-register cap they spilled 64-752 bytes (ptxas), so
  // those kernels run 3 blocks per SM (up to 168 registers) instead.
  constexpr int kMinBlocks = kPrologue ? 3 : GemvConfig<T, kStride>::kMinBlocksPerSM;
  auto kernel = dwconv_fwd_gemv_kernel<T, kTM, kStride, kVec, kPrologue, kMinBlocks>;
  if (smem > 48 * 1024) {
    if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        err != cudaSuccess) {
      return err;
    }
  }
  kernel<<<blocks, Tr::kThreads, smem, stream>>>(x, w, y, p, grid, epilogue, prologue);
  return cudaGetLastError();
}

template <typename T, int kStride>
cudaError_t launch_fwd_gemv_stride(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                                   const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  const bool vec = p.channels % GemvFwdTraits<T>::kChannelsPerThread == 0 && aligned(x, 16) && aligned(w, 16) &&
                   aligned(y, 16);
  // The prologue is a template flag: the kernels without it compile as before.
  if (prologue.active()) {
    return vec ? launch_fwd_gemv<T, kStride, true, true>(p, x, w, y, stream, epilogue, prologue)
               : launch_fwd_gemv<T, kStride, false, true>(p, x, w, y, stream, epilogue, prologue);
  }
  return vec ? launch_fwd_gemv<T, kStride, true, false>(p, x, w, y, stream, epilogue, prologue)
             : launch_fwd_gemv<T, kStride, false, false>(p, x, w, y, stream, epilogue, prologue);
}

// Lane GEMV kernel (fwd_gemv_lane.cuh) sizes. Outputs per thread: 16, or 8 where
// rounding Wo up to 16 would leave more than 1/8 of the outputs idle (56 -> 64,
// 28 -> 32, 7 -> 16). Register caps, from ptxas at zero spill: TM 16 fits 96
// registers (5 blocks of 128 threads per SM; at 80 it spilled 64 bytes), TM 8 fits
// 80 (6 blocks; at 64 it spilled 16).
template <int kTM>
struct GemvLaneConfig;
template <>
struct GemvLaneConfig<16> {
  static constexpr int kMinBlocksPerSM = 5;
};
template <>
struct GemvLaneConfig<8> {
  static constexpr int kMinBlocksPerSM = 6;
};
// Filters 3 to 7 wide go to the row-stream kernel; the lane kernel takes fp32 from
// 9 wide, where the GEMV kernel's load pipe limits it, up to rows that fit one
// 16 KiB shared-memory stage (128 taps x 32 channels x 4 bytes).
constexpr int64_t kGemvLaneMinKernelW = 9;
constexpr int64_t kGemvLaneStageBytes = 16 * 1024;
constexpr int64_t kGemvLaneMaxKernelW =
    kGemvLaneStageBytes / (GemvLaneTraits::kBlockChannels * int64_t(sizeof(float)));

int gemv_lane_tm(const DwConvParams& p) {
  const int64_t padded = (p.out_w + 15) / 16 * 16;
  return (padded - p.out_w) * 8 <= p.out_w ? 16 : 8;
}

template <int kTM>
cudaError_t launch_fwd_gemv_lane(const DwConvParams& p, const float* x, const float* w, float* y,
                                 cudaStream_t stream, const FwdEpilogue& epilogue) {
  using Tr = GemvLaneTraits;
  GemvLaneGrid grid;
  grid.segments_per_row = (p.out_w + kTM - 1) / kTM;
  grid.rows = p.batch * p.out_h;
  const int64_t row_bytes = p.kernel_w * Tr::kBlockChannels * int64_t(sizeof(float));
  grid.rows_per_stage = std::clamp<int64_t>(kGemvLaneStageBytes / row_bytes, 1, p.kernel_h);
  const int64_t row_groups = (grid.rows + Tr::kRowsPerBlock - 1) / Tr::kRowsPerBlock;
  const dim3 blocks(unsigned(row_groups * grid.segments_per_row),
                    unsigned((p.channels + Tr::kBlockChannels - 1) / Tr::kBlockChannels));
  // Two stages of at most 16 KiB: within the 48 KiB a launch gets without opting in.
  const size_t smem = 2 * size_t(grid.rows_per_stage * row_bytes);
  dwconv_fwd_gemv_lane_kernel<kTM, GemvLaneConfig<kTM>::kMinBlocksPerSM>
      <<<blocks, Tr::kThreads, smem, stream>>>(x, w, y, p, grid, epilogue);
  return cudaGetLastError();
}

// Whether the lane GEMV kernel takes the problem (with a prologue the GEMV kernel
// runs instead).
bool gemv_lane_supports(const DwConvParams& p, bool half_precision) {
  using Tr = GemvLaneTraits;
  const int64_t most_segments = (p.out_w + 7) / 8;  // at TM 8
  const int64_t row_groups = (p.batch * p.out_h + Tr::kRowsPerBlock - 1) / Tr::kRowsPerBlock;
  return !half_precision && p.stride_w == 1 && p.dilation_w == 1 && p.kernel_w >= kGemvLaneMinKernelW &&
         p.kernel_w <= kGemvLaneMaxKernelW &&
         (p.channels + Tr::kBlockChannels - 1) / Tr::kBlockChannels <= 65535 &&
         row_groups * most_segments <= INT32_MAX;
}

// Row-stream kernel sizes. Outputs per thread: 4 (64-column strips), or 2 where
// the output is at most 32 wide, so that narrow images do not leave half of every
// strip idle. Blocks: enough for several waves on an H200 (132 SMs, up to 4
// resident blocks of 128 threads each), in runs of at least 16 output rows so that the
// KH - 1 halo rows a block reads twice stay a small fraction.
constexpr int64_t kRowStreamTargetBlocks = 2048;
constexpr int64_t kRowStreamMinRows = 16;
constexpr int64_t kRowStreamMaxKernelH = 9;
constexpr int64_t kRowStreamNarrowWidth = 32;

template <typename T, int kTM, int kKW>
cudaError_t launch_fwd_rowstream(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                                 const FwdEpilogue& epilogue) {
  using Tr = RowStreamTraits<T, kTM>;
  RowStreamGrid grid;
  grid.strips = (p.out_w + Tr::kStripWidth - 1) / Tr::kStripWidth;
  const int64_t channel_blocks = (p.channels + Tr::kBlockChannels - 1) / Tr::kBlockChannels;
  const int64_t base = std::max<int64_t>(p.batch * grid.strips * channel_blocks, 1);
  const int64_t row_blocks = std::clamp<int64_t>((kRowStreamTargetBlocks + base - 1) / base, 1, p.out_h);
  grid.rows_per_block = std::max((p.out_h + row_blocks - 1) / row_blocks, std::min(p.out_h, kRowStreamMinRows));
  grid.row_blocks = (p.out_h + grid.rows_per_block - 1) / grid.rows_per_block;
  grid.ring_rows = int(p.kernel_h) + Tr::kPrefetchRows;
  const size_t smem = size_t(rowstream_smem_bytes<T, kTM>(p.kernel_h, kKW));
  auto kernel = dwconv_fwd_rowstream_kernel<T, kTM, kKW>;
  if (smem > 48 * 1024) {
    if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        err != cudaSuccess) {
      return err;
    }
  }
  const dim3 blocks(unsigned(p.batch * grid.strips * grid.row_blocks), unsigned(channel_blocks));
  kernel<<<blocks, Tr::kThreads, smem, stream>>>(x, w, y, p, grid, epilogue);
  return cudaGetLastError();
}

template <typename T, int kTM>
cudaError_t launch_fwd_rowstream_width(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                                       const FwdEpilogue& epilogue) {
  switch (p.kernel_w) {
    case 3: return launch_fwd_rowstream<T, kTM, 3>(p, x, w, y, stream, epilogue);
    case 5: return launch_fwd_rowstream<T, kTM, 5>(p, x, w, y, stream, epilogue);
    default: return launch_fwd_rowstream<T, kTM, 7>(p, x, w, y, stream, epilogue);
  }
}

// Whether the row-stream kernel takes the problem, from its geometry alone (the
// launch also needs 16-byte aligned buffers and no prologue).
bool rowstream_supports(const DwConvParams& p, bool half_precision) {
  const int64_t width = half_precision ? 8 : 4;
  const int64_t most_blocks = p.batch * p.out_h * ((p.out_w + kRowStreamNarrowWidth - 1) / kRowStreamNarrowWidth);
  return p.stride_h == 1 && p.stride_w == 1 && p.dilation_h == 1 && p.dilation_w == 1 &&
         (p.kernel_w == 3 || p.kernel_w == 5 || p.kernel_w == 7) && p.kernel_h <= kRowStreamMaxKernelH &&
         p.channels % width == 0 && (p.channels + 8 * width - 1) / (8 * width) <= 65535 && most_blocks <= INT32_MAX;
}

}  // namespace

// Narrowest filter the tensor-core kernel takes. Measured on the H200, bf16
// 128x64x64x256 (tests/cuda/check_fwd_mma.cu --time against the GEMV kernel):
// k = 3 0.733 ms vs 0.548 ms (GEMV wins), k = 7 0.822 vs 1.437, k = 31 3.92 vs 13.7.
// k = 5 was not measured; it stays on the GEMV kernel.
constexpr int64_t kMmaMinKernelW = 7;

FwdKernel select_fwd_kernel(const DwConvParams& p, bool half_precision) {
  if (half_precision && p.kernel_w >= kMmaMinKernelW && fwd_mma_supports(p)) return FwdKernel::kMma;
  if (rowstream_supports(p, half_precision)) return FwdKernel::kRowStream;
  if (gemv_lane_supports(p, half_precision)) return FwdKernel::kGemvLane;
  // Grid limits of the GEMV kernel, checked for the most blocks either storage type
  // launches: fp32's 32-channel blocks along y, the half types' smaller TM along x.
  using Tr = GemvFwdTraits<float>;
  const int64_t tm = p.stride_w == 1 ? GemvConfig<__half, 1>::kTM : GemvConfig<__half, 2>::kTM;
  const int64_t segments = (p.batch * p.out_h + Tr::kRowsPerWarp - 1) / Tr::kRowsPerWarp * Tr::kRowsPerWarp *
                           ((p.out_w + tm - 1) / tm);
  const bool gemv = (p.stride_w == 1 || p.stride_w == 2) && p.dilation_w == 1 &&
                    p.kernel_w <= kGemvMaxKernelW &&
                    (p.channels + Tr::kBlockChannels - 1) / Tr::kBlockChannels <= 65535 &&
                    (segments + Tr::kSegments - 1) / Tr::kSegments <= INT32_MAX;
  return gemv ? FwdKernel::kGemv : FwdKernel::kDirect;
}

template <typename T>
cudaError_t run_dwconv_fwd(const DwConvParams& p, const T* x, const T* w, T* y, cudaStream_t stream,
                           const FwdEpilogue& epilogue, const FwdPrologue& prologue) {
  const FwdKernel kernel = select_fwd_kernel(p, !std::is_same_v<T, float>);
  if constexpr (!std::is_same_v<T, float>) {
    if (kernel == FwdKernel::kMma) return launch_fwd_mma(p, x, w, y, stream, epilogue, prologue);
  }
  if (kernel == FwdKernel::kDirect) return launch_fwd_direct(p, x, w, y, stream, epilogue, prologue);
  if constexpr (std::is_same_v<T, float>) {
    if (kernel == FwdKernel::kGemvLane && !prologue.active()) {
      return gemv_lane_tm(p) == 16 ? launch_fwd_gemv_lane<16>(p, x, w, y, stream, epilogue)
                                   : launch_fwd_gemv_lane<8>(p, x, w, y, stream, epilogue);
    }
  }
  if (kernel == FwdKernel::kRowStream && !prologue.active() && aligned(x, 16) && aligned(w, 16) && aligned(y, 16)) {
    return p.out_w <= kRowStreamNarrowWidth ? launch_fwd_rowstream_width<T, 2>(p, x, w, y, stream, epilogue)
                                            : launch_fwd_rowstream_width<T, 4>(p, x, w, y, stream, epilogue);
  }
  return p.stride_w == 1 ? launch_fwd_gemv_stride<T, 1>(p, x, w, y, stream, epilogue, prologue)
                         : launch_fwd_gemv_stride<T, 2>(p, x, w, y, stream, epilogue, prologue);
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

namespace {

// Tiling of the backward-filter split kernel: channels per thread and taps per
// thread (TM), the paper's flexible tiling. A filter row of KW taps takes
// ceil(KW / TM) tiles of TM taps, and a tile costs about TM FMA steps plus 2 for
// its loads per output column. Among a width's TMs the one that minimizes tiles x
// (TM + 2) wastes least. Width 4: 9 -> 5 (10 taps computed; TM = 8 computed 16,
// and k = 9 measured 6.8 ms against 2.6 ms at k = 7 on 128x128x128x128), 13, 17,
// 21 -> 7, 31, 51 -> 8. TM = 9 is left out: it spills 148-256 bytes under the
// 128-register cap, TM = 7 spills 32. Width 8 (fp16/bf16 only) holds twice the
// channels, so it takes TM 3 or 4 for the registers of width 4's 6 or 8.
constexpr int kBwdFilterTmWidth4[] = {8, 7, 5, 4};
constexpr int kBwdFilterTmWidth8[] = {4, 3};
// Width 1 holds a quarter of width 4's registers per tap, so its TMs reach 16; the
// four fit the common widths: 9 -> 9, 13 -> 13, 17 -> 9 (18 taps), 21 -> 11,
// 27 -> 9, 29 and 31 -> 16 (32), 51 -> 13 (52), 63 -> 16 (64).
constexpr int kBwdFilterTmWidth1[] = {16, 13, 11, 9};
// The narrowest filter that takes width 1. Not yet measured (branch
// wip/bwd-filter-lane): the A/B in benchmarks/cuda/time_bwd_filter.cu sets it.
constexpr int64_t kBwdFilterLaneMinKernelW = 9;

template <size_t kCount>
int bwd_filter_best_tm(const DwConvParams& p, const int (&candidates)[kCount]) {
  int best = candidates[0];
  int64_t best_cost = INT64_MAX;
  for (int tm : candidates) {  // ties go to the larger TM (listed first): fewer loads per FMA
    const int64_t cost = (p.kernel_w + tm - 1) / tm * (tm + 2);
    if (cost < best_cost) best = tm, best_cost = cost;
  }
  return best;
}

int64_t bwd_filter_taps_computed(const DwConvParams& p, int tm) { return (p.kernel_w + tm - 1) / tm * tm; }

}  // namespace

// fp16/bf16 take width 8 (16-byte loads) when its TM computes no more taps than
// width 4's. Measured on the H200, bf16 128x128x128x128, atomic mode, ms width 4 ->
// width 8: k = 3 (taps 4 -> 3) 0.709 -> 0.590, k = 31 (32 -> 32) 30.2 -> 26.6;
// k = 5 (5 -> 6) 0.981 -> 1.806, k = 7 (7 -> 8) 1.493 -> 2.078, k = 13 (14 -> 16)
// 5.74 -> 6.95. So the wider load wins when the tiles waste nothing more, and one
// wasted tap in 5 to 7 costs more than it gains.
BwdFilterTiling bwd_filter_tiling(const DwConvParams& p, bool half_precision) {
  if (p.kernel_w >= kBwdFilterLaneMinKernelW) return {1, bwd_filter_best_tm(p, kBwdFilterTmWidth1)};
  const BwdFilterTiling narrow{4, bwd_filter_best_tm(p, kBwdFilterTmWidth4)};
  if (!half_precision) return narrow;
  const BwdFilterTiling wide{8, bwd_filter_best_tm(p, kBwdFilterTmWidth8)};
  return bwd_filter_taps_computed(p, wide.tm) <= bwd_filter_taps_computed(p, narrow.tm) ? wide : narrow;
}

namespace {

// Blocks the split kernel aims for: 4 waves of 132 SMs x 4 resident blocks, so
// that the last wave's tail costs little. Z (the chunks of the N * Ho rows) is
// what brings a small filter's grid up to it.
constexpr int64_t kBwdFilterTargetBlocks = 2048;
// Deterministic mode keeps one fp32 slice of the filter per chunk; Z is lowered
// until the slices fit in this.
constexpr int64_t kBwdFilterMaxWorkspaceBytes = int64_t(256) << 20;

// The channel-block limit is checked for the narrower blocks.
bool bwd_filter_split_applies(const DwConvParams& p) {
  using Tr = BwdFilterTraits<4>;
  return (p.stride_w == 1 || p.stride_w == 2) && p.dilation_w == 1 &&
         (p.channels + Tr::kBlockChannels - 1) / Tr::kBlockChannels <= 65535 &&
         p.kernel_h * p.kernel_w <= INT32_MAX;
}

BwdFilterGrid make_bwd_filter_grid(const DwConvParams& p, const BwdFilterTiling& tiling, bool deterministic) {
  const int tm = tiling.tm;
  const int64_t block_channels =
      tiling.width == 8 ? BwdFilterTraits<8>::kBlockChannels : BwdFilterTraits<4>::kBlockChannels;
  static_assert(BwdFilterTraits<1>::kBlockChannels == BwdFilterTraits<4>::kBlockChannels);
  const int kSlots = tiling.width == 1 ? BwdFilterTraits<1>::kSlots : BwdFilterTraits<4>::kSlots;
  static_assert(BwdFilterTraits<4>::kSlots == BwdFilterTraits<8>::kSlots, "widths 4 and 8 have 16 slots");
  BwdFilterGrid g;
  g.kw_tiles = (p.kernel_w + tm - 1) / tm;
  g.tiles = p.kernel_h * g.kw_tiles;
  g.tiles_per_block = int(std::min<int64_t>(kSlots, g.tiles));
  g.lanes = kSlots / g.tiles_per_block;
  g.rows = p.batch * p.out_h;
  const int64_t blocks_xy = ((g.tiles + g.tiles_per_block - 1) / g.tiles_per_block) *
                            ((p.channels + block_channels - 1) / block_channels);
  const int64_t slice_bytes = p.kernel_h * p.kernel_w * p.channels * int64_t(sizeof(float));
  int64_t splits = (kBwdFilterTargetBlocks + blocks_xy - 1) / blocks_xy;
  splits = std::min(splits, (g.rows + g.lanes - 1) / g.lanes);  // at least one row per lane
  if (deterministic) splits = std::min(splits, kBwdFilterMaxWorkspaceBytes / slice_bytes);
  splits = std::clamp<int64_t>(splits, 1, 65535);
  g.rows_per_split = (g.rows + splits - 1) / splits;
  g.atomic = !deterministic;
  return g;
}

int64_t bwd_filter_splits(const BwdFilterGrid& g) { return (g.rows + g.rows_per_split - 1) / g.rows_per_split; }

template <typename T, int kWidth, int kTM, int kStride, bool kVec>
cudaError_t launch_bwd_filter_split(const DwConvParams& p, const BwdFilterGrid& g, const T* x, const T* dy,
                                    float* ws, cudaStream_t stream) {
  using Tr = BwdFilterTraits<kWidth>;
  const dim3 blocks(unsigned((g.tiles + g.tiles_per_block - 1) / g.tiles_per_block),
                    unsigned((p.channels + Tr::kBlockChannels - 1) / Tr::kBlockChannels),
                    unsigned(bwd_filter_splits(g)));
  dwconv_bwd_filter_split_kernel<T, kWidth, kTM, kStride, kVec>
      <<<blocks, Tr::kThreads, 0, stream>>>(x, dy, ws, p, g);
  return cudaGetLastError();
}

// A vector load needs every channel group whole (C a multiple of the width) and the
// load's alignment; the fp32 workspace rows are stored as float4.
template <typename T, int kWidth, int kTM>
cudaError_t launch_bwd_filter_split_tm(const DwConvParams& p, const BwdFilterGrid& g, const T* x, const T* dy,
                                       float* ws, cudaStream_t stream) {
  if constexpr (kWidth == 1) {  // one element per lane: no vector variant
    return p.stride_w == 1 ? launch_bwd_filter_split<T, kWidth, kTM, 1, false>(p, g, x, dy, ws, stream)
                           : launch_bwd_filter_split<T, kWidth, kTM, 2, false>(p, g, x, dy, ws, stream);
  }
  constexpr size_t kLoadBytes = kWidth * sizeof(T);
  const bool vec =
      p.channels % kWidth == 0 && aligned(x, kLoadBytes) && aligned(dy, kLoadBytes) && aligned(ws, 16);
  if (p.stride_w == 1) {
    return vec ? launch_bwd_filter_split<T, kWidth, kTM, 1, true>(p, g, x, dy, ws, stream)
               : launch_bwd_filter_split<T, kWidth, kTM, 1, false>(p, g, x, dy, ws, stream);
  }
  return vec ? launch_bwd_filter_split<T, kWidth, kTM, 2, true>(p, g, x, dy, ws, stream)
             : launch_bwd_filter_split<T, kWidth, kTM, 2, false>(p, g, x, dy, ws, stream);
}

template <typename T>
cudaError_t launch_bwd_filter_split_tiling(const DwConvParams& p, const BwdFilterTiling& tiling,
                                           const BwdFilterGrid& g, const T* x, const T* dy, float* ws,
                                           cudaStream_t stream) {
  if (tiling.width == 1) {
    switch (tiling.tm) {
      case 9: return launch_bwd_filter_split_tm<T, 1, 9>(p, g, x, dy, ws, stream);
      case 11: return launch_bwd_filter_split_tm<T, 1, 11>(p, g, x, dy, ws, stream);
      case 13: return launch_bwd_filter_split_tm<T, 1, 13>(p, g, x, dy, ws, stream);
      default: return launch_bwd_filter_split_tm<T, 1, 16>(p, g, x, dy, ws, stream);
    }
  }
  if constexpr (!std::is_same_v<T, float>) {
    if (tiling.width == 8) {
      return tiling.tm == 3 ? launch_bwd_filter_split_tm<T, 8, 3>(p, g, x, dy, ws, stream)
                            : launch_bwd_filter_split_tm<T, 8, 4>(p, g, x, dy, ws, stream);
    }
  }
  switch (tiling.tm) {
    case 4: return launch_bwd_filter_split_tm<T, 4, 4>(p, g, x, dy, ws, stream);
    case 5: return launch_bwd_filter_split_tm<T, 4, 5>(p, g, x, dy, ws, stream);
    case 7: return launch_bwd_filter_split_tm<T, 4, 7>(p, g, x, dy, ws, stream);
    default: return launch_bwd_filter_split_tm<T, 4, 8>(p, g, x, dy, ws, stream);
  }
}

}  // namespace

int64_t bwd_filter_workspace_bytes(const DwConvParams& p, bool deterministic, bool half_precision) {
  if (!bwd_filter_split_applies(p)) return 0;
  const BwdFilterGrid g = make_bwd_filter_grid(p, bwd_filter_tiling(p, half_precision), deterministic);
  const int64_t slices = g.atomic ? 1 : bwd_filter_splits(g);
  return slices * p.kernel_h * p.kernel_w * p.channels * int64_t(sizeof(float));
}

template <typename T>
cudaError_t run_dwconv_bwd_filter(const DwConvParams& p, const T* x, const T* dy, T* dw, float* workspace,
                                  bool deterministic, cudaStream_t stream) {
  if (!bwd_filter_split_applies(p)) {
    const dim3 grid(unsigned(p.kernel_h * p.kernel_w),
                    unsigned((p.channels + kBwdFilterChannels - 1) / kBwdFilterChannels));
    const dim3 block(kBwdFilterChannels, kBwdFilterRows);
    dwconv_bwd_filter_direct_kernel<T><<<grid, block, 0, stream>>>(x, dy, dw, p);
    return cudaGetLastError();
  }
  const BwdFilterTiling tiling = bwd_filter_tiling(p, !std::is_same_v<T, float>);
  const BwdFilterGrid g = make_bwd_filter_grid(p, tiling, deterministic);
  const int64_t count = p.kernel_h * p.kernel_w * p.channels;
  if (g.atomic) {
    if (cudaError_t err = cudaMemsetAsync(workspace, 0, count * sizeof(float), stream); err != cudaSuccess) {
      return err;
    }
  }
  const cudaError_t err = launch_bwd_filter_split_tiling<T>(p, tiling, g, x, dy, workspace, stream);
  if (err != cudaSuccess) return err;
  const int64_t slices = g.atomic ? 1 : bwd_filter_splits(g);
  dwconv_bwd_filter_finalize_kernel<T><<<direct_grid(count), kDirectThreads, 0, stream>>>(workspace, dw, count,
                                                                                          slices);
  return cudaGetLastError();
}

#define FLASHDWC_INSTANTIATE_CUDA(T)                                                               \
  template cudaError_t run_dwconv_fwd<T>(const DwConvParams&, const T*, const T*, T*, cudaStream_t,   \
                                         const FwdEpilogue&, const FwdPrologue&);                     \
  template cudaError_t run_dwconv_bwd_data<T>(const DwConvParams&, const T*, const T*, T*,            \
                                              cudaStream_t);                                          \
  template cudaError_t run_dwconv_bwd_filter<T>(const DwConvParams&, const T*, const T*, T*, float*,  \
                                                bool, cudaStream_t);

FLASHDWC_INSTANTIATE_CUDA(float)
FLASHDWC_INSTANTIATE_CUDA(__half)
FLASHDWC_INSTANTIATE_CUDA(__nv_bfloat16)

}  // namespace flashdwc
