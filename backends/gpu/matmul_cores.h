// The matmul cores' launches (gemv.cuh, gemv_mma.cuh, gemm_mma.cuh, gemm_simt.cuh), each
// instantiated once for every element type it takes, in its own translation unit:
//   gemv_f32.cu, gemv_f16.cu, gemv_bf16.cu             launch_gemv, by x's type (w: float or 8-bit)
//   gemv_mma.cu, gemv_mma_narrow.cu, gemm_mma.cu       the tensor-core cores (NVIDIA; gemv_mma_narrow.cu:
//                                                      8-bit w); gemm_mma.cu
//                                                      plans (and launches segmented products), each
//                                                      tile's kernel for each dtype is in
//   gemm_mma_<tile>_<f16|bf16>.cu                      launch_gemm_mma_tile (tile: large4, large3,
//                                                      tall, wide, small)
//   gemm_mma_narrow_<f16|bf16>.cu                      its large4 and wide tiles for 8-bit w
//   gemm_mma_e4m3.cu                                   x rounded to E4M3 and the E4M3 × E4M3 tiles
//   gemm_simt_f32.cu, gemm_simt_f16.cu, gemm_simt_bf16.cu  launch_gemm_simt, by x's type
// matmul.cu and matmul_chain.cu include this after the cores' headers, so they compile none of
// the kernels themselves: the units build in parallel, and none is the whole of matmul's code.
#pragma once
#include "ding/ops/matmul.h"
#include "gemm.cuh"
#include "gemm_mma.cuh"
#include "stream.h"

DING_GPU_BEGIN

template <class X, class W>
void launch_gemv(GpuStream& s, const GemmShape& p, const Epilogue& ep, const ops::MatmulNorm& norm);
template <class T, class W>
void launch_gemv_mma(GpuStream& s, const GemmShape& p, const Epilogue& ep, const ops::MatmulNorm& norm);
template <class T, class W>
void launch_gemv_mma_segments(GpuStream& s, const GemmShape& p, const Epilogue& ep, const int32_t* offsets, int E,
                              int P, bool offsets_settled);
// launch_gemm_mma, launch_gemm_mma_segments and launch_gemm_mma_tile: gemm_mma.cuh.
#if defined(DING_GPU_NVIDIA)
// Whether 16-bit x times E4M3 w over many rows takes the E4M3 tensor cores here: an sm_89+ GPU,
// kernels compiled for it, and MatmulTuning::e4m3_mma.
bool gemm_mma_e4m3_available(const GpuStream& s);
// That product: x's rows rounded to E4M3 (scratch), then the E4M3 GEMM (segmented where offsets is
// set: E segments over p.M rows, as launch_gemm_mma_segments).
template <class X>
void launch_gemm_mma_e4m3(GpuStream& s, const GemmShape& p, const Epilogue& ep, const int32_t* offsets = nullptr,
                          int E = 0);
#endif
template <class X, class W, bool WKn>
void launch_gemm_simt(GpuStream& s, const GemmShape& p, const Epilogue& ep);

#define DING_GEMV(X, W) \
  extern template void launch_gemv<X, W>(GpuStream&, const GemmShape&, const Epilogue&, const ops::MatmulNorm&);
#define DING_GEMM_SIMT(X, W)                                                                     \
  extern template void launch_gemm_simt<X, W, false>(GpuStream&, const GemmShape&, const Epilogue&); \
  extern template void launch_gemm_simt<X, W, true>(GpuStream&, const GemmShape&, const Epilogue&);
#define DING_FOR_W(CORE, X) CORE(X, float) CORE(X, ding::f16) CORE(X, ding::bf16)
// The FMA GEMV also reads 8-bit weights (with row scales) directly.
#define DING_FOR_GEMV_W(X) DING_FOR_W(DING_GEMV, X) DING_GEMV(X, int8_t) DING_GEMV(X, ding::f8e4m3)
DING_FOR_GEMV_W(float)
DING_FOR_GEMV_W(ding::f16)
DING_FOR_GEMV_W(ding::bf16)
#undef DING_FOR_GEMV_W
DING_FOR_W(DING_GEMM_SIMT, float)
DING_FOR_W(DING_GEMM_SIMT, ding::f16)
DING_FOR_W(DING_GEMM_SIMT, ding::bf16)
#undef DING_FOR_W
#undef DING_GEMM_SIMT
#undef DING_GEMV
#if defined(DING_GPU_NVIDIA)
#define DING_GEMV_MMA(X, W)                                                                                   \
  extern template void launch_gemv_mma<X, W>(GpuStream&, const GemmShape&, const Epilogue&, const ops::MatmulNorm&); \
  extern template void launch_gemv_mma_segments<X, W>(GpuStream&, const GemmShape&, const Epilogue&, const int32_t*, int, int, bool);
DING_GEMV_MMA(ding::f16, ding::f16)
DING_GEMV_MMA(ding::bf16, ding::bf16)
DING_GEMV_MMA(ding::f16, int8_t)
DING_GEMV_MMA(ding::f16, ding::f8e4m3)
DING_GEMV_MMA(ding::bf16, int8_t)
DING_GEMV_MMA(ding::bf16, ding::f8e4m3)
#undef DING_GEMV_MMA
// The tensor-core GEMM's operand pairs (16-bit x with w of its type or 8 bits) and, for the 8-bit
// ones, its two tiles: declared here, instantiated by gemm_mma.cu and gemm_mma_narrow_<x>.cu with
// the same lists (EXTERN empty there).
#define DING_GEMM_MMA_OPERANDS(F) \
  F(ding::f16, ding::f16) F(ding::bf16, ding::bf16) F(ding::f16, int8_t) F(ding::bf16, int8_t) \
  F(ding::f16, ding::f8e4m3) F(ding::bf16, ding::f8e4m3)
#define DING_GEMM_MMA_LAUNCHES(EXTERN, X, W)                                                                         \
  EXTERN template void launch_gemm_mma<X, W>(GpuStream&, const GemmShape&, const Epilogue&);                          \
  EXTERN template void launch_gemm_mma_segments<X, W>(GpuStream&, const GemmShape&, const Epilogue&, const int32_t*, \
                                                      int, int);
#define DING_GEMM_MMA_NARROW_TILES(EXTERN, X, W)                                                                  \
  EXTERN template void launch_gemm_mma_tile<X, W, mma::TileLarge4>(GpuStream&, const GemmShape&, const Epilogue&, \
                                                                    const SplitK&, const RowSegments&);            \
  EXTERN template void launch_gemm_mma_tile<X, W, mma::TileWide>(GpuStream&, const GemmShape&, const Epilogue&,   \
                                                                  const SplitK&, const RowSegments&);
#define DING_GEMM_MMA_EXTERN(X, W) DING_GEMM_MMA_LAUNCHES(extern, X, W)
DING_GEMM_MMA_OPERANDS(DING_GEMM_MMA_EXTERN)
#undef DING_GEMM_MMA_EXTERN
extern template void launch_gemm_mma_e4m3<ding::f16>(GpuStream&, const GemmShape&, const Epilogue&, const int32_t*, int);
extern template void launch_gemm_mma_e4m3<ding::bf16>(GpuStream&, const GemmShape&, const Epilogue&, const int32_t*, int);
#define DING_GEMM_MMA_TILE(Tl)                                                                                   \
  extern template void launch_gemm_mma_tile<ding::f16, ding::f16, mma::Tl>(GpuStream&, const GemmShape&, const Epilogue&,  \
                                                                 const SplitK&, const RowSegments&);            \
  extern template void launch_gemm_mma_tile<ding::bf16, ding::bf16, mma::Tl>(GpuStream&, const GemmShape&, const Epilogue&, \
                                                                  const SplitK&, const RowSegments&);
DING_GEMM_MMA_TILE(TileLarge4)
DING_GEMM_MMA_TILE(TileLarge3)
DING_GEMM_MMA_TILE(TileTall)
DING_GEMM_MMA_TILE(TileWide)
DING_GEMM_MMA_TILE(TileSmall)
#undef DING_GEMM_MMA_TILE
DING_GEMM_MMA_NARROW_TILES(extern, ding::f16, int8_t)
DING_GEMM_MMA_NARROW_TILES(extern, ding::bf16, int8_t)
DING_GEMM_MMA_NARROW_TILES(extern, ding::f16, ding::f8e4m3)
DING_GEMM_MMA_NARROW_TILES(extern, ding::bf16, ding::f8e4m3)
DING_GEMM_MMA_NARROW_TILES(extern, ding::f8e4m3, ding::f8e4m3)
#endif

DING_GPU_END
