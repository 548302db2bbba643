// Row tiles of a segmented product (moe_matmul): segment e owns the rows offsets[e] …
// offsets[e+1] of x and out and multiplies them by its own w[e]; its rows are cut into tiles of
// up to `tile_rows` consecutive rows, numbered segment by segment. A kernel takes one tile per
// unit of work, so each segment's weights are read once per tile of its rows (once in all at
// decode, where a segment — an expert — owns one row or a few), and a segment without rows owns
// no tile and is never read. The offsets live on the device (the product must be recordable in
// a graph), so the host sizes grids by max_row_tiles and the device finds each tile's owner.
// The GEMV cores take tiles of kSegmentTileRows; the tensor-core GEMM (gemm_mma.cuh) of its BM.
#pragma once
#include <algorithm>
#include <cstdint>

#include "select.cuh"

DING_GPU_BEGIN

// Rows per tile: the decode GEMV cores' row limit (the n side of an m16n8k16 tile).
constexpr int kSegmentTileRows = 8;

// The most row tiles P rows make over E segments: A segments owning rows own 1 + ⌊(rows − 1) /
// tile_rows⌋ tiles each, at most A + ⌊(P − A) / tile_rows⌋ in all, which grows with A ≤ min(E, P).
// At decode, where P ≤ E, it is P: the count when every row has a segment of its own.
inline int64_t max_row_tiles(int64_t P, int64_t E, int tile_rows = kSegmentTileRows) {
  const int64_t A = std::min(E, P);
  return A + (P - A) / tile_rows;
}

// A segmented product's rows as a kernel takes them: null offsets for a plain product.
struct RowSegments {
  const int32_t* offsets = nullptr;  // [count + 1], on the device
  int count = 0;                     // E
  int rows = 0;                      // P
};

struct RowTile {
  int segment = 0;
  int begin = 0, rows = 0;  // rows [begin, begin + rows); rows 0: no such tile
};

// Tile `tile` of the order (segment, then row), found by every lane of the calling warp (the
// same result on every lane). Segment e's range is offsets[e] … offsets[e+1] clamped into [0, P]
// and made non-decreasing, so offsets the host backends would reject leave rows unwritten (or
// written twice) but never lead a kernel outside x, w or out. E + 1 ints, from L2 after the first
// blocks.
__device__ inline RowTile find_row_tile(const int32_t* offsets, int E, int P, int64_t tile,
                                       int tile_rows = kSegmentTileRows) {
  const int lane = lane_id();
  int64_t before = 0;  // tiles of the segments of the earlier rounds
  for (int e0 = 0; e0 < E; e0 += warp_size()) {
    const int e = e0 + lane;
    int begin = 0, end = 0;
    if (e < E) {
      begin = min(max(offsets[e], 0), P);
      end = min(max(offsets[e + 1], begin), P);
    }
    const int count = (end - begin + tile_rows - 1) / tile_rows;
    const int inclusive = warp_inclusive_scan(count);
    const int64_t round_total = shfl(inclusive, warp_size() - 1);
    if (tile < before + round_total) {  // the same on every lane: the warp leaves together
      // Running counts grow with the lane, so the lanes whose count ends at or before the tile are
      // exactly those below its owner.
      const int owner = int(__popcll(ballot(before + inclusive <= tile)));
      const int owner_begin = shfl(begin, owner), owner_end = shfl(end, owner);
      const int64_t first_tile = before + shfl(inclusive - count, owner);
      const int64_t tile_begin = owner_begin + (tile - first_tile) * tile_rows;
      // Only counts that overflow int (offsets far out of order, ranges overlapping) can put the
      // tile outside its owner's rows: then no tile, rather than rows out of bounds.
      if (tile_begin < owner_begin || tile_begin >= owner_end) return {};
      RowTile t;
      t.segment = e0 + owner;
      t.begin = int(tile_begin);
      t.rows = min(tile_rows, owner_end - t.begin);
      return t;
    }
    before += round_total;
  }
  return {};
}

DING_GPU_END
