// The tensor-core forward's grid for a problem (fwd/mma.cuh, fwd/mma_stream.cuh):
// images a strip, filter copies, filter rows a stage and output tiles a block, chosen
// on the host from the device's limits. Host code only.
#pragma once

#include "common/params.h"
#include "fwd/mma_layout.h"
#include "plan/device_limits.h"

namespace flashdwc {

// The most images per strip that the output width leaves room for and whose x
// tile fits in shared memory (1 always fits where can_implement_fwd_mma holds); then,
// for filters at most kMaxMultiTileKernelH (13) tall, the most tiles per block that
// leave at least kMinWaves waves of blocks, so that the last wave's idle SMs stay a
// small part of the time: at KH <= 9 with 16-byte pixels (vec) and one image a strip
// the streaming kernel's 16, 8, 4 or 2 at two blocks an SM, else
// dwconv_fwd_mma_kernel's up to 4 that keep the SMs' resident blocks
// (tall_multi_tile_grid above 9 rows).
// tiles_per_block > 0 fixes the tiles per block instead (tests); filters taller than
// kMaxMultiTileKernelH (13) always get one.
MmaFwdGrid choose_mma_fwd_grid(const DwConvParams& p, const DeviceLimits& d, int tiles_per_block, bool vec);

}  // namespace flashdwc
