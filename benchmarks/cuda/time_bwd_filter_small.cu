// Kernel-level timing of the small-filter filter-gradient kernel (bwd_filter/small.cuh)
// on the registry layers it takes (tests/shapes.py), bf16, at several lengths of a
// block's run of m-steps. Why: on the H100 registry (benchmarks/results/layers_*.csv)
// 44 of its bf16 filter gradients ran 0.63-1.05x XLA and go to XLA under
// implementation=None, and the worst of them launch the fewest blocks: at the
// library's 24-step floor a run of InceptionNeXt-T's 7x7x96 3x3 makes 24 blocks on 132
// SMs (0.67x), SLaK-T's 7x7x768 5x5 154 (0.63x), while the layers that fill 384-396
// blocks sit at 0.8-1.0x. Shorter runs add blocks and cost J - 1 re-read x rows and one
// set of KH x KW x channels atomics a run.
//
// For each layer and each floor: the grid as the library's launcher builds it (the
// shared memory at 3 blocks an SM, the runs at the kernel's occupancy), then memset
// of the fp32 workspace + kernel, 20 back to back between two events after 3 warm-up
// rounds, the time of one; and the same with the cast of the sums to bf16, the whole
// pass, to hold against the registry's time through JAX. Every floor's workspace is
// compared with the first's (fp32 sums in another order: 1e-5 of the largest tap),
// and the first's with a double reference on 8 sampled channels, so that a grid that
// drops or repeats a step shows.
// Build (from the repository root) and run:
//   nvcc -std=c++17 -arch=sm_90 -O3 --expt-relaxed-constexpr -Icsrc \
//        benchmarks/cuda/time_bwd_filter_small.cu -o time_bwd_filter_small
//   ./time_bwd_filter_small          (exit status 0 only if every check passed)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "../../tests/cuda/harness.cuh"
#include "bwd_filter/small.cuh"
#include "bwd_filter/split.cuh"
#include "common/direct_grid.h"
#include "common/launch.cuh"

namespace {

using flashdwc::BwdFilterSmallGrid;
using flashdwc::DwConvParams;
using T = __nv_bfloat16;

struct Layer {
  const char* name;
  int64_t n, hw, c, k, stride;
};

// The registry's layers on this kernel (bf16 filter gradient), routed to XLA first,
// then three that stay on ours as controls.
constexpr Layer kLayers[] = {
    {"inceptionnext_t 7x7x96 3x3", 64, 7, 96, 3, 1},
    {"inceptionnext_t 14x14x48 3x3", 64, 14, 48, 3, 1},
    {"inceptionnext_t 28x28x24 3x3", 64, 28, 24, 3, 1},
    {"slak_t 7x7x768 5x5", 32, 7, 768, 5, 1},
    {"replknet_31b 7x7x1024 5x5", 32, 7, 1024, 5, 1},
    {"van_b0 7x7x256 5x5", 64, 7, 256, 5, 1},
    {"mobilenet_v2 14x14x576 3x3 s2", 64, 14, 576, 3, 2},
    {"mobilenet_v2 28x28x192 3x3 s2", 64, 28, 192, 3, 2},
    {"mobilenet_v2 7x7x960 3x3", 64, 7, 960, 3, 1},
    {"mobilenet_v2 14x14x384 3x3", 64, 14, 384, 3, 1},
    {"mobilenet_v2 28x28x192 3x3", 64, 28, 192, 3, 1},
    {"mobilenet_v3 14x14x200 3x3", 64, 14, 200, 3, 1},
    {"mobilenet_v3 14x14x672 5x5 s2", 64, 14, 672, 5, 2},
    {"efficientnet_b3 10x10x1392 5x5", 32, 10, 1392, 5, 1},
    {"efficientnet_b3 10x10x1392 3x3", 32, 10, 1392, 3, 1},
    {"efficientnet_b3 19x19x816 5x5", 32, 19, 816, 5, 1},
    {"unireplknet_t 7x7x640 5x5", 64, 7, 640, 5, 1},
    {"efficientnet_b0 28x28x240 5x5", 64, 28, 240, 5, 1},
    {"control: mobilenet_v2 56x56x144 3x3", 64, 56, 144, 3, 1},
    {"control: mobilenet_v2 112x112x32 3x3", 64, 112, 32, 3, 1},
    {"control: van_b0 14x14x1280 3x3", 64, 14, 1280, 3, 1},
};
constexpr int64_t kFloors[] = {flashdwc::kBwdFilterSmallMinRunSteps, 16, 12, 8, 6, 4};

// Symmetric padding k / 2, as the registry's layers (PyTorch's padding=k//2).
DwConvParams layer_params(const Layer& l) {
  const int64_t pad = l.k / 2, out = (l.hw + 2 * pad - l.k) / l.stride + 1;
  return conv_params(l.n, l.hw, l.hw, l.c, l.k, l.k, pad, pad, out, out, l.stride);
}

// dw[kh][kw][c] in double, on the sampled channels; *mag is the sum of the terms'
// magnitudes, for the tolerance.
double reference_tap(const DwConvParams& p, const std::vector<T>& x, const std::vector<T>& dy, int64_t kh,
                     int64_t kw, int64_t c, double* mag) {
  double sum = 0;
  *mag = 0;
  for (int64_t n = 0; n < p.batch; ++n) {
    for (int64_t oh = 0; oh < p.out_h; ++oh) {
      const int64_t ih = oh * p.stride_h + kh - p.pad_top;
      if (ih < 0 || ih >= p.in_h) continue;
      for (int64_t ow = 0; ow < p.out_w; ++ow) {
        const int64_t iw = ow * p.stride_w + kw - p.pad_left;
        if (iw < 0 || iw >= p.in_w) continue;
        const double t = double(to_host_float(dy[((n * p.out_h + oh) * p.out_w + ow) * p.channels + c])) *
                         to_host_float(x[((n * p.in_h + ih) * p.in_w + iw) * p.channels + c]);
        sum += t;
        *mag += std::fabs(t);
      }
    }
  }
  return sum;
}

template <int kK, int kStride>
bool run_layer(const Layer& l, int sms) {
  using Tr = flashdwc::BwdFilterSmallTraits<T, kK, kStride>;
  auto kernel = flashdwc::dwconv_bwd_filter_small_kernel<T, kK, kStride>;
  const DwConvParams p = layer_params(l);
  DeviceBuffer<T> x(p.batch * p.in_h * p.in_w * p.channels), dy(p.batch * p.out_h * p.out_w * p.channels);
  x.fill_uniform(1u);
  dy.fill_uniform(2u);
  const int64_t taps = p.kernel_h * p.kernel_w * p.channels;
  DeviceBuffer<float> ws(taps);
  DeviceBuffer<T> dw(taps);
  const dim3 finalize_grid = to_dim3(flashdwc::direct_grid(taps));
  const size_t smem = size_t(flashdwc::make_bwd_filter_small_grid(p, Tr::kWidth, 2, int64_t(sms) * 3).smem_bytes);
  CK(flashdwc::allow_dynamic_smem(kernel, smem));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Tr::kThreads, smem));
  std::vector<float> first;
  bool ok = true;
  for (int64_t floor : kFloors) {
    const BwdFilterSmallGrid g =
        flashdwc::make_bwd_filter_small_grid(p, Tr::kWidth, 2, int64_t(std::max(per_sm, 1)) * sms, floor);
    const unsigned blocks = unsigned(g.runs * g.col_blocks * g.channel_blocks);
    auto launch = [&] {
      cudaMemsetAsync(ws.get(), 0, taps * sizeof(float));
      kernel<<<blocks, Tr::kThreads, smem>>>(x.get(), dy.get(), ws.get(), p, g);
    };
    // 20 rounds between two events: a round is 5-50 us, so one event pair's overhead
    // would be a large share of a single round.
    const float ms = median_launch_ms([&] { for (int i = 0; i < 20; ++i) launch(); }, 3, 9) / 20;
    // The whole pass as run_dwconv_bwd_filter runs it: with the cast of the sums to T.
    const float pass_ms = median_launch_ms(
                              [&] {
                                for (int i = 0; i < 20; ++i) {
                                  launch();
                                  flashdwc::dwconv_bwd_filter_finalize_kernel<T>
                                      <<<finalize_grid, flashdwc::kDirectThreads>>>(ws.get(), dw.get(), taps, 1);
                                }
                              },
                              3, 9) /
                          20;
    const cudaError_t err = cudaGetLastError();
    const std::vector<float> got = ws.download();
    const char* verdict = "same";
    if (err != cudaSuccess) {
      verdict = cudaGetErrorString(err);
      ok = false;
    } else if (first.empty()) {
      first = got;
      // The first floor against a double reference on 8 sampled channels.
      const std::vector<T> hx = x.download(), hdy = dy.download();
      Mismatches m;
      for (int s = 0; s < 8; ++s) {
        const int64_t c = (s * 7919) % p.channels;
        for (int64_t kh = 0; kh < p.kernel_h; ++kh) {
          for (int64_t kw = 0; kw < p.kernel_w; ++kw) {
            double mag = 0;
            const double want = reference_tap(p, hx, hdy, kh, kw, c, &mag);
            const int64_t tap = (kh * p.kernel_w + kw) * p.channels + c;
            // fp32 sums of bf16 products: a few hundred roundings deep at most (a
            // thread's run, the column sum, the atomics), each within 2^-24 of mag.
            m.check(got[tap], want, 2e-5 * mag + 1e-6, mag, [&] {
              std::printf("    tap (%lld, %lld, %lld): %g against %g\n", (long long)kh, (long long)kw, (long long)c,
                          double(got[tap]), want);
            });
          }
        }
      }
      if (m.bad) ok = false, verdict = "REFERENCE MISMATCH";
    } else {
      double largest = 0, worst = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        largest = std::max(largest, double(std::fabs(first[i])));
        worst = std::max(worst, double(std::fabs(got[i] - first[i])));
      }
      if (!(worst <= 1e-5 * largest)) ok = false, verdict = "DIFFERS";
    }
    const double bytes = double(p.batch) * (p.in_h * p.in_w + p.out_h * p.out_w) * p.channels * sizeof(T);
    std::printf("%-38s floor %2lld: %4u blocks (%d an SM resident), %3lld steps a run: %.4f ms %6.1f GB/s, "
                "with the cast %.4f ms %s\n",
                l.name, (long long)floor, blocks, per_sm, (long long)g.steps_per_run, ms, bytes / ms / 1e6, pass_ms,
                verdict);
  }
  return ok;
}

bool run_layer_any(const Layer& l, int sms) {
  if (l.k == 3) return l.stride == 1 ? run_layer<3, 1>(l, sms) : run_layer<3, 2>(l, sms);
  return l.stride == 1 ? run_layer<5, 1>(l, sms) : run_layer<5, 2>(l, sms);
}

}  // namespace

int main() {
  int device = 0, sms = 0;
  CK(cudaGetDevice(&device));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  bool ok = true;
  for (const Layer& l : kLayers) ok = run_layer_any(l, sms) && ok;
  std::printf(ok ? "ALL OK\n" : "SOME CHECKS FAILED\n");
  return ok ? 0 : 1;
}
