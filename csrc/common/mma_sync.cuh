// Shared by the tensor-core kernels (forward and filter gradient): the m16n8k16
// MMA on raw fp16/bf16 bits, the ldmatrix that feeds the forward's A, an 8-channel
// load and store as four such words, and the pairing of two pixels' channel into
// one word that their staging stores.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda_types.cuh"

namespace flashdwc {

// d += A * B for one m16n8k16 tile; A and B hold raw fp16 or bf16 bits.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "fp16 or bf16 only");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats as one 32-bit word of T, the first in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// The shared-memory address of a pointer into shared memory, as ldmatrix takes it.
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 matrices of 16-bit elements: lane l gives the 16-byte aligned shared
// address of row l % 8 of matrix l / 8; register i of lane (g = l / 4, tig = l % 4)
// gets row g, elements 2tig and 2tig + 1 of matrix i (PTX ldmatrix .m8n8 .x4 .b16).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&a)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(address));
}

// ldmatrix_x4 with .trans: register i of lane (g, tig) gets elements g of rows 2tig
// and 2tig + 1 of matrix i (low half, high half), i.e. column g of the rows.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&a)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(address));
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The store of ldmatrix_x4 (sm_90 and later): register i of lane (g, tig) is row g,
// elements 2tig and 2tig + 1 of matrix i; lane l gives the 16-byte aligned shared
// address of row l % 8 of matrix l / 8 (PTX stmatrix .m8n8 .x4 .b16).
__device__ __forceinline__ void stmatrix_x4(uint32_t address, const uint32_t (&a)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n"
               :
               : "r"(address), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3])
               : "memory");
}
#endif

// 8 channels [c, c + 8) of one element as 4 words of raw bits, zero where
// !valid or (scalar path) where the channel is >= C. With kVec, C % 8 == 0, so
// the group is all in or all out and the address is 16-byte aligned.
template <bool kVec>
__device__ __forceinline__ void load8(const uint16_t* __restrict__ src, bool valid, int64_t channels_left,
                                      uint32_t (&v)[4]) {
  if constexpr (kVec) {
    uint4 u = make_uint4(0u, 0u, 0u, 0u);
    if (valid) u = __ldg(reinterpret_cast<const uint4*>(src));
    v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t lo = valid && 2 * k < channels_left ? uint32_t(__ldg(src + 2 * k)) : 0u;
      const uint32_t hi = valid && 2 * k + 1 < channels_left ? uint32_t(__ldg(src + 2 * k + 1)) : 0u;
      v[k] = lo | (hi << 16);
    }
  }
}

// 8 channels [c, c + 8) of one element, as load8's kVec path reads them: one
// 16-byte store to a 16-byte aligned global address (why not an assignment:
// cuda_types.cuh, store_global_v4).
__device__ __forceinline__ void store8(uint16_t* dst, uint4 v) { store_global_v4(dst, v.x, v.y, v.z, v.w); }

// Channel k of two 8-channel pixels (each as load8 returns it) as one word, a's in
// the low half: channel k sits in word k / 2 of a pixel, in its low half for even k.
__device__ __forceinline__ uint32_t pack_channel(const uint32_t (&a)[4], const uint32_t (&b)[4], int k) {
  return __byte_perm(a[k / 2], b[k / 2], (k & 1) ? 0x7632 : 0x5410);
}

}  // namespace flashdwc
