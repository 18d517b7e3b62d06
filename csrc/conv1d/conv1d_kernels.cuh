// CUDA kernels of the depthwise 1-D convolution (conv1d_params.h gives the
// problem). Channel-last rows: each thread owns V consecutive channels (one vector
// load or store of V * sizeof(T) bytes per position; conv1d_cuda.cu picks V) and a
// run of positions, so that a warp reads 32 * V contiguous channels of one position
// at a time.
//
// - conv1d_fwd_plain<KT>: K = KT in {2, 3, 4}, dilation 1, no segments and no state
//   (Mamba's short causal convolution): a thread loads its whole run of inputs at once.
// - *_window<KT>: K = KT in {2, 3, 4} and dilation 1, with segments or a state.
//   The K - 1 inputs that consecutive outputs share stay in registers: each input
//   is loaded once per run, plus a K - 1 halo at the run's start. U positions are
//   loaded before any is used, so U vector loads are in flight per thread.
// - *_generic: any K and dilation; taps reread through the caches.
//
// The backward kernels recompute z = conv + bias from x, form dz = dy * act'(z) in
// registers and, from it, the input gradient (and that of the initial state) and
// each run's partial filter and bias gradients in float32, written to its own slot
// (summed afterwards in a fixed order: bit-reproducible, no atomics).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "conv1d/conv1d_params.h"

namespace flashdwc {
namespace conv1d_cuda {

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// The activation and its derivative for the kernels' inner loops: none and SiLU
// (Mamba's) inline, the others through one out-of-line call, which keeps erf and
// tanh out of the unrolled loops and their registers.
__device__ __noinline__ float activation_out_of_line(Activation a, float z) { return apply_activation(a, z); }
__device__ __noinline__ float activation_grad_out_of_line(Activation a, float z) { return activation_grad(a, z); }

// 1 / (1 + e^-z) in float32. For 16-bit storage types (T), whose outputs keep 8 or 11
// bits of it, the SFU's exp2 and reciprocal (__expf, __fdividef: a few float32 ulps,
// far below a bf16/fp16 ulp) replace expf's range reduction and the IEEE division,
// about 20 instructions an element in kernels that are issue-bound (ncu: the former 1-D
// forward at 61% of the SM's issue against 38% of DRAM bandwidth). Measured with
// benchmarks/cuda/time_conv1d.cu (H200, bf16, K = 4, SiLU, 16-32 x 2048 x 1536): the
// plain forward 1.33-1.34x faster (32 x 2048 x 1536: 0.210 -> 0.157 ms, 2.56 TB/s),
// the backward 1.16x. float32 outputs keep the exact forms.
template <typename T>
__device__ __forceinline__ float sigmoid(float z) {
  if constexpr (sizeof(T) == 2) {
    return __fdividef(1.0f, 1.0f + __expf(-z));
  } else {
    return 1.0f / (1.0f + expf(-z));
  }
}

template <typename T>
__device__ __forceinline__ float act(Activation a, float z) {
  if (a == Activation::kNone) return z;
  if (a == Activation::kSilu) {
    if constexpr (sizeof(T) == 2) return z * sigmoid<T>(z);
    return z / (1.0f + expf(-z));
  }
  return activation_out_of_line(a, z);
}

template <typename T>
__device__ __forceinline__ float act_grad(Activation a, float z) {
  if (a == Activation::kSilu) {
    const float s = sigmoid<T>(z);
    return s * (1.0f + z * (1.0f - s));
  }
  return activation_grad_out_of_line(a, z);
}

// V channels of one position as stored: one 16-byte access when V > 1.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T e[V];
};

template <typename T, int V>
__device__ __forceinline__ Pack<T, V> zero_pack() {
  Pack<T, V> p;
#pragma unroll
  for (int i = 0; i < V; ++i) p.e[i] = from_f<T>(0.0f);
  return p;
}

// The block's (row n, run j, channel group g) from a 1-D grid (no 65535 limits on N
// or runs): channel blocks vary fastest, so that resident blocks cover whole positions.
struct Tile {
  int64_t n, run, c0;
  bool active;
};

template <int V>
__device__ __forceinline__ Tile tile(const Conv1dParams& p, int64_t runs) {
  const int64_t channel_blocks = (p.channels + int64_t(blockDim.x) * V - 1) / (int64_t(blockDim.x) * V);
  const int64_t b = blockIdx.x;
  Tile t;
  t.c0 = ((b % channel_blocks) * blockDim.x + threadIdx.x) * V;
  t.run = (b / channel_blocks) % runs;
  t.n = b / channel_blocks / runs;
  t.active = t.c0 < p.channels;
  return t;
}

// Reads of one row: inputs at any position (the state before 0 where given, zeros
// elsewhere outside [0, L)) and segment ids (clamped to [0, L): the state counts as
// position 0's segment; positions past L hold zeros, so their id does not matter).
template <typename T, int V>
struct RowIn {
  const T* __restrict__ x;
  const T* __restrict__ state;
  const int32_t* __restrict__ seg;
  int64_t length, channels, state_len;

  __device__ __forceinline__ Pack<T, V> input(int64_t pos, int64_t c0) const {
    if (pos >= 0 && pos < length) return *reinterpret_cast<const Pack<T, V>*>(x + pos * channels + c0);
    if (pos < 0 && pos >= -state_len) {
      return *reinterpret_cast<const Pack<T, V>*>(state + (state_len + pos) * channels + c0);
    }
    return zero_pack<T, V>();
  }
  __device__ __forceinline__ int32_t seg_at(int64_t pos) const {
    if (seg == nullptr) return 0;
    return seg[pos < 0 ? 0 : (pos >= length ? length - 1 : pos)];
  }
};

// A position's segment id where the kernel was built for segments, else 0: without
// segments the window kernels keep no ids in registers (Seg = false).
template <bool Seg, typename In>
__device__ __forceinline__ int32_t seg_if(const In& in, int64_t pos) {
  return Seg ? in.seg_at(pos) : 0;
}

template <typename T, int V>
__device__ __forceinline__ RowIn<T, V> row_in(const Conv1dParams& p, int64_t n, const T* x, const T* state,
                                               const int32_t* seg) {
  return RowIn<T, V>{x + n * p.length * p.channels, p.state_len ? state + n * p.state_len * p.channels : nullptr,
                     p.has_seg ? seg + n * p.length : nullptr, p.length, p.channels, p.state_len};
}

template <typename T, int V>
__device__ __forceinline__ void load_weights(const Conv1dParams& p, const T* w, const T* bias, int64_t c0,
                                             int k, float (&wk)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) wk[i] = to_f(w[k * p.channels + c0 + i]);
}

template <typename T, int V>
__device__ __forceinline__ void load_bias(const Conv1dParams& p, const T* bias, int64_t c0, float (&b)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) b[i] = p.has_bias ? to_f(bias[c0 + i]) : 0.0f;
}

template <typename T, int V>
__device__ __forceinline__ void store_pack(T* dst, const float (&v)[V]) {
  Pack<T, V> out;
#pragma unroll
  for (int i = 0; i < V; ++i) out.e[i] = from_f<T>(v[i]);
  *reinterpret_cast<Pack<T, V>*>(dst) = out;
}

// ---------------------------------------------------------------------------
// Forward, K = KT, dilation 1, with segments or an initial state. At 6 blocks of 128
// threads an SM (80 registers; 4 channels, U = 4) ptxas (sm_90) spills only in the
// K = 4 instances without segments (a state alone): 8 bytes bf16, 40 fp32.
template <typename T, int V, int KT, int U, int MinBlocks, bool Seg>
__global__ void __launch_bounds__(128, MinBlocks) conv1d_fwd_window(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, const int32_t* __restrict__ seg,
    const T* __restrict__ state, T* __restrict__ y, Conv1dParams p, int64_t run_len) {
  const Tile tl = tile<V>(p, (p.length + run_len - 1) / run_len);
  if (!tl.active) return;
  const RowIn<T, V> in = row_in<T, V>(p, tl.n, x, state, seg);
  T* yrow = y + tl.n * p.length * p.channels + tl.c0;
  float wr[KT][V], br[V];
#pragma unroll
  for (int k = 0; k < KT; ++k) load_weights<T, V>(p, w, bias, tl.c0, k, wr[k]);
  load_bias<T, V>(p, bias, tl.c0, br);
  const int64_t t0 = tl.run * run_len;
  const int64_t t1 = t0 + run_len < p.length ? t0 + run_len : p.length;
  const int64_t lo = p.pad_lo;
  // win[j] holds input t - lo + j for the first output t of the current group of U.
  Pack<T, V> win[KT - 1 + U];
  int32_t sw[KT - 1 + U];
#pragma unroll
  for (int k = 0; k < KT - 1; ++k) {
    win[k] = in.input(t0 - lo + k, tl.c0);
    sw[k] = seg_if<Seg>(in, t0 - lo + k);
  }
  for (int64_t t = t0; t < t1; t += U) {
    int32_t sout[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t pos = t - lo + KT - 1 + u;
      win[KT - 1 + u] = t + u < t1 ? in.input(pos, tl.c0) : zero_pack<T, V>();
      sw[KT - 1 + u] = seg_if<Seg>(in, pos);
      sout[u] = seg_if<Seg>(in, t + u);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (t + u < t1) {
        float acc[V];
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] = br[i];
#pragma unroll
        for (int k = 0; k < KT; ++k) {
          if (sw[u + k] == sout[u]) {
#pragma unroll
            for (int i = 0; i < V; ++i) acc[i] = fmaf(wr[k][i], to_f(win[u + k].e[i]), acc[i]);
          }
        }
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] = act<T>(p.activation, acc[i]);
        store_pack<T, V>(yrow + (t + u) * p.channels, acc);
      }
    }
#pragma unroll
    for (int k = 0; k < KT - 1; ++k) {
      win[k] = win[U + k];
      sw[k] = sw[U + k];
    }
  }
}

// ---------------------------------------------------------------------------
// Forward, K = KT, dilation 1, no segments and no initial state (the plain causal or
// centred convolution): every input of a run (R outputs, R + KT - 1 inputs) is
// loaded before the first output is formed, so R + KT - 1 vector loads are in flight
// per thread; the filter and bias are widened to float once; the activation is a
// template parameter (Act), so none and SiLU need no call. `I` is the index type of
// offsets inside one row (x_row, y_row point at its first position of channel c0):
// 32-bit on the 3-D grid, 64-bit on the 1-D one. Seg: with the row's segment ids
// (seg_row, positions clamped to [0, L) as RowIn::seg_at; inputs outside [0, L) are
// zeros, so their ids do not matter), a tap counts only where its input's id is its
// output's; the ids of a run's inputs and outputs are loaded with its inputs (one
// 4-byte word a position, the same for every lane of a warp).
template <typename T, int V, int KT, int R, Activation Act, bool Seg, typename I>
__device__ __forceinline__ void fwd_plain_run(const T* __restrict__ x_row, const T* __restrict__ w,
                                              const T* __restrict__ bias, const int32_t* __restrict__ seg_row,
                                              T* __restrict__ y_row, I t0, I length, I channels, I pad_lo, I c0,
                                              bool has_bias) {
  Pack<T, V> win[R + KT - 1];
  int32_t in_id[Seg ? R + KT - 1 : 1], out_id[Seg ? R : 1];
#pragma unroll
  for (int j = 0; j < R + KT - 1; ++j) {
    const I pos = t0 - pad_lo + j;
    win[j] = pos >= 0 && pos < length ? *reinterpret_cast<const Pack<T, V>*>(x_row + pos * channels)
                                      : zero_pack<T, V>();
    if constexpr (Seg) in_id[j] = seg_row[pos < 0 ? 0 : (pos >= length ? length - 1 : pos)];
  }
  if constexpr (Seg) {
#pragma unroll
    for (int r = 0; r < R; ++r) out_id[r] = seg_row[t0 + r < length ? t0 + r : length - 1];
  }
  float wk[KT][V], bk[V];
#pragma unroll
  for (int k = 0; k < KT; ++k) {
    const Pack<T, V> pk = *reinterpret_cast<const Pack<T, V>*>(w + k * channels + c0);
#pragma unroll
    for (int i = 0; i < V; ++i) wk[k][i] = to_f(pk.e[i]);
  }
  const Pack<T, V> pb = has_bias ? *reinterpret_cast<const Pack<T, V>*>(bias + c0) : zero_pack<T, V>();
#pragma unroll
  for (int i = 0; i < V; ++i) bk[i] = to_f(pb.e[i]);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (t0 + r < length) {
      float acc[V];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        acc[i] = bk[i];
#pragma unroll
        for (int k = 0; k < KT; ++k) {
          if (!Seg || in_id[r + k] == out_id[r]) acc[i] = fmaf(wk[k][i], to_f(win[r + k].e[i]), acc[i]);
        }
        acc[i] = Act == Activation::kNone ? acc[i] : act<T>(Act, acc[i]);
      }
      store_pack<T, V>(y_row + (t0 + r) * channels, acc);
    }
  }
}

// The plain forward on a 3-D grid (channel block x, run y, row z) with 32-bit offsets
// inside a row: no 64-bit division of a flat block index. The kernel is issue-bound
// (ncu, H100: 61% of the SM's issue against 38% of DRAM), and the 1-D grid's three
// 64-bit divisions are software sequences of tens of instructions each against about
// 750 others for a thread's 32 outputs. The launcher takes it where runs <= 65535,
// rows <= 65535 and L x C < 2^31 (fits_grid3, conv1d/conv1d_cuda.cu). Seg: with
// segment ids (no state), in place of the window kernel's flat grid.
template <typename T, int V, int KT, int R, int MinBlocks, Activation Act, bool Seg = false>
__global__ void __launch_bounds__(128, MinBlocks)
    conv1d_fwd_plain_grid3(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                           T* __restrict__ y, Conv1dParams p, const int32_t* __restrict__ seg = nullptr) {
  const int channels = int(p.channels);
  const int c0 = int(blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (c0 >= channels) return;
  const int64_t row = int64_t(blockIdx.z) * p.length * p.channels + c0;
  const int32_t* seg_row = Seg ? seg + int64_t(blockIdx.z) * p.length : nullptr;
  fwd_plain_run<T, V, KT, R, Act, Seg, int>(x + row, w, bias, seg_row, y + row, int(blockIdx.y) * R, int(p.length),
                                            channels, int(p.pad_lo), c0, p.has_bias);
}

// The same on a 1-D grid (tile()), for problems past the 3-D grid's limits.
template <typename T, int V, int KT, int R, int MinBlocks, Activation Act>
__global__ void __launch_bounds__(128, MinBlocks) conv1d_fwd_plain(const T* __restrict__ x, const T* __restrict__ w,
                                                                  const T* __restrict__ bias, T* __restrict__ y,
                                                                  Conv1dParams p) {
  const Tile tl = tile<V>(p, (p.length + R - 1) / R);
  if (!tl.active) return;
  const int64_t row = tl.n * p.length * p.channels + tl.c0;
  fwd_plain_run<T, V, KT, R, Act, false, int64_t>(x + row, w, bias, nullptr, y + row, tl.run * R, p.length,
                                                  p.channels, p.pad_lo, tl.c0, p.has_bias);
}

// ---------------------------------------------------------------------------
// Forward, any K and dilation.
template <typename T, int V>
__device__ __forceinline__ void preactivation(const Conv1dParams& p, const RowIn<T, V>& in, const T* w,
                                              const float (&br)[V], int64_t t, int64_t c0, float (&acc)[V]) {
  const int32_t st = in.seg_at(t);
#pragma unroll
  for (int i = 0; i < V; ++i) acc[i] = br[i];
  for (int64_t k = 0; k < p.kernel_size; ++k) {
    const int64_t pos = t - p.pad_lo + k * p.dilation;
    if (in.seg_at(pos) != st) continue;
    const Pack<T, V> v = in.input(pos, c0);
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = fmaf(to_f(w[k * p.channels + c0 + i]), to_f(v.e[i]), acc[i]);
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(128) conv1d_fwd_generic(const T* __restrict__ x, const T* __restrict__ w,
                                                          const T* __restrict__ bias, const int32_t* __restrict__ seg,
                                                          const T* __restrict__ state, T* __restrict__ y,
                                                          Conv1dParams p, int64_t run_len) {
  const Tile tl = tile<V>(p, (p.length + run_len - 1) / run_len);
  if (!tl.active) return;
  const RowIn<T, V> in = row_in<T, V>(p, tl.n, x, state, seg);
  float br[V];
  load_bias<T, V>(p, bias, tl.c0, br);
  const int64_t t0 = tl.run * run_len;
  const int64_t t1 = t0 + run_len < p.length ? t0 + run_len : p.length;
  for (int64_t t = t0; t < t1; ++t) {
    float acc[V];
    preactivation<T, V>(p, in, w, br, t, tl.c0, acc);
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = act<T>(p.activation, acc[i]);
    store_pack<T, V>(y + (tl.n * p.length + t) * p.channels + tl.c0, acc);
  }
}

// ---------------------------------------------------------------------------
// Backward, K = KT, dilation 1: each chunk of the filter-gradient slots split over W
// warps. Block (32, W): threadIdx.x picks the channels, threadIdx.y the sub-run, of
// one chunk [c_lo, c_hi) = [j * chunk, min((j + 1) * chunk, L)). Sub-run y owns
// inputs and outputs [i0, i1) = the y-th ceil(chunk / W) positions of the chunk
// (empty past c_hi), and the state's inputs when j = y = 0. Outputs
// t = i0 + lo - (KT - 1) .. i1 - 1 + lo pass by in order, U of x and dy loaded ahead;
// after output t, input t - lo has all its contributions (dxacc[0]) and is stored.
// The W sub-runs' filter and bias partials are summed in shared memory in the order
// y = 0 .. W - 1 and written once to the chunk's slot. Seg = false keeps no segment
// ids in registers. Grid3 (no state; with or without segments): a 3-D grid (channel
// block x, chunk y, row z) and 32-bit positions and offsets inside a row, as the plain
// forward's, instead of the flat grid's 64-bit divisions and the state's branch on
// every load; the launcher takes it where chunks and rows fit gridDim.y/z and
// L x C < 2^31. With segments it fits 4 blocks an SM without spills (bf16 and fp32
// K = 4: 128 registers), where the flat grid spills at 4 and runs at 3 (147).
// FilterGrad = false (the input gradient alone, p.filter_grad false) drops the filter
// and bias sums from the loop; FilterGrad = true still writes no partials when
// p.filter_grad is false (their buffers are then empty).
template <typename T, int V, int KT, int U, int W, int MinBlocks, bool Seg, bool Grid3 = false,
          bool FilterGrad = true>
__global__ void __launch_bounds__(32 * W, MinBlocks) conv1d_bwd_window_split(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, const int32_t* __restrict__ seg,
    const T* __restrict__ state, const T* __restrict__ dy, T* __restrict__ dx, T* __restrict__ dstate,
    float* __restrict__ dw_part, float* __restrict__ db_part, Conv1dParams p) {
  using I = std::conditional_t<Grid3, int, int64_t>;
  const int64_t chunks = p.chunks_per_row();
  I c0;
  int64_t part, n;  // part = n * chunks + chunk: the slot
  I chunk;
  if constexpr (Grid3) {
    c0 = I(blockIdx.x * 32 + threadIdx.x) * V;
    chunk = I(blockIdx.y);
    n = blockIdx.z;
    part = n * chunks + chunk;
  } else {
    const int64_t channel_blocks = (p.channels + 32 * V - 1) / (32 * V);
    const int64_t b = blockIdx.x;
    c0 = ((b % channel_blocks) * 32 + threadIdx.x) * V;
    part = b / channel_blocks;
    chunk = part % chunks;
    n = part / chunks;
  }
  const I length = I(p.length), channels = I(p.channels), chunk_len = I(p.chunk);
  const I c_lo = chunk * chunk_len;
  const I c_hi = c_lo + chunk_len < length ? c_lo + chunk_len : length;
  const I sub = (chunk_len + W - 1) / W;
  const I i0 = c_lo + I(threadIdx.y) * sub < c_hi ? c_lo + I(threadIdx.y) * sub : c_hi;
  const I i1 = i0 + sub < c_hi ? i0 + sub : c_hi;
  float dw[KT][V], db[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    db[i] = 0.0f;
#pragma unroll
    for (int k = 0; k < KT; ++k) dw[k][i] = 0.0f;
  }
  if (c0 < channels) {
    const RowIn<T, V> in = row_in<T, V>(p, n, x, state, seg);
    const T* xrow = x + n * p.length * p.channels + c0;
    const T* dyrow = dy + n * p.length * p.channels + c0;
    T* dxrow = dx + n * p.length * p.channels + c0;
    T* dstaterow = p.state_len ? dstate + (n + 1) * p.state_len * p.channels + c0 : nullptr;
    // An input at any position: zeros outside [0, L) on the 3-D grid (no state there).
    auto input = [&](I pos) -> Pack<T, V> {
      if constexpr (Grid3) {
        return pos >= 0 && pos < length ? *reinterpret_cast<const Pack<T, V>*>(xrow + pos * channels)
                                        : zero_pack<T, V>();
      } else {
        return in.input(pos, c0);
      }
    };
    float wr[KT][V], br[V];
#pragma unroll
    for (int k = 0; k < KT; ++k) load_weights<T, V>(p, w, bias, c0, k, wr[k]);
    load_bias<T, V>(p, bias, c0, br);
    const I lo = I(p.pad_lo);
    const I first = chunk == 0 && threadIdx.y == 0 ? -I(p.state_len) : i0;
    const I t_begin = i0 + lo - (KT - 1), t_end = i1 + lo;  // outputs [t_begin, t_end)
    float dxacc[KT][V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
#pragma unroll
      for (int k = 0; k < KT; ++k) dxacc[k][i] = 0.0f;
    }
    Pack<T, V> win[KT - 1 + U];
    int32_t sw[KT - 1 + U];
#pragma unroll
    for (int k = 0; k < KT - 1; ++k) {
      win[k] = input(t_begin - lo + k);
      sw[k] = seg_if<Seg>(in, t_begin - lo + k);
    }
    for (I t = t_begin; t < t_end; t += U) {
      Pack<T, V> g[U];
      int32_t sout[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const I pos = t - lo + KT - 1 + u;
        win[KT - 1 + u] = input(pos);
        sw[KT - 1 + u] = seg_if<Seg>(in, pos);
        const I tt = t + u;
        const bool exists = tt >= 0 && tt < length && tt < t_end;
        g[u] = exists ? *reinterpret_cast<const Pack<T, V>*>(dyrow + tt * channels) : zero_pack<T, V>();
        sout[u] = seg_if<Seg>(in, tt);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const I tt = t + u;
        if (tt < t_end) {
          bool mask[KT];
#pragma unroll
          for (int k = 0; k < KT; ++k) mask[k] = sw[u + k] == sout[u];
          float dz[V];
#pragma unroll
          for (int i = 0; i < V; ++i) dz[i] = to_f(g[u].e[i]);
          if (p.activation != Activation::kNone) {
#pragma unroll
            for (int i = 0; i < V; ++i) {
              float z = br[i];
#pragma unroll
              for (int k = 0; k < KT; ++k) {
                if (mask[k]) z = fmaf(wr[k][i], to_f(win[u + k].e[i]), z);
              }
              dz[i] *= act_grad<T>(p.activation, z);
            }
          }
          if (FilterGrad && tt >= i0 && tt < i1) {
#pragma unroll
            for (int i = 0; i < V; ++i) {
              db[i] += dz[i];
#pragma unroll
              for (int k = 0; k < KT; ++k) {
                if (mask[k]) dw[k][i] = fmaf(dz[i], to_f(win[u + k].e[i]), dw[k][i]);
              }
            }
          }
#pragma unroll
          for (int k = 0; k < KT; ++k) {
            if (mask[k]) {
#pragma unroll
              for (int i = 0; i < V; ++i) dxacc[k][i] = fmaf(wr[k][i], dz[i], dxacc[k][i]);
            }
          }
          const I e = tt - lo;  // input complete after this output
          if (e >= first && e < i1) {
            if (e >= 0) {
              store_pack<T, V>(dxrow + e * channels, dxacc[0]);
            } else {
              store_pack<T, V>(dstaterow + e * channels, dxacc[0]);
            }
          }
#pragma unroll
          for (int k = 0; k < KT - 1; ++k) {
#pragma unroll
            for (int i = 0; i < V; ++i) dxacc[k][i] = dxacc[k + 1][i];
          }
#pragma unroll
          for (int i = 0; i < V; ++i) dxacc[KT - 1][i] = 0.0f;
        }
      }
#pragma unroll
      for (int k = 0; k < KT - 1; ++k) {
        win[k] = win[U + k];
        sw[k] = sw[U + k];
      }
    }
  }
  // The same for the whole block, so no thread skips a barrier that others reach.
  if constexpr (FilterGrad) {
    if (!p.filter_grad) return;
    // [y][row][i][lane], row KT the bias: lanes consecutive, so no bank conflicts.
    __shared__ float red[W][KT + 1][V][32];
#pragma unroll
    for (int i = 0; i < V; ++i) {
#pragma unroll
      for (int k = 0; k < KT; ++k) red[threadIdx.y][k][i][threadIdx.x] = dw[k][i];
      red[threadIdx.y][KT][i][threadIdx.x] = db[i];
    }
    __syncthreads();
    if (threadIdx.y != 0 || c0 >= channels) return;
#pragma unroll
    for (int i = 0; i < V; ++i) {
#pragma unroll
      for (int k = 0; k <= KT; ++k) {
        float sum = red[0][k][i][threadIdx.x];
#pragma unroll
        for (int y = 1; y < W; ++y) sum += red[y][k][i][threadIdx.x];
        if (k < KT) {
          dw_part[(part * KT + k) * p.channels + c0 + i] = sum;
        } else {
          db_part[part * p.channels + c0 + i] = sum;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Backward, any K and dilation: dz is recomputed wherever it is needed (K taps
// each with an activation), so this costs O(K^2) a position with one; the short
// filters take the window kernel.
template <typename T, int V>
__device__ __forceinline__ void dz_at(const Conv1dParams& p, const RowIn<T, V>& in, const T* w,
                                      const float (&br)[V], const T* dyrow, int64_t t, int64_t c0, float (&dz)[V]) {
  const Pack<T, V> g = *reinterpret_cast<const Pack<T, V>*>(dyrow + t * p.channels);
#pragma unroll
  for (int i = 0; i < V; ++i) dz[i] = to_f(g.e[i]);
  if (p.activation == Activation::kNone) return;
  float z[V];
  preactivation<T, V>(p, in, w, br, t, c0, z);
#pragma unroll
  for (int i = 0; i < V; ++i) dz[i] *= act_grad<T>(p.activation, z[i]);
}

template <typename T, int V>
__global__ void __launch_bounds__(128) conv1d_bwd_generic(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, const int32_t* __restrict__ seg,
    const T* __restrict__ state, const T* __restrict__ dy, T* __restrict__ dx, T* __restrict__ dstate,
    float* __restrict__ dw_part, float* __restrict__ db_part, Conv1dParams p) {
  const int64_t runs = p.chunks_per_row();
  const Tile tl = tile<V>(p, runs);
  if (!tl.active) return;
  const RowIn<T, V> in = row_in<T, V>(p, tl.n, x, state, seg);
  const T* dyrow = dy + tl.n * p.length * p.channels + tl.c0;
  float br[V];
  load_bias<T, V>(p, bias, tl.c0, br);
  const int64_t i0 = tl.run * p.chunk;
  const int64_t i1 = i0 + p.chunk < p.length ? i0 + p.chunk : p.length;
  const int64_t part = tl.n * runs + tl.run;
  // Bias and filter partials over the outputs this run owns.
  float db[V];
#pragma unroll
  for (int i = 0; i < V; ++i) db[i] = 0.0f;
  for (int64_t k = 0; p.filter_grad && k < p.kernel_size; ++k) {
    float dw[V];
#pragma unroll
    for (int i = 0; i < V; ++i) dw[i] = 0.0f;
    for (int64_t t = i0; t < i1; ++t) {
      float dz[V];
      dz_at<T, V>(p, in, w, br, dyrow, t, tl.c0, dz);
      if (k == 0) {
#pragma unroll
        for (int i = 0; i < V; ++i) db[i] += dz[i];
      }
      const int64_t pos = t - p.pad_lo + k * p.dilation;
      if (in.seg_at(pos) != in.seg_at(t)) continue;
      const Pack<T, V> v = in.input(pos, tl.c0);
#pragma unroll
      for (int i = 0; i < V; ++i) dw[i] = fmaf(dz[i], to_f(v.e[i]), dw[i]);
    }
#pragma unroll
    for (int i = 0; i < V; ++i) dw_part[(part * p.kernel_size + k) * p.channels + tl.c0 + i] = dw[i];
  }
  if (p.filter_grad) {
#pragma unroll
    for (int i = 0; i < V; ++i) db_part[part * p.channels + tl.c0 + i] = db[i];
  }
  // Input gradient: input e is read by output t = e + pad_lo - k * dilation.
  const int64_t first = tl.run == 0 ? -p.state_len : i0;
  for (int64_t e = first; e < i1; ++e) {
    float acc[V];
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = 0.0f;
    const int32_t se = in.seg_at(e);
    for (int64_t k = 0; k < p.kernel_size; ++k) {
      const int64_t t = e + p.pad_lo - k * p.dilation;
      if (t < 0 || t >= p.length || in.seg_at(t) != se) continue;
      float dz[V];
      dz_at<T, V>(p, in, w, br, dyrow, t, tl.c0, dz);
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] = fmaf(to_f(w[k * p.channels + tl.c0 + i]), dz[i], acc[i]);
    }
    if (e >= 0) {
      store_pack<T, V>(dx + (tl.n * p.length + e) * p.channels + tl.c0, acc);
    } else {
      store_pack<T, V>(dstate + (tl.n * p.state_len + p.state_len + e) * p.channels + tl.c0, acc);
    }
  }
}

// ---------------------------------------------------------------------------
// One decoding step: thread i owns V channels of sequence n = i / (C / V). It reads
// the K - 1 state slots in order, writing slot j - 1 once slot j is read, then x_t
// into the last slot, so that state_out may be state_in (XLA aliases them when the
// state is donated): no thread reads what another writes. state_in and state_out
// are deliberately not __restrict__.
template <typename T, int V>
__global__ void __launch_bounds__(128) conv1d_step(const T* __restrict__ x, const T* __restrict__ w,
                                                   const T* __restrict__ bias, const T* state_in,
                                                   T* __restrict__ y, T* state_out, Conv1dParams p) {
  const int64_t groups = p.channels / V;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.batch * groups) return;
  const int64_t n = i / groups, c0 = (i % groups) * V, S = p.state_len;
  const T* s_in = state_in + n * S * p.channels + c0;
  T* s_out = state_out + n * S * p.channels + c0;
  float acc[V], wk[V];
  load_bias<T, V>(p, bias, c0, acc);
  for (int64_t j = 0; j < S; ++j) {
    const Pack<T, V> s = *reinterpret_cast<const Pack<T, V>*>(s_in + j * p.channels);
    load_weights<T, V>(p, w, bias, c0, int(j), wk);
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = fmaf(wk[e], to_f(s.e[e]), acc[e]);
    if (j > 0) *reinterpret_cast<Pack<T, V>*>(s_out + (j - 1) * p.channels) = s;
  }
  const Pack<T, V> xv = *reinterpret_cast<const Pack<T, V>*>(x + n * p.channels + c0);
  load_weights<T, V>(p, w, bias, c0, int(S), wk);
#pragma unroll
  for (int e = 0; e < V; ++e) acc[e] = act<T>(p.activation, fmaf(wk[e], to_f(xv.e[e]), acc[e]));
  if (S > 0) *reinterpret_cast<Pack<T, V>*>(s_out + (S - 1) * p.channels) = xv;
  store_pack<T, V>(y + n * p.channels + c0, acc);
}

}  // namespace conv1d_cuda
}  // namespace flashdwc
