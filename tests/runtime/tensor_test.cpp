#include <gtest/gtest.h>

#include <string>

#include "ding/ding.h"

namespace ding {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Tensor, ViewIsContiguousRowMajor) {
  float data[24];
  Tensor t = Tensor::view(data, nullptr, DType::f32, {2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides[0], 12);
  EXPECT_EQ(t.strides[2], 1);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.shape_str(), "[2, 3, 4] f32");
}

TEST(Tensor, SliceKeepsStridesAndSelectDropsADim) {
  float data[24];
  Tensor t = Tensor::view(data, nullptr, DType::f32, {2, 3, 4});
  Tensor s = t.slice(1, 1, 3);
  EXPECT_EQ(s.dim(1), 2);
  EXPECT_EQ(s.data, static_cast<void*>(data + 4));
  EXPECT_FALSE(s.is_contiguous());
  Tensor row = t.select(0, 1);
  EXPECT_EQ(row.rank, 2);
  EXPECT_EQ(row.data, static_cast<void*>(data + 12));
  EXPECT_TRUE(row.is_contiguous());
}

TEST(Tensor, UnsqueezeAddsAUnitDimensionKeepingStrides) {
  float data[24];
  Tensor t = Tensor::view(data, nullptr, DType::f32, {2, 3, 4}).slice(1, 0, 2);  // strided [2, 2, 4]
  Tensor u = t.unsqueeze(0);
  EXPECT_EQ(u.rank, 4);
  EXPECT_EQ(u.shape[0], 1);
  EXPECT_EQ(u.strides[1], 12);
  EXPECT_EQ(u.strides[2], 4);
  EXPECT_EQ(t.unsqueeze(3).shape[3], 1);
  EXPECT_THROW(t.unsqueeze(5), Error);
}

TEST(Tensor, UnflattenSplitsAStridedDimension) {
  float data[2 * 10];
  // Columns 0 … 5 of [2, 10] rows: three heads of two, inside rows 10 apart.
  Tensor heads = Tensor::view(data, nullptr, DType::f32, {2, 10}).slice(1, 0, 6).unflatten(1, 3);
  ASSERT_EQ(heads.rank, 3);
  EXPECT_EQ(heads.shape[1], 3);
  EXPECT_EQ(heads.shape[2], 2);
  EXPECT_EQ(heads.strides[0], 10);
  EXPECT_EQ(heads.strides[1], 2);
  EXPECT_EQ(heads.strides[2], 1);
  EXPECT_EQ(heads.select(0, 1).select(0, 2).data, static_cast<void*>(data + 14));  // row 1, head 2
  EXPECT_THROW(heads.unflatten(2, 3), Error);  // 2 elements do not split into 3
  EXPECT_THROW(heads.unflatten(3, 1), Error);
}

TEST(Tensor, OverlapFollowsTheBytesTouched) {
  float data[24];
  Tensor t = Tensor::view(data, nullptr, DType::f32, {2, 3, 4});
  EXPECT_TRUE(overlaps(t.select(0, 0), t));
  EXPECT_FALSE(overlaps(t.select(0, 0), t.select(0, 1)));
  EXPECT_FALSE(overlaps(t.slice(2, 0, 2).select(0, 0), Tensor::view(data + 12, nullptr, DType::f32, {12})));
}

TEST(Tensor, BadViewsThrow) {
  float data[4];
  Tensor t = Tensor::view(data, nullptr, DType::f32, {4});
  try {
    t.reshape({3});
    FAIL() << "reshape to a different element count must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::shape_mismatch);
    EXPECT_TRUE(contains(e.what(), "[4] f32")) << e.what();
  }
  EXPECT_THROW(t.slice(0, 2, 5), Error);
  EXPECT_THROW(Tensor::view(data, nullptr, DType::f32, {1, 1, 1, 1, 1, 1}), Error);
}

}  // namespace
}  // namespace ding
