// A GPU tuning (ding/gpu.h) changed for the length of one test: the test run's own, read from the
// environment as every ding program reads it (tools/gpu_tuning.h), is restored when the scope ends,
// also when an assertion leaves early.
#pragma once
#include <functional>
#include <optional>

#include "ding/device.h"
#include "ding/gpu.h"
#include "tools/gpu_tuning.h"

namespace ding::testing {

template <class Tuning>
struct TuningAccess;
template <>
struct TuningAccess<gpu::MatmulTuning> {
  static std::optional<gpu::MatmulTuning> from_environment() { return tools::matmul_tuning_from_environment(); }
  static void set(Device& device, const gpu::MatmulTuning& t) { gpu::set_matmul_tuning(device, t); }
};
template <>
struct TuningAccess<gpu::OpTuning> {
  static std::optional<gpu::OpTuning> from_environment() { return tools::op_tuning_from_environment(); }
  static void set(Device& device, const gpu::OpTuning& t) { gpu::set_op_tuning(device, t); }
};

template <class Tuning>
class ScopedGpuTuning {
 public:
  explicit ScopedGpuTuning(Device& device)
      : device_(device), run_(TuningAccess<Tuning>::from_environment().value_or(Tuning{})) {}
  ~ScopedGpuTuning() { TuningAccess<Tuning>::set(device_, run_); }
  ScopedGpuTuning(const ScopedGpuTuning&) = delete;
  ScopedGpuTuning& operator=(const ScopedGpuTuning&) = delete;

  // The test run's tuning, to start a variation from.
  const Tuning& run_tuning() const { return run_; }
  void set(const Tuning& tuning) const { TuningAccess<Tuning>::set(device_, tuning); }
  // What selects the run's tuning with one field changed (a configuration of tests/ops/configurations.h).
  template <class T>
  std::function<void()> with(T Tuning::*field, T value) const {
    return [this, field, value] {
      Tuning t = run_;
      t.*field = value;
      set(t);
    };
  }

 private:
  Device& device_;
  Tuning run_;
};

}  // namespace ding::testing
