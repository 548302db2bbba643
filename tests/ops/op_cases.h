// Op cases: the shapes and parameters every op is exercised with. The parity tests run each
// case on the reference backend and on every other backend and compare; ding-bench runs the
// same cases in perf mode. A case builds its tensors on whatever device it is given from a
// seeded generator, so two devices given the same seed see identical inputs.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "ding/ding.h"

namespace ding::testing {

// How a case's output is judged against the reference.
struct Compare {
  enum Kind { nmse, exact } kind = nmse;
  int64_t allowed_mismatches = 0;  // exact only: elements that may differ (with the reason in the case)
};

// One output of a case, read back to the host for comparison.
struct CaseOutput {
  std::string name;
  Tensor tensor;
  Compare compare;
};

// A case instantiated on one device: owns its buffers, knows how to run the op.
class CaseRun {
 public:
  CaseRun(Device& device, uint64_t seed);

  Device& device;
  Stream& stream;
  std::mt19937_64 rng;

  // Inputs. Values are generated on the host in double, rounded to `dtype` and uploaded.
  Tensor uniform(DType dtype, std::initializer_list<int64_t> shape, double lo = -1.0, double hi = 1.0);
  Tensor normal(DType dtype, std::initializer_list<int64_t> shape, double stddev = 1.0);
  // A quantized matrix weight (i8, or f8e4m3: ops::quantized_weight) of `shape` [..., K] with one
  // f32 scale per row (Tensor::scales, every row in order): i8 integers over the whole range,
  // E4M3 normal values rounded to it, row scales in [0.5, 1.5] × what brings a row's values to a
  // spread of `stddev`.
  Tensor quantized(DType dtype, std::initializer_list<int64_t> shape, double stddev);
  Tensor values(DType dtype, std::initializer_list<int64_t> shape, const std::vector<double>& v);
  Tensor ints(std::initializer_list<int64_t> shape, const std::vector<int32_t>& v);
  Tensor random_ints(std::initializer_list<int64_t> shape, int32_t lo, int32_t hi_inclusive);
  // Outputs: poisoned (NaN for floats, 0x80000000 for i32) before each run; compared after.
  Tensor output(const char* name, DType dtype, std::initializer_list<int64_t> shape, Compare compare = {});
  // An input that the op also writes (in-place ops): filled like `normal`, compared after, and
  // restored to its initial values before each run so runs are repeatable.
  Tensor inout(const char* name, DType dtype, std::initializer_list<int64_t> shape, double stddev = 1.0,
               Compare compare = {});
  // Device scratch that is neither compared nor initialised (e.g. a workspace).
  Workspace& workspace(size_t bytes);

  // Set by the case: launches the op once on `stream`; and the op's cost for the bench.
  std::function<void(Stream&)> launch;
  Cost cost;
  std::string note;  // optional: a choice the case made on this device (a chunk size), printed by ding-bench

  void poison_outputs();  // poison outputs, restore in-out tensors
  void run() {
    launch(stream);
    stream.synchronize();
  }
  const std::vector<CaseOutput>& outputs() const { return outputs_; }
  size_t allocated_bytes() const;  // device memory this instance holds
  std::vector<double> read(const Tensor& t) const;  // any dtype → f64 on the host

 private:
  Tensor upload_values(DType dtype, std::initializer_list<int64_t> shape, const std::vector<double>& v);
  std::vector<Buffer> buffers_;
  std::vector<CaseOutput> outputs_;
  std::vector<std::pair<Tensor, std::vector<double>>> inouts_;
  std::unique_ptr<Workspace> workspace_;
};

struct OpCase {
  std::string op;        // the op's name in op_list.h
  std::string name;      // op + parameters, unique: "matmul/M17_N33_K64_xbf16_wbf16_bias"
  double tolerance = 0;  // NMSE bound against the reference
  std::string reason;    // why this tolerance (precision of the dtype, accumulation order, ...)
  std::function<void(CaseRun&)> build;  // make tensors on run.device, set run.launch and run.cost
  bool in_tests = true;                 // small enough for the parity suite on the reference
  bool in_bench = true;                 // worth timing in ding-bench
  // Where the op lets a backend round an input further (ops/matmul.h: x to E4M3 beside E4M3
  // weights), the bound for a run that takes no such rounding; 0: `tolerance` either way.
  double tight_tolerance = 0;
};

// Per-family case lists (tests/ops/<family>_cases.cpp) and all of them in op_list order.
std::vector<OpCase> copy_cases();
std::vector<OpCase> matmul_cases();
std::vector<OpCase> norm_cases();
std::vector<OpCase> activation_cases();
std::vector<OpCase> softmax_cases();
std::vector<OpCase> embedding_cases();
std::vector<OpCase> rope_cases();
std::vector<OpCase> attention_cases();
std::vector<OpCase> conv_cases();
std::vector<OpCase> delta_rule_cases();
std::vector<OpCase> linear_attention_cases();
std::vector<OpCase> mla_cases();
std::vector<OpCase> moe_cases();
std::vector<OpCase> sampling_cases();
const std::vector<OpCase>& all_op_cases();
// Whether `backend` must implement every op for every valid call whenever it is compiled in (the
// reference, cpu, cuda, hip and kokkos); other backends may be partial (ops/kernels.h), and their parity
// cases for what they lack are skipped with the backend's reason.
bool backend_must_be_complete(std::string_view backend);

// The tolerance of cases whose outputs are all compared exactly (Compare::exact): unused by the
// comparison, but every case states one.
inline constexpr double kExactTolerance = 1e-30;

// The seed of a test's random inputs: fresh each run, or DING_TEST_SEED's to repeat one (the
// tests print the seed they used).
uint64_t test_seed();

// Normalised mean squared error Σ(a-b)² / Σb², with b the reference (Σb² = 0 → Σ(a-b)²).
double nmse(const std::vector<double>& actual, const std::vector<double>& reference);

// The NMSE a dtype's rounding alone produces on unit-scale data: ≈ ulp²/12 relative.
double rounding_nmse(DType dtype);

// Queries or keys [B, T, H, D] whose rows have norm 1 (Gated DeltaNet's L2-normalised q and k);
// with `views`, a slice of a wider [B, T, H, D + 6] product whose other columns are random too.
Tensor unit_heads(CaseRun& run, DType dtype, int64_t B, int64_t T, int64_t H, int64_t D, bool views);

// What rounding flips cost. A kernel that computes in f32 and rounds to a 16-bit (or f8) output
// lands on the other neighbour of the reference's rounded value wherever its f32 result sits
// within its own error of a rounding midpoint: one step, at most one ulp ≤ 2⁻ᵖ|y| (p mantissa
// bits), i.e. a squared error ≤ 12·rounding_nmse·y². `flips` such outputs, each with y² up to
// `peak` times the mean square of the `elements` outputs, add at most
// flips · 12·rounding_nmse · min(1, peak / elements) to the NMSE: the whole dtype's rounding
// NMSE ×12 in a case of one element, nothing that matters in a case of thousands.
double flip_nmse(DType out, int64_t elements, double peak, int flips = 1);

// The NMSE bound of a product whose outputs are f32 sums of K products (swiglu: silu(g)·u of two
// such sums) rounded to `out`, over `elements` outputs, and the reason that goes with it
// (matmul_tolerance.cpp derives both).
double matmul_tolerance(DType out, int64_t K, int64_t elements, bool swiglu = false);
std::string matmul_reason(DType out, int64_t K, bool swiglu = false);
// What rounding x's rows to E4M3 may add (16-bit x beside E4M3 weights over many rows, ops/matmul.h),
// and why.
double e4m3_x_nmse(bool swiglu = false);
std::string e4m3_x_reason(bool swiglu = false);
// What rounding x's rows to integers may add (16-bit x beside i8 weights, ops/matmul.h), and why.
double int16_x_nmse(int64_t K, bool swiglu = false);
std::string int16_x_reason(int64_t K, bool swiglu = false);

}  // namespace ding::testing
