// Helpers shared by the standalone GPU checks (check_fwd_mma.cu, check_bwd_filter_*.cu):
// a CUDA-error macro that ends the check, and fp16/bf16 <-> float on the host.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

template <typename T> float tof(T v);
template <> inline float tof<__half>(__half v) { return __half2float(v); }
template <> inline float tof<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> T fromf(float v);
template <> inline __half fromf<__half>(float v) { return __float2half_rn(v); }
template <> inline __nv_bfloat16 fromf<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
