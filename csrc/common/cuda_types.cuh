// Device-side conversions between the storage types and the fp32 accumulator.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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
  __device__ __forceinline__ static void store(T* p, const float (&v)[4]) {
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
    *reinterpret_cast<uint2*>(p) = u;
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
  __device__ __forceinline__ static void store(T* p, const float (&v)[8]) {
    uint2 lo, hi;
    Half4::store(reinterpret_cast<T*>(&lo), *reinterpret_cast<const float(*)[4]>(&v[0]));
    Half4::store(reinterpret_cast<T*>(&hi), *reinterpret_cast<const float(*)[4]>(&v[4]));
    *reinterpret_cast<uint4*>(p) = make_uint4(lo.x, lo.y, hi.x, hi.y);
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
