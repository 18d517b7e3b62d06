// Device-side conversions between the storage types and the fp32 accumulator.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace flashdwc {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

}  // namespace flashdwc

namespace flashdwc {

// Four consecutive channels moved as one vector: 16 bytes of float, 8 of half or
// bfloat16. The pointer must be aligned to that size (C % 4 == 0 and 16-byte
// aligned buffers guarantee it).
//
// store_global writes global memory with one vector store, in inline PTX. A
// vector assignment, `*reinterpret_cast<uint4*>(p) = v`, came out of nvcc 13.0
// (sm_90) as one 4-byte store per word for global memory (no st.global.v4/v2 in
// fwd/launch.cu or fwd/mma.cu), while shared-memory assignments stayed vectors.
// Nsight Compute on the bf16 tensor-core forward (64x32x32x1536, k = 9) counted
// 21.9M L2 write sectors for 6.3M sectors of output: every sector written in four
// partial pieces. The asm has no "memory" clobber, unlike __stwb: with __stwb the
// fp32 GEMV forward ran 11% slower (128x64x64x256, k = 13 and 31), the clobber
// making the compiler reload what it held in registers across each store. No
// kernel reads back the global memory it stores this way.
__device__ __forceinline__ void store_global_v4(void* p, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(x), "r"(y), "r"(z), "r"(w));
}
__device__ __forceinline__ void store_global_v2(void* p, uint32_t x, uint32_t y) {
  asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" ::"l"(p), "r"(x), "r"(y));
}

template <typename T>
struct Vec4;

template <>
struct Vec4<float> {
  __device__ __forceinline__ static void load(const float* p, float (&v)[4]) {
    const float4 u = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
  }
  __device__ __forceinline__ static void load_shared(const float* p, float (&v)[4]) {
    const float4 u = *reinterpret_cast<const float4*>(p);
    v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
  }
  __device__ __forceinline__ static void store(float* p, const float (&v)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  }
  __device__ __forceinline__ static void store_global(float* p, const float (&v)[4]) {
    store_global_v4(p, __float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
  }
};

template <typename T2, typename T>
struct Vec4Half {
  __device__ __forceinline__ static void unpack(uint2 u, float (&v)[4]);
  __device__ __forceinline__ static void load(const T* p, float (&v)[4]) {
    unpack(__ldg(reinterpret_cast<const uint2*>(p)), v);
  }
  __device__ __forceinline__ static void load_shared(const T* p, float (&v)[4]) {
    unpack(*reinterpret_cast<const uint2*>(p), v);
  }
  __device__ __forceinline__ static uint2 pack(const float (&v)[4]) {
    T2 lo, hi;
    if constexpr (std::is_same_v<T, __half>) {
      lo = __floats2half2_rn(v[0], v[1]);
      hi = __floats2half2_rn(v[2], v[3]);
    } else {
      lo = __floats2bfloat162_rn(v[0], v[1]);
      hi = __floats2bfloat162_rn(v[2], v[3]);
    }
    uint2 u;
    u.x = *reinterpret_cast<unsigned*>(&lo);
    u.y = *reinterpret_cast<unsigned*>(&hi);
    return u;
  }
  __device__ __forceinline__ static void store(T* p, const float (&v)[4]) { *reinterpret_cast<uint2*>(p) = pack(v); }
  __device__ __forceinline__ static void store_global(T* p, const float (&v)[4]) {
    const uint2 u = pack(v);
    store_global_v2(p, u.x, u.y);
  }
};

template <typename T2, typename T>
__device__ __forceinline__ void Vec4Half<T2, T>::unpack(uint2 u, float (&v)[4]) {
  const T2 lo = *reinterpret_cast<const T2*>(&u.x);
  const T2 hi = *reinterpret_cast<const T2*>(&u.y);
  float2 a, b;
  if constexpr (std::is_same_v<T, __half>) {
    a = __half22float2(lo);
    b = __half22float2(hi);
  } else {
    a = __bfloat1622float2(lo);
    b = __bfloat1622float2(hi);
  }
  v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}

template <>
struct Vec4<__half> : Vec4Half<__half2, __half> {};
template <>
struct Vec4<__nv_bfloat16> : Vec4Half<__nv_bfloat162, __nv_bfloat16> {};

// The 4 channels [c, c + valid) at p as float, zero where masked (valid <= 0: all).
// kVec: one Vec4 load (C % 4 == 0, so a group is all in or all out); else scalars.
template <typename T, bool kVec>
__device__ __forceinline__ void load4_masked(const T* p, int valid, float (&v)[4]) {
  if constexpr (kVec) {
    if (valid > 0) {
      Vec4<T>::load(p, v);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] = 0.0f;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = i < valid ? to_float(p[i]) : 0.0f;
  }
}


// Sixteen bytes of consecutive channels as one vector: 4 float, or 8 half or
// bfloat16. A thread that moves 16 bytes per load keeps twice the bytes in flight
// of one moving Vec4 of a half type: the bf16 GEMV forward at k = 3 on
// 128x128x128x128 ran at 0.93 TB/s with 8-byte loads, against 2.2 TB/s for fp32
// with 16-byte ones. The pointer must be 16-byte aligned.
template <typename T>
struct Vec16;

template <>
struct Vec16<float> : Vec4<float> {
  static constexpr int kWidth = 4;
};

template <typename T>
struct Vec16Half {
  static constexpr int kWidth = 8;
  using Half4 = Vec4<T>;
  __device__ __forceinline__ static void unpack(uint4 u, float (&v)[8]) {
    Half4::unpack(make_uint2(u.x, u.y), *reinterpret_cast<float(*)[4]>(&v[0]));
    Half4::unpack(make_uint2(u.z, u.w), *reinterpret_cast<float(*)[4]>(&v[4]));
  }
  __device__ __forceinline__ static void load(const T* p, float (&v)[8]) {
    unpack(__ldg(reinterpret_cast<const uint4*>(p)), v);
  }
  __device__ __forceinline__ static void load_shared(const T* p, float (&v)[8]) {
    unpack(*reinterpret_cast<const uint4*>(p), v);
  }
  __device__ __forceinline__ static uint4 pack(const float (&v)[8]) {
    const uint2 lo = Half4::pack(*reinterpret_cast<const float(*)[4]>(&v[0]));
    const uint2 hi = Half4::pack(*reinterpret_cast<const float(*)[4]>(&v[4]));
    return make_uint4(lo.x, lo.y, hi.x, hi.y);
  }
  __device__ __forceinline__ static void store(T* p, const float (&v)[8]) { *reinterpret_cast<uint4*>(p) = pack(v); }
  __device__ __forceinline__ static void store_global(T* p, const float (&v)[8]) {
    const uint4 u = pack(v);
    store_global_v4(p, u.x, u.y, u.z, u.w);
  }
};

template <>
struct Vec16<__half> : Vec16Half<__half> {};
template <>
struct Vec16<__nv_bfloat16> : Vec16Half<__nv_bfloat16> {};

// The Vec16<T>::kWidth channels [c, c + valid) at p as float, zero where masked
// (valid <= 0: all). kVec: one 16-byte load (C a multiple of the width, so a group
// is all in or all out); else scalars.
template <typename T, bool kVec>
__device__ __forceinline__ void load16_masked(const T* p, int valid, float (&v)[Vec16<T>::kWidth]) {
  constexpr int kWidth = Vec16<T>::kWidth;
  if constexpr (kVec) {
    if (valid > 0) {
      Vec16<T>::load(p, v);
    } else {
#pragma unroll
      for (int i = 0; i < kWidth; ++i) v[i] = 0.0f;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kWidth; ++i) v[i] = i < valid ? to_float(p[i]) : 0.0f;
  }
}

}  // namespace flashdwc
