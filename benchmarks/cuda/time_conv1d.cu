// Kernel-level timing of candidate geometries of the 1-D kernels (conv1d_kernels.cuh),
// bf16, K = 4, bias + SiLU (Mamba's), no segments or state, at Mamba-style sizes:
// median of 20 launches after 3 warm-up, cudaEvent timed, U(-1, 1) data. Each
// variant's output is compared with the first variant's of its pass (the forward and
// the input gradient bit for bit, the summed filter gradient to 1e-5 relative), so a
// geometry that drops or repeats a position shows. Build and run:
//   nvcc -std=c++17 -arch=sm_90 -O3 --expt-relaxed-constexpr -Icsrc -Itests/cuda \
//        benchmarks/cuda/time_conv1d.cu -o time_conv1d && ./time_conv1d
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "conv1d/conv1d_kernels.cuh"
#include "harness.cuh"

using flashdwc::Conv1dParams;
using namespace flashdwc::conv1d_cuda;
using T = __nv_bfloat16;
constexpr int K = 4;

struct Problem {
  Conv1dParams p;
  DeviceBuffer<T> x, w, b, dy;
  Problem(int64_t n, int64_t l, int64_t c) : x(n * l * c), w(K * c), b(c), dy(n * l * c) {
    p = Conv1dParams{n, l, c, K, 1, K - 1, 0, 128, true, false, flashdwc::Activation::kSilu};
    x.fill_uniform(1u);
    w.fill_uniform(2u);
    b.fill_uniform(3u);
    dy.fill_uniform(4u);
  }
  int64_t elems() const { return p.batch * p.length * p.channels; }
};

// Times a forward launch writing y, compares y bit for bit with the first forward of
// the shape (which becomes the reference), prints the row.
template <typename Launch>
void time_fwd(const char* name, Problem& pr, GuardedOutput<T>& y, Launch launch, std::vector<T>* ref) {
  const Conv1dParams& p = pr.p;
  const float ms = median_launch_ms(launch, 3, 20);
  const std::vector<T> got = y.download();
  bool same = y.guards_intact();
  if (ref->empty()) *ref = got;
  for (size_t i = 0; same && i < got.size(); ++i) same = memcmp(&got[i], &(*ref)[i], sizeof(T)) == 0;
  const double bytes = 2.0 * pr.elems() * sizeof(T);
  std::printf("fwd %-28s %lldx%lldx%lld %.4f ms %.2f TB/s %s %s\n", name, (long long)p.batch, (long long)p.length,
              (long long)p.channels, ms, bytes / ms / 1e9, same ? "same" : "DIFFERS",
              cudaGetErrorString(cudaGetLastError()));
}

// One forward geometry: V channels a thread, U loads ahead, `run` positions a thread.
template <int V, int U, int MinBlocks, bool Seg>
void fwd_window(const char* name, Problem& pr, int64_t run, std::vector<T>* ref) {
  const Conv1dParams& p = pr.p;
  GuardedOutput<T> y(pr.elems());
  const int64_t groups = p.channels / V, runs = (p.length + run - 1) / run;
  const dim3 grid(unsigned((groups + 127) / 128 * runs * p.batch));
  auto launch = [&] {
    conv1d_fwd_window<T, V, K, U, MinBlocks, Seg><<<grid, 128>>>(pr.x.get(), pr.w.get(), pr.b.get(), nullptr,
                                                                 nullptr, y.get(), p, run);
  };
  time_fwd(name, pr, y, launch, ref);
}

template <int V, int R, int MinBlocks>
void fwd_plain(const char* name, Problem& pr, std::vector<T>* ref) {
  const Conv1dParams& p = pr.p;
  GuardedOutput<T> y(pr.elems());
  const int64_t groups = p.channels / V, runs = (p.length + R - 1) / R;
  const dim3 grid(unsigned((groups + 127) / 128 * runs * p.batch));
  auto launch = [&] {
    conv1d_fwd_plain<T, V, K, R, MinBlocks, flashdwc::Activation::kSilu>
        <<<grid, 128>>>(pr.x.get(), pr.w.get(), pr.b.get(), y.get(), p);
  };
  time_fwd(name, pr, y, launch, ref);
}

template <int V, int R, int MinBlocks>
void fwd_plain_grid3(const char* name, Problem& pr, std::vector<T>* ref) {
  const Conv1dParams& p = pr.p;
  GuardedOutput<T> y(pr.elems());
  const dim3 grid(unsigned((p.channels / V + 127) / 128), unsigned((p.length + R - 1) / R), unsigned(p.batch));
  auto launch = [&] {
    conv1d_fwd_plain_grid3<T, V, K, R, MinBlocks, flashdwc::Activation::kSilu>
        <<<grid, 128>>>(pr.x.get(), pr.w.get(), pr.b.get(), y.get(), p);
  };
  time_fwd(name, pr, y, launch, ref);
}

// The filter gradient summed over the slots, in double.
std::vector<double> summed_dw(const DeviceBuffer<float>& part, int64_t slots, int64_t c) {
  const std::vector<float> h = part.download();
  std::vector<double> s(K * c, 0.0);
  for (int64_t j = 0; j < slots; ++j)
    for (int64_t i = 0; i < K * c; ++i) s[i] += h[j * K * c + i];
  return s;
}

struct BwdRef {
  std::vector<T> dx;
  std::vector<double> dw;
};

void bwd_check(const char* name, Problem& pr, float ms, const GuardedOutput<T>& dx, const DeviceBuffer<float>& dw,
               BwdRef* ref) {
  const Conv1dParams& p = pr.p;
  const std::vector<T> got = dx.download();
  const std::vector<double> gw = summed_dw(dw, p.batch * p.chunks_per_row(), p.channels);
  bool same = dx.guards_intact();
  if (ref->dx.empty()) ref->dx = got, ref->dw = gw;
  for (size_t i = 0; same && i < got.size(); ++i) same = memcmp(&got[i], &ref->dx[i], sizeof(T)) == 0;
  double err = 0.0, mag = 0.0;
  for (size_t i = 0; i < gw.size(); ++i) err = std::max(err, std::fabs(gw[i] - ref->dw[i])), mag = std::max(mag, std::fabs(ref->dw[i]));
  const bool dw_ok = err <= 1e-5 * mag;
  const double bytes = 3.0 * pr.elems() * sizeof(T);
  std::printf("bwd %-28s %lldx%lldx%lld %.4f ms %.2f TB/s dx %s dw %s %s\n", name, (long long)p.batch,
              (long long)p.length, (long long)p.channels, ms, bytes / ms / 1e9, same ? "same" : "DIFFERS",
              dw_ok ? "ok" : "DIFFERS", cudaGetErrorString(cudaGetLastError()));
}

// The input gradient alone (FilterGrad = false, p.filter_grad false): dx checked bit for
// bit against the first backward's, no partials written.
template <int V, int U, int W, int MinBlocks>
void bwd_split_dx(const char* name, Problem& pr, const BwdRef& ref) {
  Conv1dParams p = pr.p;
  p.filter_grad = false;
  GuardedOutput<T> dx(pr.elems());
  const int64_t channel_blocks = (p.channels + 32 * V - 1) / (32 * V);
  const dim3 grid(unsigned(channel_blocks), unsigned(p.chunks_per_row()), unsigned(p.batch)), block(32, W);
  auto launch = [&] {
    conv1d_bwd_window_split<T, V, K, U, W, MinBlocks, false, true, false><<<grid, block>>>(
        pr.x.get(), pr.w.get(), pr.b.get(), nullptr, nullptr, pr.dy.get(), dx.get(), nullptr, nullptr, nullptr, p);
  };
  const float ms = median_launch_ms(launch, 3, 20);
  const std::vector<T> got = dx.download();
  bool same = dx.guards_intact() && got.size() == ref.dx.size();
  for (size_t i = 0; same && i < got.size(); ++i) same = memcmp(&got[i], &ref.dx[i], sizeof(T)) == 0;
  std::printf("dx  %-28s %lldx%lldx%lld %.4f ms %.2f TB/s dx %s %s\n", name, (long long)p.batch, (long long)p.length,
              (long long)p.channels, ms, 3.0 * pr.elems() * sizeof(T) / ms / 1e9, same ? "same" : "DIFFERS",
              cudaGetErrorString(cudaGetLastError()));
}

template <int V, int U, int W, int MinBlocks, bool Seg, bool Grid3 = false>
void bwd_split(const char* name, Problem& pr, BwdRef* ref) {
  const Conv1dParams& p = pr.p;
  GuardedOutput<T> dx(pr.elems());
  DeviceBuffer<float> dw(p.batch * p.chunks_per_row() * K * p.channels), db(p.batch * p.chunks_per_row() * p.channels);
  const int64_t channel_blocks = (p.channels + 32 * V - 1) / (32 * V);
  const dim3 grid = Grid3 ? dim3(unsigned(channel_blocks), unsigned(p.chunks_per_row()), unsigned(p.batch))
                          : dim3(unsigned(channel_blocks * p.chunks_per_row() * p.batch));
  const dim3 block(32, W);
  auto launch = [&] {
    conv1d_bwd_window_split<T, V, K, U, W, MinBlocks, Seg, Grid3><<<grid, block>>>(
        pr.x.get(), pr.w.get(), pr.b.get(), nullptr, nullptr, pr.dy.get(), dx.get(), nullptr, dw.get(), db.get(), p);
  };
  bwd_check(name, pr, median_launch_ms(launch, 3, 20), dx, dw, ref);
}

// The backward with segment ids (packed sequences, a boundary every 1000 positions or
// so): the flat grid at 3 blocks an SM (the library's segmented path) against the 3-D
// grid at 4, dx bit for bit and the summed filter gradient to 1e-5 against the first.
template <int MinBlocks, bool Grid3>
void bwd_seg(const char* name, Problem& pr, const DeviceBuffer<int32_t>& seg, BwdRef* ref) {
  Conv1dParams p = pr.p;
  p.has_seg = true;
  GuardedOutput<T> dx(pr.elems());
  DeviceBuffer<float> dw(p.batch * p.chunks_per_row() * K * p.channels), db(p.batch * p.chunks_per_row() * p.channels);
  const int64_t channel_blocks = (p.channels + 127) / 128;
  const dim3 grid = Grid3 ? dim3(unsigned(channel_blocks), unsigned(p.chunks_per_row()), unsigned(p.batch))
                          : dim3(unsigned(channel_blocks * p.chunks_per_row() * p.batch));
  auto launch = [&] {
    conv1d_bwd_window_split<T, 4, K, 3, 4, MinBlocks, true, Grid3><<<grid, dim3(32, 4)>>>(
        pr.x.get(), pr.w.get(), pr.b.get(), seg.get(), nullptr, pr.dy.get(), dx.get(), nullptr, dw.get(), db.get(), p);
  };
  bwd_check(name, pr, median_launch_ms(launch, 3, 20), dx, dw, ref);
}

// The forward with segment ids: the window kernel on the flat grid (the library's
// segmented path before) against the plain kernel on the 3-D grid, y bit for bit.
template <bool Grid3>
void fwd_seg(const char* name, Problem& pr, const DeviceBuffer<int32_t>& seg, std::vector<T>* ref) {
  Conv1dParams p = pr.p;
  p.has_seg = true;
  GuardedOutput<T> y(pr.elems());
  auto launch = [&] {
    if constexpr (Grid3) {
      const dim3 grid(unsigned((p.channels / 4 + 127) / 128), unsigned((p.length + 7) / 8), unsigned(p.batch));
      conv1d_fwd_plain_grid3<T, 4, K, 8, 5, flashdwc::Activation::kSilu, true>
          <<<grid, 128>>>(pr.x.get(), pr.w.get(), pr.b.get(), y.get(), p, seg.get());
    } else {
      const int64_t blocks = (p.channels / 4 + 127) / 128 * ((p.length + 15) / 16) * p.batch;
      conv1d_fwd_window<T, 4, K, 4, 6, true><<<unsigned(blocks), 128>>>(pr.x.get(), pr.w.get(), pr.b.get(), seg.get(),
                                                                         nullptr, y.get(), p, 16);
    }
  };
  time_fwd(name, pr, y, launch, ref);
}

std::vector<int32_t> packed_segment_ids(const Conv1dParams& p) {
  std::vector<int32_t> ids(p.batch * p.length);
  for (int64_t n = 0; n < p.batch; ++n) {
    int32_t id = 0;
    for (int64_t t = 0; t < p.length; ++t) {
      if (t > 0 && (t * 7919 + n * 104729) % 1000 < 1) ++id;  // about one boundary in 1000 positions
      ids[n * p.length + t] = id;
    }
  }
  return ids;
}

// Copy of the same bytes as the forward, for the roof on this card.
__global__ void copy16(const int4* __restrict__ a, int4* __restrict__ b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) b[i] = a[i];
}

// The copy and the library's forward (3-D grid, V4 R8 mb6) over distinct input sets in
// rotation, about 2 GB of x and y in all, as bench_conv1d.py runs them through JAX:
// the rows above reuse one x and y, which at 100-330 MB partly stay in the 50 MB L2,
// and through JAX the forward took 1.3-1.45x those rows' time with one custom call a set
// in its HLO. Rotation tells the L2's share of that gap from the executable's.
void rotating_sets(Problem& pr) {
  const Conv1dParams& p = pr.p;
  const int64_t set_bytes = 2 * pr.elems() * int64_t(sizeof(T));
  const int sets = int(std::max<int64_t>(2, (int64_t(2) << 30) / set_bytes));
  std::vector<std::unique_ptr<DeviceBuffer<T>>> xs, ys;
  for (int i = 0; i < sets; ++i) {
    xs.push_back(std::make_unique<DeviceBuffer<T>>(pr.elems()));
    ys.push_back(std::make_unique<DeviceBuffer<T>>(pr.elems()));
    xs.back()->fill_uniform(10u + unsigned(i));
  }
  const int64_t n16 = pr.elems() * int64_t(sizeof(T)) / 16;
  int next = 0;
  const float copy_ms = median_launch_ms(
      [&] {
        copy16<<<132 * 16, 256>>>(reinterpret_cast<const int4*>(xs[next]->get()), reinterpret_cast<int4*>(ys[next]->get()),
                                  n16);
        next = (next + 1) % sets;
      },
      3, 20);
  const dim3 grid(unsigned((p.channels / 4 + 127) / 128), unsigned((p.length + 7) / 8), unsigned(p.batch));
  const float fwd_ms = median_launch_ms(
      [&] {
        conv1d_fwd_plain_grid3<T, 4, K, 8, 6, flashdwc::Activation::kSilu>
            <<<grid, 128>>>(xs[next]->get(), pr.w.get(), pr.b.get(), ys[next]->get(), p);
        next = (next + 1) % sets;
      },
      3, 20);
  const double bytes = 2.0 * pr.elems() * sizeof(T);
  std::printf("rotating %d sets %lldx%lldx%lld: copy %.4f ms %.2f TB/s, fwd grid3 V4 R8 mb6 %.4f ms %.2f TB/s (%.2f of the copy's time) %s\n",
              sets, (long long)p.batch, (long long)p.length, (long long)p.channels, copy_ms, bytes / copy_ms / 1e9,
              fwd_ms, bytes / fwd_ms / 1e9, copy_ms / fwd_ms, cudaGetErrorString(cudaGetLastError()));
}

// The SM clock now, in MHz: one thread counts clock64 cycles over 100 us of the global
// timer (launched right after a batch, it reads the clock the batch left the SM at).
__global__ void sm_clock_probe(unsigned long long* out) {
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const long long c0 = clock64();
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  } while (t1 - t0 < 100000);
  out[0] = (unsigned long long)(clock64() - c0);
  out[1] = t1 - t0;
}

double probe_sm_mhz(const DeviceBuffer<unsigned long long>& probe) {
  sm_clock_probe<<<1, 1>>>(probe.get());
  const std::vector<unsigned long long> h = probe.download();
  return 1e3 * double(h[0]) / double(h[1]);
}

// Back-to-back launches, as inside an XLA executable (the rows above time each launch
// alone, the GPU idle between them), for about `seconds`, in batches of `batch` launches
// timed by one event pair each: the per-launch time of the first batch, the median one
// and the last. Through JAX every 1-D pass took 1.22-1.28x the isolated launch's time;
// if sustained load lowers the SM clock (power), issue-bound kernels slow down with it
// while the copy does not.
template <typename Launch>
void sustained(const char* name, const Problem& pr, double tensors, Launch launch, int batch = 100,
               double seconds = 3.0) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const DeviceBuffer<unsigned long long> probe(2);
  std::vector<float> per_launch;
  std::vector<double> mhz;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    cudaEventRecord(start);
    for (int i = 0; i < batch; ++i) launch();
    cudaEventRecord(stop);
    mhz.push_back(probe_sm_mhz(probe));  // queued after the batch: its clock, outside the timing
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    per_launch.push_back(ms / batch);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::vector<float> sorted = per_launch;
  std::sort(sorted.begin(), sorted.end());
  std::vector<double> sorted_mhz = mhz;
  std::sort(sorted_mhz.begin(), sorted_mhz.end());
  const double bytes = tensors * pr.elems() * sizeof(T);
  const float med = sorted[sorted.size() / 2];
  std::printf("sustained %-24s %lldx%lldx%lld %zu batches of %d: first %.4f ms, median %.4f ms (%.2f TB/s), "
              "last %.4f ms; SM clock after a batch: first %.0f, median %.0f, last %.0f MHz %s\n",
              name, (long long)pr.p.batch, (long long)pr.p.length, (long long)pr.p.channels, per_launch.size(), batch,
              per_launch.front(), med, bytes / med / 1e9, per_launch.back(), mhz.front(),
              sorted_mhz[sorted_mhz.size() / 2], mhz.back(), cudaGetErrorString(cudaGetLastError()));
}

// Each pass of the library's geometry, isolated (median of 20 lone launches) and
// sustained (3 s back to back), over 3 sets of x, dy and outputs in rotation.
void sustained_rows(int64_t n, int64_t l, int64_t c) {
  Problem pr(n, l, c);
  const Conv1dParams& p = pr.p;
  Conv1dParams p_dx = p;
  p_dx.filter_grad = false;
  constexpr int kSets = 3;
  std::vector<std::unique_ptr<DeviceBuffer<T>>> xs, dys, outs;
  for (int i = 0; i < kSets; ++i) {
    xs.push_back(std::make_unique<DeviceBuffer<T>>(pr.elems()));
    dys.push_back(std::make_unique<DeviceBuffer<T>>(pr.elems()));
    outs.push_back(std::make_unique<DeviceBuffer<T>>(pr.elems()));
    xs.back()->fill_uniform(20u + unsigned(i));
    dys.back()->fill_uniform(30u + unsigned(i));
  }
  DeviceBuffer<float> dw(p.batch * p.chunks_per_row() * K * p.channels), db(p.batch * p.chunks_per_row() * p.channels);
  const int64_t n16 = pr.elems() * int64_t(sizeof(T)) / 16;
  const dim3 fwd_grid(unsigned((p.channels / 4 + 127) / 128), unsigned((p.length + 7) / 8), unsigned(p.batch));
  const dim3 bwd_grid(unsigned((p.channels + 127) / 128), unsigned(p.chunks_per_row()), unsigned(p.batch));
  const dim3 bwd_block(32, 4);
  int next = 0;
  auto copy = [&] {
    copy16<<<132 * 16, 256>>>(reinterpret_cast<const int4*>(xs[next]->get()), reinterpret_cast<int4*>(outs[next]->get()),
                              n16);
    next = (next + 1) % kSets;
  };
  auto fwd = [&] {
    conv1d_fwd_plain_grid3<T, 4, K, 8, 6, flashdwc::Activation::kSilu>
        <<<fwd_grid, 128>>>(xs[next]->get(), pr.w.get(), pr.b.get(), outs[next]->get(), p);
    next = (next + 1) % kSets;
  };
  auto bwd = [&] {
    conv1d_bwd_window_split<T, 4, K, 3, 4, 4, false, true, true><<<bwd_grid, bwd_block>>>(
        xs[next]->get(), pr.w.get(), pr.b.get(), nullptr, nullptr, dys[next]->get(), outs[next]->get(), nullptr,
        dw.get(), db.get(), p);
    next = (next + 1) % kSets;
  };
  auto dx = [&] {
    conv1d_bwd_window_split<T, 4, K, 3, 4, 4, false, true, false><<<bwd_grid, bwd_block>>>(
        xs[next]->get(), pr.w.get(), pr.b.get(), nullptr, nullptr, dys[next]->get(), outs[next]->get(), nullptr,
        nullptr, nullptr, p_dx);
    next = (next + 1) % kSets;
  };
  // In this order (a function's arguments are evaluated in no fixed order).
  const DeviceBuffer<unsigned long long> probe(2);
  const double before_mhz = probe_sm_mhz(probe);
  const float copy_ms = median_launch_ms(copy, 3, 20), fwd_ms = median_launch_ms(fwd, 3, 20);
  const float bwd_ms = median_launch_ms(bwd, 3, 20), dx_ms = median_launch_ms(dx, 3, 20);
  const double after_mhz = probe_sm_mhz(probe);
  std::printf("isolated %lldx%lldx%lld: copy %.4f ms, fwd %.4f ms, bwd %.4f ms, dx alone %.4f ms; SM clock %.0f MHz "
              "before, %.0f after\n", (long long)n, (long long)l, (long long)c, copy_ms, fwd_ms, bwd_ms, dx_ms,
              before_mhz, after_mhz);
  sustained("copy", pr, 2.0, copy);
  sustained("fwd grid3 V4 R8 mb6", pr, 2.0, fwd);
  sustained("bwd grid3 V4 U3 W4 mb4", pr, 3.0, bwd);
  sustained("dx grid3 V4 U3 W4 mb4", pr, 3.0, dx);
}

// ./time_conv1d [SHAPE_INDEX]: every shape, or one (for Nsight Compute).
// ./time_conv1d sustained: isolated against back-to-back launches, with the SM clock
// after each batch (and `nvidia-smi --query-gpu=clocks.mem,power.draw --format=csv -lms 200`
// beside it for the memory clock and the power).
int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "sustained") {
    sustained_rows(16, 2048, 5120);
    sustained_rows(32, 2048, 5120);
    sustained_rows(32, 2048, 1536);
    return 0;
  }
  const int64_t shapes[][3] = {{8, 2048, 1536}, {16, 2048, 1536}, {32, 2048, 1536}, {8, 2048, 5120},
                               {16, 2048, 5120}, {32, 2048, 5120}};
  const int only = argc > 1 ? std::atoi(argv[1]) : -1;
  for (int si = 0; si < 6; ++si) {
    if (only >= 0 && si != only) continue;
    const auto& s = shapes[si];
    Problem pr(s[0], s[1], s[2]);
    {
      DeviceBuffer<T> out(pr.elems());
      const int64_t n16 = pr.elems() * int64_t(sizeof(T)) / 16;
      const float ms = median_launch_ms(
          [&] { copy16<<<132 * 16, 256>>>(reinterpret_cast<const int4*>(pr.x.get()), reinterpret_cast<int4*>(out.get()), n16); },
          3, 20);
      std::printf("copy %lldx%lldx%lld %.4f ms %.2f TB/s\n", (long long)s[0], (long long)s[1], (long long)s[2], ms,
                  2.0 * pr.elems() * sizeof(T) / ms / 1e9);
    }
    rotating_sets(pr);
    std::vector<T> fref;
    fwd_window<4, 4, 6, true>("window V4 U4 run16 mb6 seg", pr, 16, &fref);
    fwd_window<4, 4, 6, false>("window V4 U4 run16 mb6", pr, 16, &fref);
    fwd_window<4, 8, 4, false>("window V4 U8 run16 mb4", pr, 16, &fref);
    fwd_window<4, 16, 3, false>("window V4 U16 run16 mb3", pr, 16, &fref);
    fwd_window<4, 8, 4, false>("window V4 U8 run32 mb4", pr, 32, &fref);
    fwd_window<8, 4, 4, false>("window V8 U4 run16 mb4", pr, 16, &fref);
    fwd_window<8, 8, 3, false>("window V8 U8 run8 mb3", pr, 8, &fref);
    fwd_window<2, 8, 6, false>("window V2 U8 run16 mb6", pr, 16, &fref);
    fwd_window<2, 16, 6, false>("window V2 U16 run16 mb6", pr, 16, &fref);
    fwd_plain<8, 8, 3>("plain V8 R8 mb3", pr, &fref);
    fwd_plain<8, 4, 4>("plain V8 R4 mb4", pr, &fref);
    fwd_plain<4, 16, 4>("plain V4 R16 mb4", pr, &fref);
    fwd_plain<4, 8, 5>("plain V4 R8 mb5", pr, &fref);
    fwd_plain<4, 8, 6>("plain V4 R8 mb6", pr, &fref);
    fwd_plain<2, 16, 7>("plain V2 R16 mb7", pr, &fref);
    fwd_plain<2, 32, 5>("plain V2 R32 mb5", pr, &fref);
    fwd_plain_grid3<4, 8, 6>("grid3 V4 R8 mb6", pr, &fref);
    fwd_plain_grid3<4, 16, 4>("grid3 V4 R16 mb4", pr, &fref);
    fwd_plain_grid3<8, 4, 4>("grid3 V8 R4 mb4", pr, &fref);
    fwd_plain_grid3<8, 8, 3>("grid3 V8 R8 mb3", pr, &fref);
    BwdRef bref;
    bwd_split<2, 3, 4, 5, true>("split V2 U3 W4 mb5 seg", pr, &bref);
    bwd_split<2, 3, 4, 5, false>("split V2 U3 W4 mb5", pr, &bref);
    bwd_split<2, 4, 4, 6, false>("split V2 U4 W4 mb6", pr, &bref);
    bwd_split<4, 3, 4, 4, false>("split V4 U3 W4 mb4", pr, &bref);
    bwd_split<4, 4, 4, 4, false>("split V4 U4 W4 mb4", pr, &bref);
    bwd_split<4, 2, 8, 2, false>("split V4 U2 W8 mb2", pr, &bref);
    bwd_split<8, 2, 4, 2, false>("split V8 U2 W4 mb2", pr, &bref);
    bwd_split<4, 3, 4, 4, false, true>("grid3 split V4 U3 W4 mb4", pr, &bref);
    bwd_split<4, 4, 4, 4, false, true>("grid3 split V4 U4 W4 mb4", pr, &bref);
    bwd_split<2, 4, 4, 6, false, true>("grid3 split V2 U4 W4 mb6", pr, &bref);
    // The flat grid's other geometries on the 3-D grid: V4 U3 W4 led the flat ones by
    // 2-12%, and the 3-D grid freed 8-21 registers, which may favour wider vectors or
    // more warps a block there.
    bwd_split<4, 2, 4, 4, false, true>("grid3 split V4 U2 W4 mb4", pr, &bref);
    bwd_split<4, 2, 8, 2, false, true>("grid3 split V4 U2 W8 mb2", pr, &bref);
    bwd_split<8, 2, 4, 2, false, true>("grid3 split V8 U2 W4 mb2", pr, &bref);
    bwd_split<2, 3, 4, 5, false, true>("grid3 split V2 U3 W4 mb5", pr, &bref);
    {
      const DeviceBuffer<int32_t> seg(packed_segment_ids(pr.p));
      BwdRef sref;
      std::vector<T> fsref;
      fwd_seg<false>("seg window V4 U4 run16 mb6", pr, seg, &fsref);
      fwd_seg<true>("seg plain grid3 V4 R8 mb5", pr, seg, &fsref);
      bwd_seg<3, false>("seg flat V4 U3 W4 mb3", pr, seg, &sref);
      bwd_seg<4, true>("seg grid3 V4 U3 W4 mb4", pr, seg, &sref);
    }
    // The input gradient alone: the library's geometry, then ones that the 20 or so
    // registers of the dropped filter sums may allow.
    bwd_split_dx<4, 3, 4, 4>("grid3 dx V4 U3 W4 mb4", pr, bref);
    bwd_split_dx<4, 3, 4, 5>("grid3 dx V4 U3 W4 mb5", pr, bref);
    bwd_split_dx<4, 4, 4, 5>("grid3 dx V4 U4 W4 mb5", pr, bref);
    bwd_split_dx<8, 3, 4, 3>("grid3 dx V8 U3 W4 mb3", pr, bref);
    bwd_split_dx<2, 4, 4, 6>("grid3 dx V2 U4 W4 mb6", pr, bref);
  }
  return 0;
}
