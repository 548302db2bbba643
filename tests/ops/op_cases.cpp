#include "op_cases.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace ding::testing {

CaseRun::CaseRun(Device& device_, uint64_t seed) : device(device_), stream(device_.default_stream()), rng(seed) {}

namespace {

// Uniform in [0, 1) from the top 53 bits of one draw. The standard distributions go through
// std::generate_canonical, which in libstdc++ takes a long-double logarithm per value: that was
// half of the largest cases' time (10^8 inputs), and most of it under the sanitizers.
double canonical(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1p-53; }

void to_bytes(DType dtype, const std::vector<double>& v, std::vector<uint8_t>& bytes) {
  bytes.resize(v.size() * dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) store_element(bytes.data(), dtype, int64_t(i), v[i]);
}

}  // namespace

Tensor CaseRun::upload_values(DType dtype, std::initializer_list<int64_t> shape, const std::vector<double>& v) {
  Tensor t = Tensor::view(nullptr, &device, dtype, shape);
  if (size_t(t.numel()) != v.size())
    throw Error(ErrorCode::internal, "case builds " + t.shape_str() + " from " + std::to_string(v.size()) + " values");
  buffers_.push_back(device.alloc(t.nbytes()));
  t.data = buffers_.back().data();
  std::vector<uint8_t> bytes;
  to_bytes(dtype, v, bytes);
  upload(stream, t, bytes.data(), bytes.size());
  return t;
}

Tensor CaseRun::uniform(DType dtype, std::initializer_list<int64_t> shape, double lo, double hi) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = lo + (hi - lo) * canonical(rng);
  return upload_values(dtype, shape, v);
}

Tensor CaseRun::quantized(DType dtype, std::initializer_list<int64_t> shape, double stddev) {
  const bool i8 = dtype == DType::i8;
  Tensor w = i8 ? uniform(dtype, shape, -127.0, 127.0) : normal(dtype, shape, 1.0);
  const int64_t rows = w.numel() / w.dim(-1);
  const double spread = i8 ? 127.0 / std::sqrt(3.0) : 1.0;  // the values' own standard deviation
  w.scales = uniform(DType::f32, {rows}, 0.5 * stddev / spread, 1.5 * stddev / spread).ptr<float>();
  return w;
}

Tensor CaseRun::normal(DType dtype, std::initializer_list<int64_t> shape, double stddev) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  // Box–Muller: a pair of N(0, 1) values from two uniforms (u1 in (0, 1], so the log is finite).
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); i += 2) {
    const double r = stddev * std::sqrt(-2.0 * std::log(1.0 - canonical(rng)));
    const double theta = 6.283185307179586 * canonical(rng);
    v[i] = r * std::cos(theta);
    if (i + 1 < v.size()) v[i + 1] = r * std::sin(theta);
  }
  return upload_values(dtype, shape, v);
}

Tensor CaseRun::values(DType dtype, std::initializer_list<int64_t> shape, const std::vector<double>& v) {
  return upload_values(dtype, shape, v);
}

Tensor CaseRun::ints(std::initializer_list<int64_t> shape, const std::vector<int32_t>& v) {
  return upload_values(DType::i32, shape, std::vector<double>(v.begin(), v.end()));
}

Tensor CaseRun::random_ints(std::initializer_list<int64_t> shape, int32_t lo, int32_t hi_inclusive) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::uniform_int_distribution<int32_t> dist(lo, hi_inclusive);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = dist(rng);
  return ints(shape, v);
}

Tensor CaseRun::output(const char* name, DType dtype, std::initializer_list<int64_t> shape, Compare compare) {
  Tensor t = Tensor::view(nullptr, &device, dtype, shape);
  buffers_.push_back(device.alloc(t.nbytes()));
  t.data = buffers_.back().data();
  outputs_.push_back({name, t, compare});
  return t;
}

Tensor CaseRun::inout(const char* name, DType dtype, std::initializer_list<int64_t> shape, double stddev,
                      Compare compare) {
  Tensor t = normal(dtype, shape, stddev);
  inouts_.push_back({t, read(t)});
  outputs_.push_back({name, t, compare});
  return t;
}

Workspace& CaseRun::workspace(size_t bytes) {
  workspace_ = std::make_unique<Workspace>(device, bytes);
  return *workspace_;
}

size_t CaseRun::allocated_bytes() const {
  size_t total = workspace_ ? workspace_->capacity() : 0;
  for (const Buffer& b : buffers_) total += b.size();
  return total;
}

void CaseRun::poison_outputs() {
  for (const CaseOutput& o : outputs_) {
    // 0xff.. is a NaN in f32, f16 and bf16; in i32 it is -1, so use 0x80000000 (INT32_MIN).
    if (o.tensor.dtype == DType::i32) {
      std::vector<int32_t> poison(size_t(o.tensor.numel()), INT32_MIN);
      upload(stream, o.tensor, poison.data(), o.tensor.nbytes());
    } else {
      device.fill_bytes(stream, o.tensor.data, 0xff, o.tensor.nbytes());
    }
  }
  for (auto& [t, initial] : inouts_) {
    std::vector<uint8_t> bytes;
    to_bytes(t.dtype, initial, bytes);
    upload(stream, t, bytes.data(), bytes.size());
  }
  stream.synchronize();
}

std::vector<double> CaseRun::read(const Tensor& t) const {
  std::vector<uint8_t> bytes(t.nbytes());
  download(stream, bytes.data(), t, bytes.size());
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_element(bytes.data(), t.dtype, int64_t(i));
  return v;
}

uint64_t test_seed() {
  if (const char* s = std::getenv("DING_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

double nmse(const std::vector<double>& actual, const std::vector<double>& reference) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double d = actual[i] - reference[i];
    err += d * d;
    ref += reference[i] * reference[i];
  }
  return ref > 0 ? err / ref : err;
}

double rounding_nmse(DType dtype) {
  // Relative rounding error is uniform in ±ulp/2 with ulp = 2^-(mantissa bits): variance ulp²/12.
  switch (dtype) {
    case DType::f32: return std::ldexp(1.0, -46) / 12;
    case DType::f16: return std::ldexp(1.0, -20) / 12;
    case DType::bf16: return std::ldexp(1.0, -14) / 12;
    case DType::f8e4m3: return std::ldexp(1.0, -6) / 12;
    default: return 0;
  }
}

Tensor unit_heads(CaseRun& run, DType dtype, int64_t B, int64_t T, int64_t H, int64_t D, bool views) {
  const int64_t pad = views ? 6 : 0, offset = pad / 2, width = D + pad, rows = B * T * H;
  std::normal_distribution<double> normal;
  std::vector<double> v(size_t(rows * width));
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (int64_t d = 0; d < width; ++d) v[size_t(r * width + d)] = normal(run.rng);
    for (int64_t d = 0; d < D; ++d) sq += std::pow(v[size_t(r * width + offset + d)], 2);
    for (int64_t d = 0; d < D; ++d) v[size_t(r * width + offset + d)] /= std::sqrt(sq);
  }
  const Tensor t = run.values(dtype, {B, T, H, width}, v);
  return views ? t.slice(3, offset, offset + D) : t;
}

double flip_nmse(DType out, int64_t elements, double peak, int flips) {
  return flips * 12.0 * rounding_nmse(out) * std::min(1.0, peak / double(std::max<int64_t>(elements, 1)));
}

bool backend_must_be_complete(std::string_view backend) {
  return backend == "ref" || backend == "cpu" || backend == "cuda" || backend == "hip" || backend == "kokkos";
}

const std::vector<OpCase>& all_op_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> all;
    for (auto family : {copy_cases, matmul_cases, softmax_cases, norm_cases, activation_cases, embedding_cases, rope_cases,
                        attention_cases, conv_cases, delta_rule_cases, linear_attention_cases, mla_cases, moe_cases, sampling_cases}) {
      auto more = family();
      all.insert(all.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
    }
    return all;
  }();
  return cases;
}

}  // namespace ding::testing
