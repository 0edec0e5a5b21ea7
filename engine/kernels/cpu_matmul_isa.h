// The per-instruction-set entry points behind cpu_matmul.h (one definition per source file).
// Only cpu_matmul.cc calls them, after checking that the CPU runs the instruction set.
#pragma once

#include "engine/kernels/cpu_matmul.h"

namespace gpeserve::model::cpu::internal {

#define GPESERVE_CPU_MATMUL_ENTRY_POINTS(Suffix)                                       \
  void MatmulRows##Suffix(const WeightView& w, const float* x, int64_t m, int64_t ldx, \
                          const float* bias, float* y, int64_t ldy, int64_t n_begin,   \
                          int64_t n_end);                                              \
  void DequantizeRows##Suffix(const WeightView& w, int64_t n_begin, int64_t n_end, float* out);

GPESERVE_CPU_MATMUL_ENTRY_POINTS(Scalar)
GPESERVE_CPU_MATMUL_ENTRY_POINTS(Avx2)
GPESERVE_CPU_MATMUL_ENTRY_POINTS(Avx512)

#undef GPESERVE_CPU_MATMUL_ENTRY_POINTS

// AVX512-BF16 (cpu_matmul_bf16dot.cc): MatmulRowsBf16Dot and RoundToBf16's vector path.
void MatmulRowsBf16DotAvx512(const WeightView& w, const uint16_t* x, int64_t m, int64_t ldx,
                             const float* bias, float* y, int64_t ldy, int64_t n_begin,
                             int64_t n_end);
void RoundToBf16Avx512(const float* x, int64_t n, uint16_t* out);
// AVX512-VNNI (cpu_matmul_vnni.cc): the block types' products where HasVnni().
void MatmulBlocksVnni(const WeightView& w, const float* x, int64_t m, int64_t ldx,
                      const float* bias, float* y, int64_t ldy, int64_t n_begin, int64_t n_end);

// Weight `index` (row-major) of a block-type matrix as fp32: the scalar kernels'.
float BlockWeight(WeightType type, const void* data, int64_t index);

namespace {  // in each file: the kernels compiled for one instruction set fold it

// Bytes of one block of a block type (WeightBytes' values).
constexpr int64_t BlockBytes(WeightType t) {
  return t == WeightType::kQ8_0 ? 34 : t == WeightType::kQ4_0 ? 18 : 20;
}

}  // namespace

}  // namespace gpeserve::model::cpu::internal
