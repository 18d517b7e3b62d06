// kWidth channels of a thread as one raw vector of 8 or 16 bytes: loaded as is (so
// that a kernel can keep loaded rows packed, half the registers of fp32 for fp16/bf16),
// unpacked to fp32 where used, and stored from fp32. Used by the stride-2 kernels
// (bwd_data/phase.cuh, fwd/stride2.cuh).
#pragma once

#include "common/cuda_types.cuh"

namespace flashdwc {

template <typename T, int kWidth>
struct RawVec;

// Hides a raw vector's value from the compiler's loop-invariant code motion: a kernel
// that keeps a loop-invariant vector packed (the stride-2 forward's filter) and
// unpacks it at each use would otherwise get the unpacked fp32 copy hoisted out of
// its loop, twice the registers it kept it packed to save.
__device__ __forceinline__ void opaque(uint4& u) { asm volatile("" : "+r"(u.x), "+r"(u.y), "+r"(u.z), "+r"(u.w)); }
__device__ __forceinline__ void opaque(uint2& u) { asm volatile("" : "+r"(u.x), "+r"(u.y)); }
__device__ __forceinline__ void opaque(float4&) {}  // fp32: nothing to unpack
__device__ __forceinline__ void opaque(float2&) {}

template <>
struct RawVec<float, 4> {
  using Raw = float4;
  __device__ __forceinline__ static Raw load(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
  __device__ __forceinline__ static void unpack(Raw u, float (&v)[4]) { v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w; }
  __device__ __forceinline__ static void store(float* p, const float (&v)[4]) { Vec4<float>::store_global(p, v); }
};

template <>
struct RawVec<float, 2> {
  using Raw = float2;
  __device__ __forceinline__ static Raw load(const float* p) { return __ldg(reinterpret_cast<const float2*>(p)); }
  __device__ __forceinline__ static void unpack(Raw u, float (&v)[2]) { v[0] = u.x, v[1] = u.y; }
  __device__ __forceinline__ static void store(float* p, const float (&v)[2]) {
    store_global_v2(p, __float_as_uint(v[0]), __float_as_uint(v[1]));
  }
};

template <typename T>
struct RawVec<T, 8> {  // fp16/bf16, 16 bytes
  using Raw = uint4;
  __device__ __forceinline__ static Raw load(const T* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
  __device__ __forceinline__ static void unpack(Raw u, float (&v)[8]) { Vec16<T>::unpack(u, v); }
  __device__ __forceinline__ static void store(T* p, const float (&v)[8]) { Vec16<T>::store_global(p, v); }
};

template <typename T>
struct RawVec<T, 4> {  // fp16/bf16, 8 bytes
  using Raw = uint2;
  __device__ __forceinline__ static Raw load(const T* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }
  __device__ __forceinline__ static void unpack(Raw u, float (&v)[4]) { Vec4<T>::unpack(u, v); }
  __device__ __forceinline__ static void store(T* p, const float (&v)[4]) { Vec4<T>::store_global(p, v); }
};

}  // namespace flashdwc
