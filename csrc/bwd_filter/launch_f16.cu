// The filter gradient's fp16 launch (see bwd_filter/launch.cuh for why one file per dtype).
#include <cuda_fp16.h>

#include "bwd_filter/launch.cuh"

namespace flashdwc {

template cudaError_t run_dwconv_bwd_filter<__half>(const DwConvParams&, const __half*, const __half*,
                                                   __half*, float*, bool, cudaStream_t);

}  // namespace flashdwc
