// The filter gradient's bf16 launch (see bwd_filter/launch.cuh for why one file per dtype).
#include <cuda_bf16.h>

#include "bwd_filter/launch.cuh"

namespace flashdwc {

template cudaError_t run_dwconv_bwd_filter<__nv_bfloat16>(const DwConvParams&, const __nv_bfloat16*,
                                                          const __nv_bfloat16*, __nv_bfloat16*, float*, bool,
                                                          cudaStream_t);

}  // namespace flashdwc
