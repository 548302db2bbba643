#include "ceilings.h"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ding/ops/ops.h"

namespace ding::bench {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int host_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// STREAM triad a[i] = b[i] + s·c[i] on f32 arrays far larger than any cache. Counted as
// STREAM counts it: 12 bytes per element (two reads, one write).
double host_triad_gbs(size_t elements, std::string& how) {
  std::vector<float> a(elements), b(elements), c(elements);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < elements; ++i) {  // first touch by the thread that streams it later
    a[i] = 0.0f;
    b[i] = 1.0f;
    c[i] = 2.0f;
  }
  const float s = 3.0f;
  const double seconds = time_calls(
      [&] {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < elements; ++i) a[i] = b[i] + s * c[i];
      },
      1, 10, 1.0).best;
  how = fmt::format("STREAM triad, {} threads, 3 x {} MiB f32", host_threads(), elements * 4 >> 20);
  return 12.0 * double(elements) / seconds * 1e-9;
}

// Eigen's f32 GEMM on square matrices: the best host GEMM we link, the compute ceiling.
double host_gemm_gflops(int n, std::string& how) {
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n), c(n, n);
  const double seconds = time_calls([&] { c.noalias() = a * b; }, 1, 5, 1.0).best;
  how = fmt::format("Eigen f32 GEMM {}^3, {} threads", n, host_threads());
  return 2.0 * double(n) * n * n / seconds * 1e-9;
}

// A device-to-device copy: read + write of every byte.
double device_copy_gbs(Device& device, size_t bytes, std::string& how) {
  Buffer src = device.alloc(bytes), dst = device.alloc(bytes);
  Stream& stream = device.default_stream();
  device.fill_bytes(stream, src.data(), 1, bytes);
  const double seconds =
      time_stream_calls(stream, [&] { device.copy_within(stream, dst.data(), src.data(), bytes); }, 2, 10, 0.3).best;
  how = fmt::format("device copy of {} MiB", bytes >> 20);
  return 2.0 * double(bytes) / seconds * 1e-9;
}

// ding's own bf16 matmul at a large square shape: the best GEMM the device offers through ding.
double device_gemm_gflops(Device& device, int n, std::string& how) {
  Buffer x = device.alloc(size_t(n) * n * 2), w = device.alloc(size_t(n) * n * 2), y = device.alloc(size_t(n) * n * 2);
  Stream& stream = device.default_stream();
  for (Buffer* b : {&x, &w}) device.fill_bytes(stream, b->data(), 0x3c, b->size());  // bf16 ≈ 0.0115
  const Tensor tx = x.as(DType::bf16, {n, n}), tw = w.as(DType::bf16, {n, n}), ty = y.as(DType::bf16, {n, n});
  const double seconds = time_stream_calls(stream, [&] { ops::matmul(stream, ty, tx, tw); }, 2, 5, 0.5).best;
  how = fmt::format("ding bf16 matmul {}^3", n);
  return 2.0 * double(n) * n * n / seconds * 1e-9;
}

}  // namespace

namespace {

// Calls `one` (which runs the work once and returns its seconds) after `warmup` untimed calls,
// at least min_reps times and until min_seconds of wall time are spent.
Timing repeat_timed(const std::function<double()>& one, int warmup, int min_reps, double min_seconds) {
  for (int i = 0; i < warmup; ++i) one();
  std::vector<double> times;
  const double start = now_seconds();
  while (int(times.size()) < min_reps || (now_seconds() - start < min_seconds && times.size() < 1000))
    times.push_back(one());
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.front()};
}

}  // namespace

Timing time_calls(const std::function<void()>& fn, int warmup, int min_reps, double min_seconds) {
  return repeat_timed(
      [&] {
        const double t0 = now_seconds();
        fn();
        return now_seconds() - t0;
      },
      warmup, min_reps, min_seconds);
}

Timing time_stream_calls(Stream& stream, const std::function<void()>& enqueue, int warmup, int min_reps,
                         double min_seconds, bool recorded, int min_calls) {
  const std::unique_ptr<StreamTimer> timer = stream.make_timer();
  // Calls back to back, as a model issues them: a batch of them between the timer's marks, so
  // that a short call is not charged the launch latency of an idle device. The batch is sized
  // from one call to about 200 µs.
  auto timed_batch = [&](int calls) {
    timer->start();
    for (int i = 0; i < calls; ++i) enqueue();
    timer->stop();
    return timer->seconds();
  };
  const double one = timed_batch(1);
  const int calls = int(std::clamp(std::ceil(200e-6 / std::max(one, 1e-9)), 1.0, 64.0));
  const int recorded_calls = std::max(calls, min_calls);
  std::unique_ptr<Graph> graph;
  if (recorded && stream.supports_graphs()) {
    // The batch recorded once and replayed: the device's time for the calls, without the host's
    // per-call work (argument checks, launch API), which a kernel of a few microseconds would
    // otherwise wait for. A decode step runs its kernels the same way.
    for (int i = 0; i < warmup; ++i) enqueue();  // scratch reaches its size before recording
    stream.begin_capture();
    try {
      for (int i = 0; i < recorded_calls; ++i) enqueue();
      graph = stream.end_capture();
    } catch (const Error&) {  // work that cannot be recorded: timed as enqueued, below
      try {
        stream.end_capture();  // leave the stream usable; the partial recording is dropped
      } catch (const Error&) {
      }
    }
  }
  if (graph)
    return repeat_timed(
        [&] {
          timer->start();
          graph->replay(stream);
          timer->stop();
          return timer->seconds() / recorded_calls;
        },
        warmup, min_reps, min_seconds);
  return repeat_timed([&] { return timed_batch(calls) / calls; }, warmup, min_reps, min_seconds);
}

Ceilings measure_ceilings(Device& device) {
  Ceilings c;
  if (device.caps().host_accessible) {
    c.bandwidth_gbs = host_triad_gbs(size_t(64) << 20, c.bandwidth_how);
    c.gflops = host_gemm_gflops(2048, c.gflops_how);
  } else {
    c.bandwidth_gbs = device_copy_gbs(device, size_t(1) << 30, c.bandwidth_how);
    c.gflops = device_gemm_gflops(device, 8192, c.gflops_how);
  }
  return c;
}

}  // namespace ding::bench
