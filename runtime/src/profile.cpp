#include "ding/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "ding/device.h"

namespace ding {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void Profiler::record(const std::string& op, double seconds, const Cost& cost) {
  OpStats& s = grouping_ == Grouping::op ? stats_[op] : stats_[fmt::format("{} ({:.3g} MB)", op, cost.bytes * 1e-6)];
  s.calls += 1;
  s.seconds += seconds;
  s.flops += cost.flops;
  s.bytes += cost.bytes;
}

std::string Profiler::report() const {
  size_t width = 20;
  for (const auto& [op, s] : stats_) width = std::max(width, op.size());
  std::string out = fmt::format("{:<{}} {:>8} {:>12} {:>10} {:>10}\n", "op", width, "calls", "total ms", "GFLOP/s", "GB/s");
  for (const auto& [op, s] : stats_) {
    const double t = s.seconds > 0 ? s.seconds : 1e-30;
    out += fmt::format("{:<{}} {:>8} {:>12.3f} {:>10.2f} {:>10.2f}\n", op, width, s.calls, s.seconds * 1e3,
                       s.flops / t * 1e-9, s.bytes / t * 1e-9);
  }
  return out;
}

ProfileScope::ProfileScope(Stream& stream, const char* op, const Cost& cost) : stream_(stream), op_(op), cost_(cost) {
  if (stream_.profiler) {
    stream_.synchronize();
    start_ns_ = now_ns();
  }
}

ProfileScope::~ProfileScope() {
  if (stream_.profiler) {
    stream_.synchronize();
    stream_.profiler->record(op_, double(now_ns() - start_ns_) * 1e-9, cost_);
  }
}

}  // namespace ding
