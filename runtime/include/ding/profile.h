// Profiler: per-op call count, time, FLOPs and bytes. Attach one to a Stream to record.
// Timing synchronizes the stream around each op, so it measures the op alone and is meant for
// benchmarks and diagnosis, not for production serving.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace ding {

class Stream;

struct Cost {
  double flops = 0;  // floating-point operations (a fused multiply-add counts 2)
  double bytes = 0;  // bytes that must cross the memory bus at least once
};

struct OpStats {
  int64_t calls = 0;
  double seconds = 0;
  double flops = 0;
  double bytes = 0;
};

class Profiler {
 public:
  // How calls are counted together: by op, or by op and the bytes a call moves (three significant
  // digits), so that calls of one op on different shapes, such as a layer's four products, stand
  // apart (and a decode step's attention by its context, which grows by a row a step).
  enum class Grouping { op, op_and_bytes };
  explicit Profiler(Grouping grouping = Grouping::op) : grouping_(grouping) {}

  void record(const std::string& op, double seconds, const Cost& cost);
  const std::map<std::string, OpStats>& stats() const { return stats_; }
  void clear() { stats_.clear(); }
  std::string report() const;  // a table: op, calls, ms, GFLOP/s, GB/s

 private:
  Grouping grouping_;
  std::map<std::string, OpStats> stats_;  // by op, or by "op (N MB)" (op_and_bytes)
};

// Records one op into stream.profiler (when set) for the scope's lifetime.
class ProfileScope {
 public:
  ProfileScope(Stream& stream, const char* op, const Cost& cost);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  Stream& stream_;
  const char* op_;
  Cost cost_;
  int64_t start_ns_ = 0;
};

}  // namespace ding
