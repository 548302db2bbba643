// Ceilings: the device's attainable memory bandwidth and compute rate, measured in-process so
// the roofline column is relative to this machine today, not to a datasheet.
#pragma once
#include <functional>
#include <string>

#include "ding/device.h"

namespace ding::bench {

struct Ceilings {
  double bandwidth_gbs = 0;  // sustained read+write bandwidth
  std::string bandwidth_how;  // what was measured ("STREAM triad, 2 threads, 3 x 256 MiB")
  double gflops = 0;          // best dense GEMM rate available on the device
  std::string gflops_how;
};

Ceilings measure_ceilings(Device& device);

// Median of the times of `reps` calls after `warmup` calls; repeats until min_seconds is spent.
double median_seconds(const std::function<void()>& fn, int warmup, int min_reps, double min_seconds);

}  // namespace ding::bench
