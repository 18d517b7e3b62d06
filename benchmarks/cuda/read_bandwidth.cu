// How fast the GPU reads the bytes of a filter gradient at small k: two arrays (x and
// dy) read once each and reduced, against the device-to-device copy the perf notes
// quote (4.18 TB/s on the H200). Why: fp32 k = 3 reads 2.15 GB on 128x128x128x128,
// XLA's filter gradient takes 0.524 ms there (4.10 TB/s, 98% of the copy rate) and
// ours 0.613 ms; whether a kernel that only reads can go faster than a copy decides
// how much room there is (docs/design-notes.md).
// Build (from the repository root) and run:
//   nvcc -std=c++17 -arch=sm_90 -O3 -Icsrc benchmarks/cuda/read_bandwidth.cu -o read_bandwidth
//   ./read_bandwidth [MiB per array, default 1024]
// Each line: the variant, its median time over 20 launches after 3 warm-up (cudaEvent),
// and bytes read (plus written, for the copy) over that time.
#include <cstdio>
#include <cstdlib>

#include "common/cp_async.cuh"
#include "../../tests/cuda/harness.cuh"

namespace {

// Plain 16-byte loads, kUnroll in flight a thread, over a grid-stride loop. kNoAllocate
// reads through the non-coherent path without allocating in L1 (ld.global.nc.L1::no_allocate).
template <int kUnroll, bool kNoAllocate>
__global__ void __launch_bounds__(256) read_loads(const float4* __restrict__ a, const float4* __restrict__ b,
                                                  long long n4, float* __restrict__ out) {
  float acc = 0.0f;
  const long long stride = (long long)gridDim.x * blockDim.x * kUnroll;
  for (long long base = (long long)blockIdx.x * blockDim.x * kUnroll + threadIdx.x; base < n4; base += stride) {
    float4 va[kUnroll], vb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long long i = base + (long long)u * blockDim.x;
      if (i < n4) {
        if constexpr (kNoAllocate) {
          asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
                       : "=f"(va[u].x), "=f"(va[u].y), "=f"(va[u].z), "=f"(va[u].w) : "l"(a + i));
          asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
                       : "=f"(vb[u].x), "=f"(vb[u].y), "=f"(vb[u].z), "=f"(vb[u].w) : "l"(b + i));
        } else {
          va[u] = a[i];
          vb[u] = b[i];
        }
      } else {
        va[u] = vb[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      acc += va[u].x * vb[u].x + va[u].y * vb[u].y + va[u].z * vb[u].z + va[u].w * vb[u].w;
  }
  out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// The filter-gradient kernels' way: cp.async.cg of 16-byte chunks into a shared-memory
// ring of kDepth tiles (a tile: 2 chunks a thread of each array, 4 KB each), wait for
// the oldest, barrier, issue the next, read the oldest back. Each block streams its own
// contiguous run of tiles, as a row-stream block streams its rows.
template <int kDepth>
__global__ void __launch_bounds__(128) read_cp_async(const float4* __restrict__ a, const float4* __restrict__ b,
                                                     long long tiles, float* __restrict__ out) {
  constexpr int kChunks = 2;             // a thread's chunks a tile and array
  constexpr int kTile = 128 * kChunks;   // chunks a tile and array
  __shared__ float4 ring[kDepth][2][kTile];
  const long long per_block = (tiles + gridDim.x - 1) / gridDim.x;
  const long long t_begin = (long long)blockIdx.x * per_block;
  const long long t_end = t_begin + per_block < tiles ? t_begin + per_block : tiles;
  auto issue = [&](long long t) {
    if (t < t_end) {
      const int slot = int(t % kDepth);
#pragma unroll
      for (int u = 0; u < kChunks; ++u) {
        const int q = threadIdx.x + u * 128;
        flashdwc::cp_async<16>(&ring[slot][0][q], a + t * kTile + q, true);
        flashdwc::cp_async<16>(&ring[slot][1][q], b + t * kTile + q, true);
      }
    }
    flashdwc::cp_async_commit();
  };
  for (int d = 0; d < kDepth - 1; ++d) issue(t_begin + d);
  float acc = 0.0f;
  for (long long t = t_begin; t < t_end; ++t) {
    flashdwc::cp_async_wait<kDepth - 2>();
    __syncthreads();
    issue(t + kDepth - 1);
    const int slot = int(t % kDepth);
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
      const float4 va = ring[slot][0][threadIdx.x + u * 128], vb = ring[slot][1][threadIdx.x + u * 128];
      acc += va.x * vb.x + va.y * vb.y + va.z * vb.z + va.w * vb.w;
    }
  }
  out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

__global__ void __launch_bounds__(256) copy(const float4* __restrict__ a, float4* __restrict__ b, long long n4) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x)
    b[i] = a[i];
}

}  // namespace

int main(int argc, char** argv) {
  const long long mib = argc > 1 ? std::atoll(argv[1]) : 1024;
  const long long n4 = mib * (1 << 20) / 16;  // float4 a array
  const double bytes = 2.0 * n4 * 16;         // both arrays
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  DeviceBuffer<float4> a_buffer(n4), b_buffer(n4);
  DeviceBuffer<float> out_buffer(int64_t(sms) * 64 * 256);
  float4* a = a_buffer.get();
  float4* b = b_buffer.get();
  float* out = out_buffer.get();
  fill_uniform<<<1024, 256>>>(reinterpret_cast<float*>(a), n4 * 4, 1u);
  fill_uniform<<<1024, 256>>>(reinterpret_cast<float*>(b), n4 * 4, 2u);
  auto report = [&](const char* what, int blocks, float ms, double moved) {
    std::printf("%-36s blocks %6d  %.4f ms  %.3f TB/s  %s\n", what, blocks, ms, moved / ms / 1e9,
                cudaGetErrorString(cudaGetLastError()));
  };
  for (int waves : {4, 8, 16}) {
    const int blocks = sms * waves;
    report("copy (read + write of one array)", blocks,
           median_launch_ms([&] { copy<<<blocks, 256>>>(a, b, n4); }, 3, 20), bytes);
  }
  for (int per_sm : {4, 8, 16, 32}) {
    const int blocks = sms * per_sm;
    report("loads, 4 in flight", blocks,
           median_launch_ms([&] { read_loads<4, false><<<blocks, 256>>>(a, b, n4, out); }, 3, 20), bytes);
    report("loads, 8 in flight", blocks,
           median_launch_ms([&] { read_loads<8, false><<<blocks, 256>>>(a, b, n4, out); }, 3, 20), bytes);
    report("loads .nc no_allocate, 4 in flight", blocks,
           median_launch_ms([&] { read_loads<4, true><<<blocks, 256>>>(a, b, n4, out); }, 3, 20), bytes);
  }
  const long long tiles = n4 / (128 * 2);
  for (int per_sm : {3, 4, 6, 8}) {
    const int blocks = sms * per_sm;
    report("cp.async ring, depth 3 (24 KB)", blocks,
           median_launch_ms([&] { read_cp_async<3><<<blocks, 128>>>(a, b, tiles, out); }, 3, 20), bytes);
    report("cp.async ring, depth 6 (48 KB)", blocks,
           median_launch_ms([&] { read_cp_async<6><<<blocks, 128>>>(a, b, tiles, out); }, 3, 20), bytes);
  }
  return 0;
}
