// Marks for index math that the CUDA kernels and the host code (the CPU loops, the
// plan, the check programs) share: under nvcc FLASHDWC_HOST_DEVICE is
// __host__ __device__ and FLASHDWC_FORCEINLINE __forceinline__; in a .cc file they are
// nothing and inline.
#pragma once

#ifdef __CUDACC__
#define FLASHDWC_HOST_DEVICE __host__ __device__
#define FLASHDWC_FORCEINLINE __forceinline__
#else
#define FLASHDWC_HOST_DEVICE
#define FLASHDWC_FORCEINLINE inline
#endif
