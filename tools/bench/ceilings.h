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

struct Timing {
  double median = 0;  // seconds per call: what a case reports
  double best = 0;    // the fastest call: what a ceiling reports (the most the hardware gave)
};

// Times calls of fn after `warmup` untimed ones, at least min_reps and until min_seconds is spent.
Timing time_calls(const std::function<void()>& fn, int warmup, int min_reps, double min_seconds);
// The same for work enqueued on a stream, timed by the stream's own clock (events) over batches of
// back-to-back calls (the time per call is the batch's over its size). `recorded`: where the
// stream records graphs, a batch of at least `min_calls` calls is recorded once and its replays
// are timed.
Timing time_stream_calls(Stream& stream, const std::function<void()>& enqueue, int warmup, int min_reps,
                         double min_seconds, bool recorded = false, int min_calls = 1);

}  // namespace ding::bench
