// A minimal fork-join loop for the CPU kernels: splits [0, n) into contiguous
// chunks, one per thread, and waits for all of them before returning.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace flashdwc {

inline int cpu_thread_count(int64_t work_items, int64_t min_items_per_thread) {
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t by_work = std::max<int64_t>(1, work_items / std::max<int64_t>(1, min_items_per_thread));
  return int(std::min(hw, by_work));
}

// Calls fn(thread_index, begin, end) on `threads` threads; thread 0 is the caller.
template <typename Fn>
void parallel_for(int64_t n, int threads, Fn&& fn) {
  if (threads <= 1 || n <= 1) {
    fn(0, int64_t{0}, n);
    return;
  }
  const int64_t chunk = (n + threads - 1) / threads;
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) {
    const int64_t begin = std::min(n, t * chunk);
    const int64_t end = std::min(n, begin + chunk);
    workers.emplace_back([&fn, t, begin, end] { fn(t, begin, end); });
  }
  fn(0, int64_t{0}, std::min(n, chunk));
  for (auto& w : workers) w.join();
}

}  // namespace flashdwc
