// Launcher of the tensor-core filter gradient (bwd_filter_mma.cuh).
#include <algorithm>
#include <cstdint>

#include "dwconv/bwd_filter_mma.cuh"
#include "dwconv/bwd_filter_mma.h"
#include "dwconv/launch_helpers.cuh"

namespace flashdwc {
namespace {

// Blocks the kernel aims for in atomic mode, as the split kernel (bwd_filter_launch.cuh).
constexpr int64_t kTargetBlocks = 2048;
// Input rows a chunk takes at least: each chunk first stages every dy row of its
// group, so a chunk much shorter than the ring would mostly stage.
constexpr int64_t kMinRowsPerRingRow = 2;
// K tiles (16 output columns each) a stage of input rows aims for: 8 rows on maps
// at most 32 columns wide, 4 at 64, 2 at 128, one from 256. Against 8 K tiles (half
// the rows, so 6 blocks an SM fit on 32-column maps instead of 4), the H200 timed
// 1.00-1.02 on 32-column maps and 1.02-1.15 slower elsewhere (k = 31 on 128^4 3.30 ->
// 3.71 ms; docs/design-notes.md, thirteenth session).
constexpr int kStageKTiles = 16;
constexpr int kMaxStageRows = 8;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The smallest n >= at_least with n % 32 == residue.
int round_up_mod32(int64_t at_least, int residue) {
  const int64_t n = at_least + ((residue - at_least) % 32 + 32) % 32;
  return int(n);
}

// The input planes, the dy ring, and one row of zeros after it.
int64_t smem_bytes(const MmaBwdFilterGrid& g) {
  using Tr = MmaBwdFilterTraits;
  return int64_t(g.dy_offset) + (int64_t(Tr::kBlockChannels) * g.ring_rows + 1) * g.dy_words * 4;
}

// n_per_group as wide as the tile budget allows, halved until the ring fits
// `max_smem` (then one input row a stage); `slices` row chunks (deterministic), or
// as many as fill the GPU (slices == 0, atomic).
MmaBwdFilterGrid make_grid(const DwConvParams& p, int64_t slices, int64_t max_smem) {
  using Tr = MmaBwdFilterTraits;
  MmaBwdFilterGrid g;
  g.m_tiles = int(ceil_div(p.kernel_w, 16));
  const int n_total = int(std::min<int64_t>(ceil_div(p.kernel_h, 8), INT32_MAX / 8));
  g.k_tiles = int(ceil_div(p.out_w, 16));
  // Words per plane copy: 16 (K + M) elements cover every A read (see the kernel).
  g.x_words = round_up_mod32(8 * (int64_t(g.k_tiles) + g.m_tiles), 16);
  g.dy_words = round_up_mod32(8 * int64_t(g.k_tiles), 4);
  g.stage_rows = std::clamp(kStageKTiles / g.k_tiles, 1, kMaxStageRows);
  g.n_per_group = std::max(1, std::min(Tr::kMaxTiles / g.m_tiles, n_total));
  for (;;) {
    g.ring_rows = 8 * g.n_per_group + g.stage_rows - 1;
    g.dy_offset = g.stage_rows * Tr::kBlockChannels * 2 * g.x_words * 4;
    if (smem_bytes(g) <= max_smem || (g.n_per_group == 1 && g.stage_rows == 1)) break;
    if (g.n_per_group > 1) {
      g.n_per_group /= 2;
    } else {
      g.stage_rows = 1;
    }
  }
  g.groups = int(ceil_div(n_total, g.n_per_group));
  g.rows = p.batch * p.in_h;
  if (slices > 0) {
    // Chunks past the rows (slices > N * H) run no row and store zeros.
    g.rows_per_split = ceil_div(g.rows, slices);
    g.atomic = false;
  } else {
    const int64_t blocks_xy = int64_t(g.groups) * ceil_div(p.channels, Tr::kBlockChannels);
    int64_t splits = ceil_div(kTargetBlocks, blocks_xy);
    splits = std::min(splits, ceil_div(g.rows, kMinRowsPerRingRow * g.ring_rows));
    splits = std::clamp<int64_t>(splits, 1, 65535);
    g.rows_per_split = ceil_div(g.rows, splits);
    g.atomic = true;
  }
  return g;
}

}  // namespace

bool bwd_filter_mma_applies(const DwConvParams& p) {
  using Tr = MmaBwdFilterTraits;
  if (p.stride_h != 1 || p.stride_w != 1 || p.dilation_h != 1 || p.dilation_w != 1) return false;
  if (p.kernel_w > Tr::kMaxKernelW || p.kernel_h > (int64_t(1) << 20)) return false;
  if (p.batch <= 0 || p.in_h <= 0 || p.out_w <= 0 || p.channels <= 0) return false;
  // Plane and ring offsets are ints; the largest x plane is 16 (K + M) elements.
  if (p.out_w > (int64_t(1) << 20) || p.in_w > (int64_t(1) << 24)) return false;
  if (ceil_div(p.channels, Tr::kBlockChannels) > 65535) return false;
  const int64_t max_smem = max_smem_per_block();
  const MmaBwdFilterGrid g = make_grid(p, 0, max_smem);
  return smem_bytes(g) <= max_smem;
}

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
  const MmaBwdFilterGrid g = make_grid(p, slices, max_smem_per_block());
  const int64_t chunks = slices > 0 ? slices : ceil_div(g.rows, g.rows_per_split);
  const bool vec = p.channels % 8 == 0 && aligned(x, 16) && aligned(dy, 16);
  auto kernel = vec ? mma_kernel_for<T, true>(g) : mma_kernel_for<T, false>(g);
  const int64_t smem = smem_bytes(g);
  if (cudaError_t err = allow_dynamic_smem(kernel, size_t(smem)); err != cudaSuccess) return err;
  const dim3 blocks(unsigned(g.groups), unsigned(ceil_div(p.channels, Tr::kBlockChannels)), unsigned(chunks));
  kernel<<<blocks, Tr::kThreads, size_t(smem), stream>>>(x, dy, workspace, p, g);
  return cudaGetLastError();
}

template cudaError_t launch_bwd_filter_mma<__half>(const DwConvParams&, const __half*, const __half*, float*,
                                                   int64_t, cudaStream_t);
template cudaError_t launch_bwd_filter_mma<__nv_bfloat16>(const DwConvParams&, const __nv_bfloat16*,
                                                          const __nv_bfloat16*, float*, int64_t, cudaStream_t);

}  // namespace flashdwc
