// embedding: closed-form facts on the reference (and the CPU kernel), the data-dependent index
// checks on both, and bad input through the public front end.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "expect_error.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

// Runs `f`, expecting a ding::Error with `code` whose message contains every string of `parts`.

const char* const kBackends[] = {"ref", "cpu"};

// A table whose row r holds scale·r + c in column c, so every output names the row it came from.
Tensor labelled_table(CaseRun& run, DType dtype, int64_t rows, int64_t C, double scale) {
  std::vector<double> v(size_t(rows * C));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) v[r * C + c] = scale * double(r) + double(c);
  return run.values(dtype, {rows, C}, v);
}

TEST(EmbeddingSanity, OutputRowsNameTheirTokenAndPosition_B2_T3_C9) {
  for (const char* backend : kBackends)
    for (bool positions_tensor : {false, true}) {
      CaseRun run(Device::open(backend), 1);
      Tensor ids = run.ints({2, 3}, {4, 0, 7, 7, 1, 2});
      Tensor table = labelled_table(run, DType::f32, 8, 9, 10), pos_table = labelled_table(run, DType::f32, 6, 9, 1000);
      Tensor out = run.output("out", DType::f32, {2, 3, 9});
      ops::EmbeddingParams p{.position_table = pos_table, .position_offset = 2};
      if (positions_tensor) p.positions = run.ints({2, 3}, {5, 4, 3, 0, 1, 2});
      ops::embedding(run.stream, out, ids, table, p);
      const std::vector<int> id = {4, 0, 7, 7, 1, 2};
      const std::vector<int> pos = positions_tensor ? std::vector<int>{5, 4, 3, 0, 1, 2} : std::vector<int>{2, 3, 4, 2, 3, 4};
      const auto v = run.read(out);
      for (int i = 0; i < 6; ++i)
        for (int c = 0; c < 9; ++c) EXPECT_EQ(v[i * 9 + c], 10.0 * id[i] + 1000.0 * pos[i] + 2 * c) << backend;
    }
}

class EmbeddingBadInput : public ::testing::Test {
 protected:
  Device& cpu = Device::open("cpu");
  CaseRun run{cpu, 1};
  Tensor ids = run.ints({2, 3}, {0, 1, 2, 3, 4, 5});
  Tensor table = run.normal(DType::f32, {10, 8});
  Tensor out = run.output("out", DType::f32, {2, 3, 8});
};

TEST(EmbeddingDataCheck, IdOutOfRange_b1_t2_id10_V10) {
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 1);
    Tensor ids = run.ints({2, 3}, {0, 1, 2, 3, 4, 10}), table = run.normal(DType::f32, {10, 8});
    Tensor out = run.output("out", DType::f32, {2, 3, 8});
    expect_error([&] { ops::embedding(run.stream, out, ids, table); }, ErrorCode::invalid_argument,
                 {"embedding", "ids[1, 2]", "10", "10 rows"});
  }
}

TEST(EmbeddingDataCheck, NegativeId_b0_t1_idm3) {
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 1);
    Tensor ids = run.ints({2, 3}, {0, -3, 2, 3, 4, 5}), table = run.normal(DType::bf16, {10, 8});
    Tensor out = run.output("out", DType::bf16, {2, 3, 8});
    expect_error([&] { ops::embedding(run.stream, out, ids, table); }, ErrorCode::invalid_argument,
                 {"embedding", "ids[0, 1]", "-3"});
  }
}

TEST(EmbeddingDataCheck, PositionOutOfRange_b1_t0_pos6_P6) {
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 1);
    Tensor ids = run.ints({2, 3}, {0, 1, 2, 3, 4, 5}), table = run.normal(DType::f32, {10, 8});
    Tensor pos_table = run.normal(DType::f32, {6, 8}), positions = run.ints({2, 3}, {0, 1, 2, 6, 1, 2});
    Tensor out = run.output("out", DType::f32, {2, 3, 8});
    expect_error(
        [&] { ops::embedding(run.stream, out, ids, table, {.position_table = pos_table, .positions = positions}); },
        ErrorCode::invalid_argument, {"embedding", "[1, 0]", "6", "6 rows"});
  }
}

TEST_F(EmbeddingBadInput, PositionOffsetPastTable_offset4_T3_P6) {
  Tensor pos_table = run.normal(DType::f32, {6, 8});
  expect_error([&] { ops::embedding(run.stream, out, ids, table, {.position_table = pos_table, .position_offset = 4}); },
               ErrorCode::invalid_argument, {"embedding", "4..6", "6 rows"});
}

TEST_F(EmbeddingBadInput, FloatIds_f32) {
  Tensor fids = run.normal(DType::f32, {2, 3});
  expect_error([&] { ops::embedding(run.stream, out, fids, table); }, ErrorCode::dtype_mismatch, {"embedding", "ids", "f32", "i32"});
}

TEST_F(EmbeddingBadInput, OutWidth_C7_table_C8) {
  Tensor out7 = run.output("out7", DType::f32, {2, 3, 7});
  expect_error([&] { ops::embedding(run.stream, out7, ids, table); }, ErrorCode::shape_mismatch, {"embedding", "out", "7", "8"});
}

TEST_F(EmbeddingBadInput, PositionTableWidth_C5) {
  Tensor pos_table = run.normal(DType::f32, {6, 5});
  expect_error([&] { ops::embedding(run.stream, out, ids, table, {.position_table = pos_table}); },
               ErrorCode::shape_mismatch, {"embedding", "position_table", "5", "8"});
}

TEST_F(EmbeddingBadInput, PositionsShape_3x2_vs_ids_2x3) {
  Tensor pos_table = run.normal(DType::f32, {6, 8}), positions = run.ints({3, 2}, {0, 1, 2, 3, 4, 5});
  expect_error(
      [&] { ops::embedding(run.stream, out, ids, table, {.position_table = pos_table, .positions = positions}); },
      ErrorCode::shape_mismatch, {"embedding", "positions", "[3, 2]", "[2, 3]"});
}

TEST_F(EmbeddingBadInput, OtherDevice_table_on_ref) {
  CaseRun other(Device::open("ref"), 1);
  Tensor table_ref = other.normal(DType::f32, {10, 8});
  expect_error([&] { ops::embedding(run.stream, out, ids, table_ref); }, ErrorCode::device_mismatch,
               {"embedding", "token_table", "ref"});
}

TEST_F(EmbeddingBadInput, OutOverlapsTable) {
  Tensor big = run.normal(DType::f32, {6, 8});
  Tensor overlapping = Tensor::view(big.data, &cpu, DType::f32, {2, 3, 8});
  Tensor table6 = big.slice(0, 2, 6);
  Tensor small_ids = run.ints({2, 3}, {0, 1, 2, 3, 0, 1});
  expect_error([&] { ops::embedding(run.stream, overlapping, small_ids, table6); }, ErrorCode::aliasing,
               {"embedding", "out", "overlaps", "token_table"});
}

TEST_F(EmbeddingBadInput, ZeroSizeDim_ids2x0) {
  Tensor empty = Tensor::view(ids.data, &cpu, DType::i32, {2, 0});
  expect_error([&] { ops::embedding(run.stream, out, empty, table); }, ErrorCode::invalid_argument, {"embedding", "ids", "size 0"});
}

TEST_F(EmbeddingBadInput, OverflowShape_table_2pow62_rows) {
  Tensor huge = Tensor::view(table.data, &cpu, DType::f32, {int64_t(1) << 62, 8});
  expect_error([&] { ops::embedding(run.stream, out, ids, huge); }, ErrorCode::invalid_argument, {"embedding", "token_table"});
}

}  // namespace
}  // namespace ding::testing
