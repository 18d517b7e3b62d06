// The filter gradient's fp32 launch, and the workspace size the lowering asks for
// (see bwd_filter/launch.cuh for why one file per dtype).
#include <cstdint>

#include "bwd_filter/launch.cuh"

namespace flashdwc {

int64_t bwd_filter_workspace_bytes(const DwConvParams& p, bool deterministic, bool half_precision) {
  if (!can_implement_bwd_filter_split(p)) return 0;
  const BwdFilterGrid g = make_bwd_filter_grid(p, bwd_filter_tiling(p, half_precision), deterministic);
  const int64_t slices = g.atomic ? 1 : bwd_filter_splits(g);
  return slices * p.kernel_h * p.kernel_w * p.channels * int64_t(sizeof(float));
}

template cudaError_t run_dwconv_bwd_filter<float>(const DwConvParams&, const float*, const float*, float*,
                                                  float*, bool, cudaStream_t);

}  // namespace flashdwc
