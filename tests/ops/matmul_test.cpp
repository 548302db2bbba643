// matmul and matmul_chain: the reference against facts known without running it (identity
// weights, a product worked by hand, GELU's limits, swiglu as the two halves then the swiglu op),
// the CPU's swiglu for very negative gates, the chain's chunk-size rule, and every rejected input
// through the public front end.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "ding/ding.h"
#include "ding/gpu.h"
#include "configurations.h"
#include "expect_error.h"
#include "gpu_tuning_scope.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

// Owns the buffers of one test's tensors on one device.
struct Tensors {
  explicit Tensors(Device& d) : device(d), stream(d.default_stream()) {}
  Device& device;
  Stream& stream;
  std::vector<Buffer> buffers;

  Tensor make(DType dtype, std::initializer_list<int64_t> shape) {
    Tensor t = Tensor::view(nullptr, &device, dtype, shape);
    buffers.push_back(device.alloc(std::max<size_t>(t.nbytes(), 1)));
    t.data = buffers.back().data();
    return t;
  }
  Tensor f32(std::initializer_list<int64_t> shape, const std::vector<float>& values) {
    Tensor t = make(DType::f32, shape);
    upload(stream, t, values.data(), values.size() * sizeof(float));
    return t;
  }
  Tensor f32(std::initializer_list<int64_t> shape) { return make(DType::f32, shape); }
  // An 8-bit tensor (i8 or f8e4m3) of the given bytes.
  Tensor bytes(DType dtype, std::initializer_list<int64_t> shape, const std::vector<uint8_t>& values) {
    Tensor t = make(dtype, shape);
    upload(stream, t, values.data(), values.size());
    return t;
  }
  std::vector<float> read(const Tensor& t) {
    std::vector<float> v(size_t(t.numel()));
    download(stream, v.data(), t, t.nbytes());
    stream.synchronize();
    return v;
  }
};

std::vector<float> identity(int64_t n) {
  std::vector<float> v(size_t(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) v[size_t(i * n + i)] = 1.0f;
  return v;
}

std::vector<float> counting(int64_t n, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = scale * float(i % 13 - 6);
  return v;
}

// ---- reference sanity ----

TEST(MatmulReference, IdentityWeightsReturnX_M3_K5) {
  Tensors t(Device::open("ref"));
  const std::vector<float> xs = counting(15, 0.25f);
  const Tensor x = t.f32({3, 5}, xs), w = t.f32({5, 5}, identity(5)), out = t.f32({3, 5});
  ops::matmul(t.stream, out, x, w);
  EXPECT_EQ(t.read(out), xs);
}

TEST(MatmulReference, HandWorkedProduct_M2_N2_K2) {
  // [1 2; 3 4] · [5 6; 7 8]ᵀ = [1·5+2·6, 1·7+2·8; 3·5+4·6, 3·7+4·8]
  Tensors t(Device::open("ref"));
  const Tensor x = t.f32({2, 2}, {1, 2, 3, 4}), w = t.f32({2, 2}, {5, 6, 7, 8}), out = t.f32({2, 2});
  ops::matmul(t.stream, out, x, w);
  EXPECT_EQ(t.read(out), (std::vector<float>{17, 23, 39, 53}));
}

TEST(MatmulReference, BiasGeluResidualInPlace_M1_N4_K1) {
  // x·wᵀ = 0, so out = gelu(bias) + out: GELU(0) = 0, GELU(v) → v for large v, → 0 for large -v,
  // and GELU(1) = 0.5(1 + tanh(√(2/π)·1.044715)) from the tanh formula.
  Tensors t(Device::open("ref"));
  const Tensor x = t.f32({1, 1}, {0}), w = t.f32({4, 1}, {1, 1, 1, 1});
  const Tensor bias = t.f32({4}, {0, 1, 20, -20});
  const Tensor out = t.f32({1, 4}, {10, 10, 10, 10});
  ops::matmul(t.stream, out, x, w, {.bias = bias, .activation = ops::Activation::gelu_tanh, .residual = out});
  const double gelu1 = 0.5 * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * 1.044715));
  const std::vector<float> got = t.read(out);
  EXPECT_FLOAT_EQ(got[0], 10.0f);
  EXPECT_FLOAT_EQ(got[1], float(10 + gelu1));
  EXPECT_FLOAT_EQ(got[2], 30.0f);
  EXPECT_FLOAT_EQ(got[3], 10.0f);
}

TEST(MatmulReference, SwigluHandWorked_M1_N2_K1) {
  // x·wᵀ = w for x = [1]: gate sums (0, 2) from rows 0 and 1, up sums (3, -1) from rows 2 and 3;
  // out = silu(g)·u + out, silu(0) = 0 and silu(2) = 2σ(2) = 2 / (1 + e⁻²).
  Tensors t(Device::open("ref"));
  const Tensor x = t.f32({1, 1}, {1}), w = t.f32({4, 1}, {0, 2, 3, -1});
  const Tensor out = t.f32({1, 2}, {10, 10});
  ops::matmul(t.stream, out, x, w, {.activation = ops::Activation::swiglu, .residual = out});
  const std::vector<float> got = t.read(out);
  EXPECT_FLOAT_EQ(got[0], 10.0f);
  EXPECT_FLOAT_EQ(got[1], float(10 - 2 / (1 + std::exp(-2.0))));
}

// swiglu means "the two halves of w as two products, then the swiglu op": the reference's
// activation op computes the second independently.
TEST(MatmulReference, SwigluIsTheSwigluOpOnTheTwoHalves_M3_N4_K5) {
  Tensors t(Device::open("ref"));
  const Tensor x = t.f32({3, 5}, counting(15, 0.25f)), w = t.f32({8, 5}, counting(40, 0.1f));
  const Tensor bias = t.f32({8}, counting(8, 0.3f));
  const Tensor fused = t.f32({3, 4}), gate = t.f32({3, 4}), up = t.f32({3, 4}), separate = t.f32({3, 4});
  ops::matmul(t.stream, fused, x, w, {.bias = bias, .activation = ops::Activation::swiglu});
  ops::matmul(t.stream, gate, x, w.slice(0, 0, 4), {.bias = bias.slice(0, 0, 4)});
  ops::matmul(t.stream, up, x, w.slice(0, 4, 8), {.bias = bias.slice(0, 4, 8)});
  ops::swiglu(t.stream, separate, gate, up);
  const std::vector<float> got = t.read(fused), want = t.read(separate);
  // The separate path rounds gate and up to f32 before the activation: a few ulp.
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * (1 + std::fabs(want[i]))) << "element " << i;
}

// The prologue means "the norm op, then the product": with identity weights the product returns
// norm(x) itself, which the reference layer_norm computes independently.
TEST(MatmulReference, NormPrologueIsTheNormOpThenTheProduct_M2_K4) {
  Tensors t(Device::open("ref"));
  const Tensor x = t.f32({2, 4}, {1, 2, 3, 10, -4, 0, 4, 8}), w = t.f32({4, 4}, identity(4));
  const Tensor g = t.f32({4}, {1, 2, 0.5f, -1}), b = t.f32({4}, {0, 1, 0, -2});
  const Tensor fused = t.f32({2, 4}), h = t.f32({2, 4});
  ops::matmul(t.stream, fused, x, w, {.norm = {.kind = ops::NormKind::layer_norm, .weight = g, .bias = b, .eps = 1e-5f}});
  ops::layer_norm(t.stream, h, x, g, {.eps = 1e-5f, .bias = b});
  const std::vector<float> got = t.read(fused), want = t.read(h);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << "element " << i;
  // And it is not x: the row of x = (1, 2, 3, 10) has mean 4, so norm(x)[0] is negative.
  EXPECT_LT(got[0], 0.0f);
}

TEST(MatmulReference, BatchedWeightsUseTheirOwnBatch_B2_M1_N1_K2) {
  Tensors t(Device::open("ref"));
  const Tensor x = t.f32({2, 1, 2}, {1, 1, 1, 1}), w = t.f32({2, 1, 2}, {1, 2, 10, 20}), out = t.f32({2, 1, 1});
  ops::matmul(t.stream, out, x, w);
  EXPECT_EQ(t.read(out), (std::vector<float>{3, 30}));
}

// w = q·scale per row: q = [[1, −2], [127, 0]] with scales 0.5 and 0.01 applied to x = (3, 1):
// (3 − 2)·0.5 = 0.5 and 381·0.01 = 3.81, on the reference and the cpu, as i8 and as f8e4m3 (1, −2
// and 0 exactly; 127 rounds to 128 in E4M3, so that row is checked through its own value).
TEST(MatmulQuantizedWeights, RowScalesMultiplyTheRowsSums_M1_N2_K2) {
  for (const char* backend : {"ref", "cpu", "kokkos"}) {
    if (!registry::is_available(backend)) continue;
    Tensors t(Device::open(backend));
    const Tensor x = t.f32({1, 2}, {3, 1}), out = t.f32({1, 2}), scales = t.f32({2}, {0.5f, 0.01f});
    Tensor w8 = t.bytes(DType::i8, {2, 2}, {1, uint8_t(int8_t(-2)), 127, 0});
    w8.scales = scales.ptr<float>();
    ops::matmul(t.stream, out, x, w8);
    std::vector<float> got = t.read(out);
    EXPECT_FLOAT_EQ(got[0], 0.5f) << backend;
    EXPECT_NEAR(got[1], 3.81f, 1e-6) << backend;
    Tensor wf8 = t.bytes(DType::f8e4m3, {2, 2}, {f32_to_f8e4m3(1).bits, f32_to_f8e4m3(-2).bits, f32_to_f8e4m3(127).bits,
                                                  f32_to_f8e4m3(0).bits});
    wf8.scales = scales.ptr<float>();
    ops::matmul(t.stream, out, x, wf8);
    got = t.read(out);
    EXPECT_FLOAT_EQ(got[0], 0.5f) << backend;
    EXPECT_NEAR(got[1], 3.0 * f8e4m3_to_f32(f32_to_f8e4m3(127)) * 0.01, 1e-5) << backend;
  }
}

// Every finite E4M3 code as a row of w (43 copies: the CPU GEMV's unrolled loop, its 8-wide step
// and its scalar tail) against x = 1: each sum is 43 times the code's value exactly (a value has
// 4 significant bits), so a widening that mis-places a sign, exponent or subnormal bit shows.
TEST(MatmulQuantizedWeights, EveryE4m3CodeWidensToItsValue_M1_N254_K43) {
  constexpr int64_t K = 43;
  std::vector<uint8_t> codes, w_bytes;
  for (int code = 0; code < 256; ++code)
    if ((code & 0x7f) != 0x7f) codes.push_back(uint8_t(code));  // 0x7f and 0xff are NaN
  for (uint8_t code : codes) w_bytes.insert(w_bytes.end(), K, code);
  const int64_t N = int64_t(codes.size());
  for (const char* backend : {"ref", "cpu", "kokkos"}) {
    if (!registry::is_available(backend)) continue;
    Tensors t(Device::open(backend));
    const Tensor x = t.f32({1, K}, std::vector<float>(size_t(K), 1.0f)), out = t.f32({1, N});
    const Tensor scales = t.f32({N}, std::vector<float>(size_t(N), 1.0f));
    Tensor w = t.bytes(DType::f8e4m3, {N, K}, w_bytes);
    w.scales = scales.ptr<float>();
    ops::matmul(t.stream, out, x, w);
    const std::vector<float> got = t.read(out);
    for (int64_t n = 0; n < N; ++n)
      EXPECT_EQ(got[size_t(n)], float(K) * f8e4m3_to_f32(f8e4m3{codes[size_t(n)]}))
          << backend << ", code 0x" << std::hex << int(codes[size_t(n)]);
  }
}

namespace {

// out[M, N] = x · wᵀ on `backend` for 16-bit x [M, K] and i8 w [N, K] with every row's scale
// `scale`, read back.
std::vector<float> i8_product(const char* backend, const std::vector<f16>& x_bits, int64_t M, int64_t K,
                              const std::vector<uint8_t>& w_bytes, int64_t N, float scale) {
  Tensors t(Device::open(backend));
  Tensor x = t.make(DType::f16, {M, K});
  upload(t.stream, x, x_bits.data(), x_bits.size() * sizeof(f16));
  const Tensor out = t.f32({M, N}), scales = t.f32({N}, std::vector<float>(size_t(N), scale));
  Tensor w = t.bytes(DType::i8, {N, K}, w_bytes);
  w.scales = scales.ptr<float>();
  ops::matmul(t.stream, out, x, w);
  return t.read(out);
}

// The body of the test below for rows of K elements.
void i8_sums_stay_exact(int64_t K) {
  constexpr int64_t N = 3;
  std::vector<uint8_t> w_bytes;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) w_bytes.push_back(uint8_t(int8_t((k + n) % 3 == 0 ? -127 : 127)));
  for (const char* backend : {"ref", "cpu", "kokkos"}) {
    if (!registry::is_available(backend)) continue;
    for (int64_t M : {1, 3, 6}) {
      std::vector<f16> x_bits;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) x_bits.push_back(f32_to_f16(k % 3 == 0 ? -1.0f : 1.0f));
      const std::vector<float> got = i8_product(backend, x_bits, M, K, w_bytes, N, 0.5f);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double want = 0;
          for (int64_t k = 0; k < K; ++k) want += double(int8_t(w_bytes[size_t(n * K + k)])) * (k % 3 == 0 ? -1.0 : 1.0);
          want *= 0.5;
          EXPECT_NEAR(got[size_t(m * N + n)], want, 1e-6 * 127 * 0.5 * K) << backend << ", K " << K << ", M " << M << ", row " << m << ", channel " << n;
        }
    }
  }
}

}  // namespace

// i8 weights of the largest magnitude against 16-bit x of one magnitude (the CPU rounds such x
// to int16: ±32767), signs in a period of 3, shifted by one per channel: channel 0's products
// are all +127 (in int16: 127 · 32767 each), the others' sum to −127 every 3. Channel 0's integer
// sum is past int32 at both lengths (127 · 32767 · K: 2^35 at K = 8260, 2^31.6 at 768), so this
// shows whether the GEMV moves its int32 lanes into f32 before they overflow: at each unroll
// (M = 1, 3 and 6 rows of x take different ones), with a tail of K off every vector width, and
// where one row of x is held in registers (K = 768 on AVX-512 VNNI).
TEST(MatmulQuantizedWeights, I8SumsPastInt32StayExact_M1_M3_M6_N3_K8260_K768) {
  for (int64_t K : {8260, 768})
    i8_sums_stay_exact(K);
}

// A NaN or an infinity in a row of 16-bit x makes every output of that row non-finite, with i8
// weights too, where the CPU rounds x to int16 by the row's largest magnitude: a NaN must not
// drop out of that maximum. Rows held in registers (K = 768) and not (K = 259), one and three rows
// of x, the bad value in the middle row; the other rows stay finite.
TEST(MatmulQuantizedWeights, NonFiniteXGivesNonFiniteRowsWithI8Weights_K768_K259) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()})
    for (int64_t K : {768, 259})
      for (int64_t M : {1, 3})
        for (const char* backend : {"ref", "cpu", "kokkos"}) {
          if (!registry::is_available(backend)) continue;
          const int64_t N = 20, bad_row = M / 2;
          std::mt19937 rng(uint32_t(K + M));
          std::normal_distribution<float> normal;
          std::vector<f16> x_bits(size_t(M * K));
          for (f16& v : x_bits) v = f32_to_f16(normal(rng));
          x_bits[size_t(bad_row * K + K / 2)] = f32_to_f16(bad);
          std::vector<uint8_t> w_bytes(size_t(N * K));
          for (uint8_t& v : w_bytes) v = uint8_t(int8_t(std::uniform_int_distribution<int>(-127, 127)(rng)));
          const std::vector<float> got = i8_product(backend, x_bits, M, K, w_bytes, N, 0.01f);
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n)
              EXPECT_EQ(std::isfinite(got[size_t(m * N + n)]), m != bad_row)
                  << backend << ", x holds " << bad << ", K " << K << ", M " << M << ", row " << m << ", channel " << n;
        }
}

// The GPU's few-rows products go to the tensor-core GEMV or, for small weights, the FMA GEMV
// at one row (MatmulTuning::gemv_mma_min_bytes): every decode-sized parity case (M ≤ 8) through each core
// alone stays within its bound of the reference, so neither core's edges depend on where the size
// rule draws the line.
TEST(MatmulGpu, BothFewRowsCoresTakeEveryDecodeCase) {
  if (!registry::is_available("cuda")) GTEST_SKIP() << "no cuda device here";
  Device& cuda = Device::open("cuda");
  const ScopedGpuTuning<gpu::MatmulTuning> tuning(cuda);
  const uint64_t seed = test_seed();
  SCOPED_TRACE(fmt::format("seed {} (rerun with DING_TEST_SEED={})", seed, seed));
  const std::regex rows_of_x("[/_]M([0-9]+)_");
  int cases = 0;
  for (const OpCase& c : matmul_cases()) {
    std::smatch m;
    if (!c.in_tests || c.op != "matmul" || !std::regex_search(c.name, m, rows_of_x) || std::stoi(m[1]) > 8) continue;
    gpu::MatmulTuning tensor_cores = tuning.run_tuning(), fma = tuning.run_tuning();
    tensor_cores.gemv_mma_min_bytes = 0;
    fma.gemv_mma_min_bytes = std::numeric_limits<int64_t>::max();
    expect_case_under(cuda, c, seed,
                      {{"tensor-core GEMV wherever it fits", [&] { tuning.set(tensor_cores); }}, {"FMA GEMV", [&] { tuning.set(fma); }}},
                      /*same_bits=*/false);
    ++cases;
  }
  EXPECT_GT(cases, 20);
}

// On a GPU, products of 8-bit w with more rows than a GEMV takes widen w to x's 16-bit type a run
// of output columns at a time (MatmulTuning::widen_bytes: here the smallest, 64 columns): runs
// of 64 and a last one of 5, the up half's rows off 16-byte alignment (N·K = 14184 ≡ 8 mod 16),
// bias, residual and scales taken at each run's columns. The cpu computes the same product.
TEST(MatmulGpu, EightBitWeightsWidenedARunOfColumnsAtATime_M40_N197_K72) {
  if (!registry::is_available("cuda")) GTEST_SKIP() << "no cuda device here";
  const int64_t M = 40, N = 197, K = 72;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> x_bits(size_t(M * K));
  for (uint16_t& v : x_bits) v = f32_to_bf16(normal(rng)).bits;
  std::vector<uint8_t> w_bytes(size_t(2 * N * K));
  for (uint8_t& v : w_bytes) v = uint8_t(int8_t(std::uniform_int_distribution<int>(-127, 127)(rng)));
  std::vector<float> scales(size_t(2 * N)), bias(size_t(2 * N)), residual(size_t(M * N));
  for (float& v : scales) v = std::uniform_real_distribution<float>(0.005f, 0.01f)(rng);
  for (float& v : bias) v = normal(rng);
  for (float& v : residual) v = normal(rng);
  Device& cuda = Device::open("cuda");
  const ScopedGpuTuning<gpu::MatmulTuning> tuning(cuda);
  gpu::MatmulTuning smallest = tuning.run_tuning();
  smallest.widen_bytes = 1;
  tuning.set(smallest);
  for (bool swiglu : {false, true}) {
    const int64_t rows = swiglu ? 2 * N : N;
    auto product = [&](Device& device) {
      Tensors t(device);
      Tensor x = t.make(DType::bf16, {M, K});
      upload(t.stream, x, x_bits.data(), x_bits.size() * 2);
      Tensor w = t.bytes(DType::i8, {rows, K}, std::vector<uint8_t>(w_bytes.begin(), w_bytes.begin() + rows * K));
      const Tensor w_scales = t.f32({rows}, std::vector<float>(scales.begin(), scales.begin() + rows));
      w.scales = w_scales.ptr<float>();
      const Tensor out = t.f32({M, N});
      ops::matmul(t.stream, out, x, w,
                  {.bias = t.f32({rows}, std::vector<float>(bias.begin(), bias.begin() + rows)),
                   .activation = swiglu ? ops::Activation::swiglu : ops::Activation::none,
                   .residual = t.f32({M, N}, residual)});
      return t.read(out);
    };
    const std::vector<float> want = product(Device::open("cpu")), got = product(cuda);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4 * (1.0 + std::fabs(want[i]))) << (swiglu ? "swiglu " : "") << "element " << i;
  }
}

// On a GPU, prefill products of 8-bit w read the 8-bit rows: E4M3 w on E4M3 tensor cores with x
// rounded per row where the GPU has them (MatmulTuning::e4m3_mma), else on the 16-bit tensor cores
// widening w in registers; an H100's wgmma core takes a widened copy instead where it fits
// (MatmulTuning::wgmma). Every 8-bit matmul and moe_matmul parity case through each path: x as
// given keeps the tight bound (nothing but f32 sums differ), x rounded the case's bound.
TEST(MatmulGpu, EightBitCasesOnEveryPrefillPath) {
  if (!registry::is_available("cuda")) GTEST_SKIP() << "no cuda device here";
  Device& cuda = Device::open("cuda");
  const ScopedGpuTuning<gpu::MatmulTuning> tuning(cuda);
  const uint64_t seed = test_seed();
  SCOPED_TRACE(fmt::format("seed {} (rerun with DING_TEST_SEED={})", seed, seed));
  std::vector<OpCase> cases = matmul_cases();
  for (OpCase& c : moe_cases()) cases.push_back(std::move(c));
  int count = 0;
  for (const OpCase& c : cases) {
    const bool narrow = c.name.find("_wi8_") != std::string::npos || c.name.find("_wf8e4m3_") != std::string::npos;
    if (!c.in_tests || !narrow) continue;
    std::vector<Configuration> paths;
    for (auto [e4m3, wgmma] : {std::pair{true, true}, {false, false}, {true, false}}) {
      gpu::MatmulTuning t = tuning.run_tuning();
      t.e4m3_mma = e4m3;
      t.wgmma = wgmma && t.wgmma;
      paths.push_back({fmt::format("{}{}", e4m3 ? "E4M3 tensor cores where they fit" : "x as given",
                                   wgmma ? "" : ", no wgmma core (an H100 then runs the RTX 4090's kernels)"),
                       [&tuning, t] { tuning.set(t); }, !e4m3 && c.tight_tolerance > 0 ? c.tight_tolerance : c.tolerance});
    }
    expect_case_under(cuda, c, seed, paths, /*same_bits=*/false);
    ++count;
  }
  EXPECT_GT(count, 30);
}

// Every i8 and E4M3 value through the GPU's prefill GEMM, widened in registers to bf16 and to f16:
// x one-hot (row m picks column m of w), w's rows holding every byte (E4M3's two NaN codes as 0),
// scales 1, so out[m, n] = w[n, m] exactly (decoded here on the host). With x rounded to E4M3 (one
// becomes 448 times a scale of 1/448) the same values come back within f32 rounding.
TEST(MatmulGpu, PrefillWidensEveryEightBitValue_M256_N16_K256) {
  if (!registry::is_available("cuda")) GTEST_SKIP() << "no cuda device here";
  const int64_t M = 256, N = 16, K = 256;
  Device& cuda = Device::open("cuda");
  const ScopedGpuTuning<gpu::MatmulTuning> tuning(cuda);
  for (DType w_type : {DType::i8, DType::f8e4m3})
    for (DType x_type : {DType::bf16, DType::f16}) {
      std::vector<uint8_t> w_bytes(size_t(N * K));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
          const uint8_t code = uint8_t((k + 16 * n) % 256);
          w_bytes[size_t(n * K + k)] = w_type == DType::f8e4m3 && (code & 0x7F) == 0x7F ? 0 : code;
        }
      std::vector<uint16_t> x_bits(size_t(M * K), 0);
      const uint16_t one = x_type == DType::bf16 ? 0x3F80 : 0x3C00;
      for (int64_t m = 0; m < M; ++m) x_bits[size_t(m * K + m)] = one;
      auto product = [&](Device& device) {
        Tensors t(device);
        Tensor x = t.make(x_type, {M, K});
        upload(t.stream, x, x_bits.data(), x_bits.size() * 2);
        Tensor w = t.bytes(w_type, {N, K}, w_bytes);
        const Tensor scales = t.f32({N}, std::vector<float>(size_t(N), 1.0f));
        w.scales = scales.ptr<float>();
        const Tensor out = t.f32({M, N});
        ops::matmul(t.stream, out, x, w);
        return t.read(out);
      };
      std::vector<float> want(size_t(M * N));
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          const uint8_t code = w_bytes[size_t(n * K + m)];
          want[size_t(m * N + n)] = w_type == DType::i8 ? float(int8_t(code)) : f8e4m3_to_f32(f8e4m3{code});
        }
      for (bool e4m3 : {false, true}) {
        if (e4m3 && w_type != DType::f8e4m3) continue;
        gpu::MatmulTuning t = tuning.run_tuning();
        t.e4m3_mma = e4m3;
        t.wgmma = false;  // an H100's wgmma core would take a widened copy of w instead
        tuning.set(t);
        const std::vector<float> got = product(cuda);
        for (size_t i = 0; i < want.size(); ++i) {
          const std::string where = fmt::format("{} x, {} w, element {} (byte {:#04x}){}", dtype_name(x_type),
                                                dtype_name(w_type), i, w_bytes[(i % N) * K + i / N],
                                                e4m3 ? ", x rounded to E4M3" : "");
          if (e4m3)
            ASSERT_NEAR(got[i], want[i], 1e-6 * std::fabs(want[i])) << where;
          else
            ASSERT_EQ(got[i], want[i]) << where;
        }
      }
    }
}

TEST(MatmulChainReference, IdentityFactorsLeaveA0_R4_D3_Chunk1) {
  Tensors t(Device::open("ref"));
  const std::vector<float> a = counting(12);
  const Tensor factors[] = {t.f32({4, 3}, a), t.f32({3, 3}, identity(3)), t.f32({3, 3}, identity(3))};
  const Tensor out = t.f32({4, 3});
  Workspace workspace(t.device, 4096);
  ops::matmul_chain(t.stream, out, factors, 3, workspace, {.chunk_rows = 1});
  EXPECT_EQ(t.read(out), a);
}

TEST(MatmulChainReference, HandWorkedChain_R1_2x2x1) {
  // [1 2] · [1 0; 1 1] · [2; 3] = [3 2] · [2; 3] = 12
  Tensors t(Device::open("ref"));
  const Tensor factors[] = {t.f32({1, 2}, {1, 2}), t.f32({2, 2}, {1, 0, 1, 1}), t.f32({2, 1}, {2, 3})};
  const Tensor out = t.f32({1, 1});
  Workspace workspace(t.device, 4096);
  ops::matmul_chain(t.stream, out, factors, 3, workspace);
  EXPECT_EQ(t.read(out), std::vector<float>{12});
}

TEST(MatmulCpu, IdentityWeightsReturnX_GemvAndGemmRows) {
  Tensors t(Device::open("cpu"));
  for (int64_t M : {1, 3, 6, 7, 40}) {  // both sides of kGemvMaxRows
    const std::vector<float> xs = counting(M * 19, 0.5f);
    const Tensor x = t.f32({M, 19}, xs), w = t.f32({19, 19}, identity(19)), out = t.f32({M, 19});
    ops::matmul(t.stream, out, x, w);
    EXPECT_EQ(t.read(out), xs) << "M = " << M;
  }
}

// silu(g)·u for g ≪ 0 is tiny but must keep its relative accuracy (g / (1 + e^−g) is 0 once
// e^−g saturates in f32): both cores against the formula in double, to 1e-5 relative.
TEST(MatmulCpu, SwigluKeepsRelativeAccuracyForVeryNegativeGates_GemvAndGemmRows) {
  Tensors t(Device::open("cpu"));
  const std::vector<float> gates = {-5, -20, -50, -80, -87, 3, -0.5f, 12, -30};  // 9: a vector of 8 and a tail
  const int64_t N = int64_t(gates.size());
  std::vector<float> w_values = gates;
  for (int64_t j = 0; j < N; ++j) w_values.push_back(0.5f + 0.25f * float(j));  // the up rows
  const Tensor w = t.f32({2 * N, 1}, w_values);
  for (int64_t M : {1, 7}) {  // the gemv core and the gemm core
    const Tensor x = t.f32({M, 1}, std::vector<float>(size_t(M), 1.0f)), out = t.f32({M, N});
    ops::matmul(t.stream, out, x, w, {.activation = ops::Activation::swiglu});
    const std::vector<float> got = t.read(out);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < N; ++j) {
        const double g = gates[size_t(j)], u = w_values[size_t(N + j)], want = g * u / (1 + std::exp(-g));
        EXPECT_NEAR(got[size_t(m * N + j)], want, 1e-5 * std::fabs(want)) << "M " << M << ", g " << g;
      }
  }
}

// ---- chunk size ----

ops::MatmulChainArgs chain_shape(Tensors& t, int64_t R, std::vector<int64_t> dims) {
  ops::MatmulChainArgs a;
  int64_t rows = R;
  for (int64_t d : dims) {
    a.factors[size_t(a.count++)] = Tensor::view(nullptr, &t.device, DType::f32, {rows, d});
    rows = d;
  }
  return a;
}

TEST(MatmulChainChunkRows, FitsHalfTheCacheWithinBounds) {
  Tensors t(Device::open("cpu"));
  for (size_t llc : {size_t(1) << 20, size_t(32) << 20, size_t(256) << 20}) {
    for (int64_t R : {5, 100, 50304}) {
      const ops::MatmulChainArgs a = chain_shape(t, R, {768, 64, 768, 4096});
      const int64_t rows = ops::matmul_chain_chunk_rows(llc, a);
      SCOPED_TRACE("llc " + std::to_string(llc) + ", R " + std::to_string(R) + ", chunk " + std::to_string(rows));
      EXPECT_LE(rows, R);
      EXPECT_GE(rows, std::min<int64_t>(R, 16));
      // The largest chunk whose two f32 intermediates (widest 768) fit in half the cache, unless
      // the 16-row floor or R itself decided.
      const bool floor_or_all = rows == std::min<int64_t>(R, 16) || rows == R;
      if (!floor_or_all) {
        EXPECT_LE(ops::matmul_chain_scratch_bytes(a, rows), llc / 2);
        EXPECT_GT(ops::matmul_chain_scratch_bytes(a, rows + 1), llc / 2) << "not the largest chunk that fits";
      }
    }
  }
}

// The precision contract of ops/matmul.h: 16-bit intermediates only when every factor is that dtype.
ops::MatmulChainArgs chain_of(Tensors& t, std::vector<DType> dtypes, int64_t R, std::vector<int64_t> dims) {
  ops::MatmulChainArgs a = chain_shape(t, R, std::move(dims));
  for (int i = 0; i < a.count; ++i) a.factors[size_t(i)].dtype = dtypes[size_t(i)];
  return a;
}

TEST(MatmulChainContract, IntermediateDtypeFromTheFactors) {
  Tensors t(Device::open("cpu"));
  constexpr DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  EXPECT_EQ(ops::matmul_chain_intermediate_dtype(chain_of(t, {bf16, bf16, bf16}, 4, {8, 8, 8})), bf16);
  EXPECT_EQ(ops::matmul_chain_intermediate_dtype(chain_of(t, {f16, f16}, 4, {8, 8})), f16);
  EXPECT_EQ(ops::matmul_chain_intermediate_dtype(chain_of(t, {bf16, f16, bf16}, 4, {8, 8, 8})), f32);
  EXPECT_EQ(ops::matmul_chain_intermediate_dtype(chain_of(t, {f32, bf16, bf16}, 4, {8, 8, 8})), f32);
  EXPECT_EQ(ops::matmul_chain_intermediate_dtype(chain_of(t, {f32, f32}, 4, {8, 8})), f32);
}

TEST(MatmulChainContract, ScratchIsTwoAlignedSlotsPlusStagingFor16Bit_R5_D9x7x3) {
  Tensors t(Device::open("cpu"));
  // Widest intermediate 9 (D0, widened A0 chunks on the CPU) → a slot of 5 · 9 = 45 elements → 64.
  const ops::MatmulChainArgs f32 = chain_of(t, {DType::f32, DType::f32, DType::f32}, 5, {9, 7, 3});
  EXPECT_EQ(ops::matmul_chain_slot_elements(f32, 5), 64);
  EXPECT_EQ(ops::matmul_chain_staging_elements(f32), 0);
  EXPECT_EQ(ops::matmul_chain_scratch_bytes(f32, 5), size_t(2 * 64 * 4));
  // bf16: factors 1 (9 × 7 = 63 → 64) and 2 (7 × 3 = 21 → 64) staged.
  const ops::MatmulChainArgs bf16 = chain_of(t, {DType::bf16, DType::bf16, DType::bf16}, 5, {9, 7, 3});
  EXPECT_EQ(ops::matmul_chain_staging_offset(bf16, 1), 0);
  EXPECT_EQ(ops::matmul_chain_staging_offset(bf16, 2), 64);
  EXPECT_EQ(ops::matmul_chain_staging_elements(bf16), 128);
  EXPECT_EQ(ops::matmul_chain_scratch_bytes(bf16, 5), size_t((2 * 64 + 128) * 2));
}

TEST(MatmulChainChunkRows, SixteenBitIntermediatesFitTwiceTheRows) {
  Tensors t(Device::open("cpu"));
  const size_t llc = size_t(50) << 20;
  const std::vector<int64_t> dims = {768, 64, 768, 1024};
  const DType f32 = DType::f32, bf16 = DType::bf16;
  const int64_t f32_rows = ops::matmul_chain_chunk_rows(llc, chain_of(t, {f32, f32, f32, f32}, 50304, dims));
  const int64_t bf16_rows = ops::matmul_chain_chunk_rows(llc, chain_of(t, {bf16, bf16, bf16, bf16}, 50304, dims));
  EXPECT_EQ(f32_rows, 4266);  // ⌊25 MiB / (2 · 768 · 4 bytes)⌋
  EXPECT_EQ(bf16_rows, 8533);
}

TEST(MatmulChainChunkRows, TinyCacheStillGives16Rows) {
  Tensors t(Device::open("cpu"));
  EXPECT_EQ(ops::matmul_chain_chunk_rows(1024, chain_shape(t, 1000, {512, 512, 8})), 16);
  EXPECT_EQ(ops::matmul_chain_chunk_rows(1024, chain_shape(t, 3, {512, 512, 8})), 3);
}

// ---- bad input ----

struct MatmulBadInput : ::testing::Test {
  Tensors t{Device::open("cpu")};
};

TEST_F(MatmulBadInput, KMismatch_x3x17_w8x16) {
  const Tensor x = t.f32({3, 17}), w = t.f32({8, 16}), out = t.f32({3, 8});
  expect_error([&] { ops::matmul(t.stream, out, x, w); }, ErrorCode::shape_mismatch, {"matmul", "w", "K", "16", "17"});
}

TEST_F(MatmulBadInput, OutRowsMismatch_x3x4_out2x5) {
  const Tensor x = t.f32({3, 4}), w = t.f32({5, 4}), out = t.f32({2, 5});
  expect_error([&] { ops::matmul(t.stream, out, x, w); }, ErrorCode::shape_mismatch, {"matmul", "out", "2", "3"});
}

TEST_F(MatmulBadInput, BatchMismatch_x2x3x4_w3x5x4) {
  const Tensor x = t.f32({2, 3, 4}), w = t.f32({3, 5, 4}), out = t.f32({2, 3, 5});
  expect_error([&] { ops::matmul(t.stream, out, x, w); }, ErrorCode::shape_mismatch, {"matmul", "w", "batch", "3", "2"});
}

TEST_F(MatmulBadInput, BatchedWeightsWithUnbatchedX_x3x4_w2x5x4) {
  const Tensor x = t.f32({3, 4}), w = t.f32({2, 5, 4}), out = t.f32({3, 5});
  expect_error([&] { ops::matmul(t.stream, out, x, w); }, ErrorCode::shape_mismatch, {"matmul", "batched", "[2, 5, 4]"});
}

TEST_F(MatmulBadInput, BiasLength_N5_bias4) {
  const Tensor x = t.f32({3, 4}), w = t.f32({5, 4}), out = t.f32({3, 5}), bias = t.f32({4});
  expect_error([&] { ops::matmul(t.stream, out, x, w, {.bias = bias}); }, ErrorCode::shape_mismatch,
               {"matmul", "bias", "4", "5"});
}

TEST_F(MatmulBadInput, SwigluOddWeightRows_w7x4) {
  const Tensor x = t.f32({3, 4}), w = t.f32({7, 4}), out = t.f32({3, 3});
  expect_error([&] { ops::matmul(t.stream, out, x, w, {.activation = ops::Activation::swiglu}); },
               ErrorCode::shape_mismatch, {"matmul", "swiglu", "w", "7", "odd"});
}

TEST_F(MatmulBadInput, SwigluOutAsWideAsW_w8x4_out3x8) {
  const Tensor x = t.f32({3, 4}), w = t.f32({8, 4}), out = t.f32({3, 8});
  expect_error([&] { ops::matmul(t.stream, out, x, w, {.activation = ops::Activation::swiglu}); },
               ErrorCode::shape_mismatch, {"matmul", "out", "half of w's rows", "4", "8"});
}

TEST_F(MatmulBadInput, SwigluBiasOfN_w8x4_bias4) {
  const Tensor x = t.f32({3, 4}), w = t.f32({8, 4}), out = t.f32({3, 4}), bias = t.f32({4});
  expect_error([&] { ops::matmul(t.stream, out, x, w, {.bias = bias, .activation = ops::Activation::swiglu}); },
               ErrorCode::shape_mismatch, {"matmul", "bias", "2N", "8", "4"});
}

TEST_F(MatmulBadInput, ResidualShape_out3x5_residual5x3) {
  const Tensor x = t.f32({3, 4}), w = t.f32({5, 4}), out = t.f32({3, 5}), residual = t.f32({5, 3});
  expect_error([&] { ops::matmul(t.stream, out, x, w, {.residual = residual}); }, ErrorCode::shape_mismatch,
               {"matmul", "residual", "[5, 3]", "[3, 5]"});
}

TEST_F(MatmulBadInput, ResidualOverlapsOutPartly_out3x4) {
  const Tensor x = t.f32({3, 4}), w = t.f32({4, 4}), big = t.f32({4, 4});
  const Tensor out = big.slice(0, 0, 3), residual = big.slice(0, 1, 4);
  expect_error([&] { ops::matmul(t.stream, out, x, w, {.residual = residual}); }, ErrorCode::aliasing,
               {"matmul", "out", "residual"});
}

TEST_F(MatmulBadInput, OutOverlapsX_x3x3) {
  const Tensor x = t.f32({3, 3}), w = t.f32({3, 3});
  expect_error([&] { ops::matmul(t.stream, x, x, w); }, ErrorCode::aliasing, {"matmul", "out", "x"});
}

TEST_F(MatmulBadInput, NormWeightLength_K4_weight5) {
  const Tensor x = t.f32({3, 4}), w = t.f32({5, 4}), out = t.f32({3, 5}), g = t.f32({5});
  expect_error([&] { ops::matmul(t.stream, out, x, w, {.norm = {.kind = ops::NormKind::layer_norm, .weight = g}}); },
               ErrorCode::shape_mismatch, {"matmul", "norm.weight", "5", "4"});
}

TEST_F(MatmulBadInput, NormWithoutWeight) {
  const Tensor x = t.f32({3, 4}), w = t.f32({5, 4}), out = t.f32({3, 5});
  expect_error([&] { ops::matmul(t.stream, out, x, w, {.norm = {.kind = ops::NormKind::rms_norm}}); },
               ErrorCode::invalid_argument, {"matmul", "norm.weight"});
}

TEST_F(MatmulBadInput, RmsNormWithBias) {
  const Tensor x = t.f32({3, 4}), w = t.f32({5, 4}), out = t.f32({3, 5}), g = t.f32({4}), b = t.f32({4});
  expect_error(
      [&] { ops::matmul(t.stream, out, x, w, {.norm = {.kind = ops::NormKind::rms_norm, .weight = g, .bias = b}}); },
      ErrorCode::invalid_argument, {"matmul", "norm.bias", "rms_norm"});
}

TEST_F(MatmulBadInput, NormEpsNotPositive) {
  const Tensor x = t.f32({3, 4}), w = t.f32({5, 4}), out = t.f32({3, 5}), g = t.f32({4});
  expect_error(
      [&] { ops::matmul(t.stream, out, x, w, {.norm = {.kind = ops::NormKind::layer_norm, .weight = g, .eps = 0.0f}}); },
      ErrorCode::invalid_argument, {"matmul", "norm.eps"});
}

TEST_F(MatmulBadInput, NormWeightOverlapsOut) {
  const Tensor x = t.f32({1, 4}), w = t.f32({4, 4}), out = t.f32({1, 4});
  const Tensor g = out.reshape({4});
  expect_error([&] { ops::matmul(t.stream, out, x, w, {.norm = {.kind = ops::NormKind::layer_norm, .weight = g}}); },
               ErrorCode::aliasing, {"matmul", "out", "norm.weight"});
}

TEST_F(MatmulBadInput, IntegerWeights_wi32) {
  const Tensor x = t.f32({3, 4}), w = t.make(DType::i32, {5, 4}), out = t.f32({3, 5});
  expect_error([&] { ops::matmul(t.stream, out, x, w); }, ErrorCode::dtype_mismatch, {"matmul", "w", "i32"});
}

TEST_F(MatmulBadInput, WeightsOnAnotherDevice_ref) {
  Tensors other(Device::open("ref"));
  const Tensor x = t.f32({3, 4}), w = other.f32({5, 4}), out = t.f32({3, 5});
  expect_error([&] { ops::matmul(t.stream, out, x, w); }, ErrorCode::device_mismatch, {"matmul", "w", "ref", "cpu"});
}

TEST_F(MatmulBadInput, ZeroSizeDim_x0x4) {
  Tensor x = t.f32({1, 4});
  x.shape[0] = 0;
  const Tensor w = t.f32({5, 4}), out = t.f32({1, 5});
  expect_error([&] { ops::matmul(t.stream, out, x, w); }, ErrorCode::invalid_argument, {"matmul", "x", "size 0"});
}

TEST_F(MatmulBadInput, OverflowSize_x2p31x2p31) {
  Tensor x = t.f32({1, 1});
  x.shape[0] = x.shape[1] = int64_t(1) << 31;
  x.strides[0] = int64_t(1) << 31;
  const Tensor w = t.f32({5, 4}), out = t.f32({1, 5});
  expect_error([&] { ops::matmul(t.stream, out, x, w); }, ErrorCode::invalid_argument, {"matmul", "x", "2147483648"});
}

// ---- matmul_chain bad input ----

struct MatmulChainBadInput : ::testing::Test {
  Tensors t{Device::open("cpu")};
  Workspace workspace{t.device, 1 << 16};
};

TEST_F(MatmulChainBadInput, FactorsDoNotChain_4x3_then_5x2) {
  const Tensor factors[] = {t.f32({4, 3}), t.f32({5, 2})};
  const Tensor out = t.f32({4, 2});
  expect_error([&] { ops::matmul_chain(t.stream, out, factors, 2, workspace); }, ErrorCode::shape_mismatch,
               {"matmul_chain", "factor 1", "[5, 2]", "does not chain"});
}

TEST_F(MatmulChainBadInput, OneFactor) {
  const Tensor factors[] = {t.f32({4, 3})};
  const Tensor out = t.f32({4, 3});
  expect_error([&] { ops::matmul_chain(t.stream, out, factors, 1, workspace); }, ErrorCode::invalid_argument,
               {"matmul_chain", "2 to 8", "got 1"});
}

TEST_F(MatmulChainBadInput, NineFactors) {
  std::vector<Tensor> factors;
  for (int i = 0; i < 9; ++i) factors.push_back(t.f32({2, 2}));
  const Tensor out = t.f32({2, 2});
  expect_error([&] { ops::matmul_chain(t.stream, out, factors.data(), 9, workspace); }, ErrorCode::invalid_argument,
               {"matmul_chain", "2 to 8", "got 9"});
}

TEST_F(MatmulChainBadInput, OutColumnsMismatch_out4x3) {
  const Tensor factors[] = {t.f32({4, 3}), t.f32({3, 2})};
  const Tensor out = t.f32({4, 3});
  expect_error([&] { ops::matmul_chain(t.stream, out, factors, 2, workspace); }, ErrorCode::shape_mismatch,
               {"matmul_chain", "out", "columns", "2"});
}

TEST_F(MatmulChainBadInput, OutOverlapsAFactor) {
  const Tensor a = t.f32({3, 3}), b = t.f32({3, 3});
  const Tensor factors[] = {a, b};
  expect_error([&] { ops::matmul_chain(t.stream, a, factors, 2, workspace); }, ErrorCode::aliasing,
               {"matmul_chain", "out", "factor"});
}

TEST_F(MatmulChainBadInput, WorkspaceTooSmall_R64_D512) {
  const Tensor factors[] = {t.f32({64, 512}), t.f32({512, 512}), t.f32({512, 4})};
  const Tensor out = t.f32({64, 4});
  Workspace tiny(t.device, 1024);  // needs 2 · 64 · 512 · 4 bytes
  expect_error([&] { ops::matmul_chain(t.stream, out, factors, 3, tiny, {.chunk_rows = 64}); },
               ErrorCode::out_of_memory, {"workspace", "262144"});
}

TEST_F(MatmulChainBadInput, NegativeChunkRows) {
  const Tensor factors[] = {t.f32({4, 3}), t.f32({3, 2})};
  const Tensor out = t.f32({4, 2});
  expect_error([&] { ops::matmul_chain(t.stream, out, factors, 2, workspace, {.chunk_rows = -1}); },
               ErrorCode::invalid_argument, {"matmul_chain", "chunk_rows", "-1"});
}

TEST_F(MatmulBadInput, QuantizedWeightsNeedScalesAndOthersMustNotHaveThem) {
  const Tensor x = t.f32({3, 4}), out = t.f32({3, 5}), scales = t.f32({5});
  const Tensor q = t.make(DType::i8, {5, 4});
  expect_error([&] { ops::matmul(t.stream, out, x, q); }, ErrorCode::invalid_argument,
               {"matmul", "w [5, 4] i8", "quantized", "no per-row scales"});
  Tensor w = t.f32({5, 4});
  w.scales = scales.ptr<float>();  // f32 weights carry no scales
  expect_error([&] { ops::matmul(t.stream, out, x, w); }, ErrorCode::invalid_argument,
               {"matmul", "carries scales but is not quantized"});
  Tensor xq = t.make(DType::i8, {3, 4});
  xq.scales = scales.ptr<float>();
  const Tensor w32 = t.f32({5, 4});
  expect_error([&] { ops::matmul(t.stream, out, xq, w32); }, ErrorCode::dtype_mismatch, {"matmul", "x", "i8"});
}

}  // namespace
}  // namespace ding::testing
