// The median time of a launch, in ms, by CUDA events: `warmups` untimed launches,
// then `launches` timed one at a time (record, launch, record, synchronize). Shared by
// the stand-alone probes (read_bandwidth.cu, mma_rate.cu).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

template <typename Launch>
float median_launch_ms(Launch launch, int warmups, int launches) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < warmups; ++i) launch();
  std::vector<float> times;
  for (int i = 0; i < launches; ++i) {
    cudaEventRecord(start);
    launch();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}
