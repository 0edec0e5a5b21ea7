// The kernels behind cpu_matmul.h, written once over a vector-traits type and instantiated by
// each instruction set's source file (cpu_matmul_avx2.cc, cpu_matmul_avx512.cc), which defines
// its traits and then GPESERVE_DEFINE_CPU_MATMUL(Suffix, Traits). Everything here has internal
// linkage, so code compiled for one instruction set is never merged into another's.
//
// Traits V provide:
//   F                               the fp32 vector type, kLanes floats
//   kRowsOne                        weight rows per tile when there is one activation row
//   kRows, kGroup                   weight rows x activation rows per tile otherwise
//   F Zero(); F Broadcast(float); F LoadX(const float*); void Store(float*, F); F Mul(F, F);
//   F Fma(F a, F b, F acc) (a * b + acc); float Sum(F) (all lanes)
//   template <WeightType T> F LoadW(const void* data, int64_t index)   kLanes weights as fp32
//       (index: row-major, a multiple of kLanes; not the block types)
//   template <WeightType T> void LoadBlock(const void* data, int64_t index, F* out)
//       the block types: the block starting at weight `index` as kBlockWeights / kLanes vectors
//
// The block types' products are cpu_matmul_blocks.h's (integer dot products); here only their
// widening to fp32 (DequantizeRows).
//
// A tile keeps kRows x kGroup accumulators in registers and streams kRows weight rows once for
// its kGroup activation rows; the weight rows of one tile stay in L1/L2 while further groups of
// activation rows pass over them, so memory sees each weight once per call.
//
// Included only by those files: no include guard on purpose, and no std:: templates (an inline
// function instantiated here under AVX-512 flags must not be the copy the linker keeps).
#include <cstdint>

#include "engine/kernels/cpu_matmul.h"
#include "engine/kernels/cpu_matmul_isa.h"

namespace gpeserve::model::cpu::internal {
namespace {

template <WeightType T>
inline float ScalarWeight(const void* data, int64_t index) {
  if constexpr (T == WeightType::kF32) {
    return static_cast<const float*>(data)[index];
  } else if constexpr (T == WeightType::kBF16) {
    return Bf16ToFloat(static_cast<const uint16_t*>(data)[index]);
  } else if constexpr (T == WeightType::kF16) {
    return HalfToFloat(static_cast<const uint16_t*>(data)[index]);
  } else {
    static_assert(T == WeightType::kInt8, "the block types have no scalar tail");
    return static_cast<float>(static_cast<const int8_t*>(data)[index]);
  }
}

constexpr bool IsBlock(WeightType t) {
  return t == WeightType::kQ8_0 || t == WeightType::kQ4_0 || t == WeightType::kQ4_1;
}

// Bytes of `count` weights of type T, for prefetch distances (rounded down inside a block).
template <WeightType T>
constexpr int64_t BytesOf(int64_t count) {
  switch (T) {
    case WeightType::kF32:
      return 4 * count;
    case WeightType::kBF16:
    case WeightType::kF16:
      return 2 * count;
    case WeightType::kInt8:
      return count;
    case WeightType::kQ8_0:
    case WeightType::kQ4_0:
    case WeightType::kQ4_1:
      return count * BlockBytes(T) / kBlockWeights;
  }
  return 0;
}

struct Output {
  const float* scale;  // null unless int8
  const float* bias;   // may be null
  float* y;
  int64_t ldy;
};

// The vector columns [begin, end) of one pass over the weights (multiples of kLanes; the scalar
// tail past the last multiple is the last pass's). A pass over all columns stores finished
// outputs; when the activation rows are too large for L2 the columns are split into chunks
// (MatmulRowsTyped) and each tile's accumulator vectors wait in a spill buffer, whole, between
// chunks: every output is summed in the same order, lane by lane, as by one pass, so that a
// row's result never depends on how many rows share the call (batched equals alone).
struct Columns {
  int64_t begin, end;
  bool first, last;  // first: the accumulators start at zero (else from the spill); last:
                     // finish them into y (else back to the spill)
};

// Rows [n, n + R) of W against activation rows x[0 .. G), columns c, into y rows [i, i + G).
// spill: the accumulators between chunks, vector (g * R + r) for row n + r and activation row
// i + g (null for a pass over all columns).
template <class V, WeightType T, int R, int G, bool kChunked>
inline void Tile(const WeightView& w, int64_t n, const float* x, int64_t ldx, const Output& o,
                 int64_t i, const Columns& c, float* spill) {
  using F = typename V::F;
  const int64_t cols = w.cols;
  const int64_t base = n * cols;
  // The tile reads R rows side by side: R short streams that the hardware prefetchers follow
  // badly when rows are short. So it prefetches the next tile (the next R rows) at the pace it
  // reads this one: over whole rows they are one contiguous stream, R * kLanes weights a step;
  // over a chunk of columns, row by row.
  constexpr int64_t kStepBytes = BytesOf<T>(R * V::kLanes);
  const char* next = static_cast<const char*>(w.data) + BytesOf<T>(base + R * cols);
  F acc[R][G];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
      acc[r][g] = !kChunked || c.first ? V::Zero() : V::LoadX(spill + (g * R + r) * V::kLanes);
    }
  }
  for (int64_t k = c.begin; k < c.end; k += V::kLanes) {
    if constexpr (kChunked) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) __builtin_prefetch(next + BytesOf<T>(r * cols + k), 0, 3);
    } else {
#pragma GCC unroll 8
      for (int64_t b = 0; b < kStepBytes; b += 64) {
        __builtin_prefetch(next + BytesOf<T>(k * R) + b, 0, 3);
      }
    }
    F xv[G];
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) xv[g] = V::LoadX(x + g * ldx + k);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const F wv = V::template LoadW<T>(w.data, base + r * cols + k);
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) acc[r][g] = V::Fma(wv, xv[g], acc[r][g]);
    }
  }
  if (kChunked && !c.last) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) V::Store(spill + (g * R + r) * V::kLanes, acc[r][g]);
    }
    return;
  }
  const int64_t vector_end = cols / V::kLanes * V::kLanes;
  for (int r = 0; r < R; ++r) {
    for (int g = 0; g < G; ++g) {
      float sum = V::Sum(acc[r][g]);
      for (int64_t k = vector_end; k < cols; ++k) {
        sum += ScalarWeight<T>(w.data, base + r * cols + k) * x[g * ldx + k];
      }
      if (o.scale != nullptr) sum *= o.scale[n + r];
      if (o.bias != nullptr) sum += o.bias[n + r];
      o.y[(i + g) * o.ldy + n + r] = sum;
    }
  }
}

// Rows [n, n + R) of W against all m activation rows, kGroup at a time. spill: m x R vectors
// (null for a pass over all columns).
template <class V, WeightType T, int R, bool kChunked>
inline void RowBlock(const WeightView& w, int64_t n, const float* x, int64_t m, int64_t ldx,
                     const Output& o, const Columns& c, float* spill) {
  constexpr int G = V::kGroup;
  const auto at = [spill](int64_t i) { return spill ? spill + i * R * V::kLanes : nullptr; };
  int64_t i = 0;
  for (; i + G <= m; i += G) Tile<V, T, R, G, kChunked>(w, n, x + i * ldx, ldx, o, i, c, at(i));
  const int64_t rest = m - i;
  if constexpr (G > 1) {
    if (rest == 1) Tile<V, T, R, 1, kChunked>(w, n, x + i * ldx, ldx, o, i, c, at(i));
  }
  if constexpr (G > 2) {
    if (rest == 2) Tile<V, T, R, 2, kChunked>(w, n, x + i * ldx, ldx, o, i, c, at(i));
  }
  if constexpr (G > 3) {
    if (rest == 3) Tile<V, T, R, 3, kChunked>(w, n, x + i * ldx, ldx, o, i, c, at(i));
  }
  static_assert(G >= 1 && G <= 4, "remainder groups are spelled out up to 3");
}

// Activation bytes a pass keeps in L2 while weight tiles stream past them: with more (many
// rows of a long input, as down_proj's), the columns are split into chunks of this size.
constexpr int64_t kActivationBytes = 192 * 1024;
// Floats of the spill buffer of a chunked pass (on the stack): it holds the accumulators of a
// block of weight rows for all activation rows, so blocks have at least kRows rows and about
// kSpillFloats / (m * kLanes).
constexpr int64_t kSpillFloats = 16 * 1024;

template <class V, WeightType T>
void MatmulRowsTyped(const WeightView& w, const float* x, int64_t m, int64_t ldx, const float* bias,
                     float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  const Output o{T == WeightType::kInt8 ? w.scale : nullptr, bias, y, ldy};
  const int64_t vector_end = w.cols / V::kLanes * V::kLanes;
  const Columns all{0, vector_end, true, true};
  if (m == 1) {
    int64_t n = n_begin;
    for (; n + V::kRowsOne <= n_end; n += V::kRowsOne) {
      Tile<V, T, V::kRowsOne, 1, false>(w, n, x, ldx, o, 0, all, nullptr);
    }
    for (; n < n_end; ++n) Tile<V, T, 1, 1, false>(w, n, x, ldx, o, 0, all, nullptr);
    return;
  }
  if (m * w.cols * 4 <= kActivationBytes) {
    int64_t n = n_begin;
    for (; n + V::kRows <= n_end; n += V::kRows) {
      RowBlock<V, T, V::kRows, false>(w, n, x, m, ldx, o, all, nullptr);
    }
    for (; n < n_end; ++n) RowBlock<V, T, 1, false>(w, n, x, m, ldx, o, all, nullptr);
    return;
  }
  // (No std:: templates in this header: an inline function compiled for AVX-512 here must not
  // be the copy the linker keeps for the rest of the program.)
  const int64_t fit = kActivationBytes / (4 * m) / V::kLanes * V::kLanes;
  const int64_t chunk = fit > 16 * V::kLanes ? fit : 16 * V::kLanes;
  alignas(64) float spill[kSpillFloats];
  int64_t block = kSpillFloats / (m * V::kLanes) / V::kRows * V::kRows;
  if (block < V::kRows) block = V::kRows;
  float* heap = m * V::kLanes * block > kSpillFloats ? new float[m * V::kLanes * block] : nullptr;
  float* buffer = heap != nullptr ? heap : spill;
  for (int64_t n0 = n_begin; n0 < n_end; n0 += block) {
    const int64_t n1 = n_end - n0 > block ? n0 + block : n_end;
    int64_t k = 0;
    do {
      const int64_t k_end = vector_end - k > chunk ? k + chunk : vector_end;
      const Columns c{k, k_end, k == 0, k_end == vector_end};
      int64_t n = n0;
      for (; n + V::kRows <= n1; n += V::kRows) {
        RowBlock<V, T, V::kRows, true>(w, n, x, m, ldx, o, c, buffer + (n - n0) * m * V::kLanes);
      }
      for (; n < n1; ++n) {
        RowBlock<V, T, 1, true>(w, n, x, m, ldx, o, c, buffer + (n - n0) * m * V::kLanes);
      }
      k = k_end;
    } while (k < vector_end);
  }
  delete[] heap;
}

template <class V, WeightType T>
void DequantizeRowsTyped(const WeightView& w, int64_t n_begin, int64_t n_end, float* out) {
  const int64_t cols = w.cols;
  const int64_t vector_end = cols - cols % V::kLanes;
  for (int64_t n = n_begin; n < n_end; ++n) {
    float* row = out + (n - n_begin) * cols;
    const int64_t base = n * cols;
    if constexpr (IsBlock(T)) {
      for (int64_t k = 0; k < cols; k += kBlockWeights) {
        typename V::F block[kBlockWeights / V::kLanes];
        V::template LoadBlock<T>(w.data, base + k, block);
        for (int j = 0; j < kBlockWeights / V::kLanes; ++j)
          V::Store(row + k + j * V::kLanes, block[j]);
      }
    } else if constexpr (T == WeightType::kInt8) {
      const typename V::F scale = V::Broadcast(w.scale[n]);
      for (int64_t k = 0; k < vector_end; k += V::kLanes) {
        V::Store(row + k, V::Mul(V::template LoadW<T>(w.data, base + k), scale));
      }
      for (int64_t k = vector_end; k < cols; ++k) {
        row[k] = ScalarWeight<T>(w.data, base + k) * w.scale[n];
      }
    } else {
      for (int64_t k = 0; k < vector_end; k += V::kLanes) {
        V::Store(row + k, V::template LoadW<T>(w.data, base + k));
      }
      for (int64_t k = vector_end; k < cols; ++k) row[k] = ScalarWeight<T>(w.data, base + k);
    }
  }
}

}  // namespace
}  // namespace gpeserve::model::cpu::internal

// Defines MatmulRows<Suffix> and DequantizeRows<Suffix> over the traits V (the block types'
// products: cpu_matmul_blocks.h's MatmulBlocks, which the file includes too).
#define GPESERVE_DEFINE_CPU_MATMUL(Suffix, V)                                                     \
  namespace gpeserve::model::cpu::internal {                                                      \
  void MatmulRows##Suffix(const WeightView& w, const float* x, int64_t m, int64_t ldx,            \
                          const float* bias, float* y, int64_t ldy, int64_t n_begin,              \
                          int64_t n_end) {                                                        \
    switch (w.type) {                                                                             \
      case WeightType::kF32:                                                                      \
        return MatmulRowsTyped<V, WeightType::kF32>(w, x, m, ldx, bias, y, ldy, n_begin, n_end);  \
      case WeightType::kBF16:                                                                     \
        return MatmulRowsTyped<V, WeightType::kBF16>(w, x, m, ldx, bias, y, ldy, n_begin, n_end); \
      case WeightType::kF16:                                                                      \
        return MatmulRowsTyped<V, WeightType::kF16>(w, x, m, ldx, bias, y, ldy, n_begin, n_end);  \
      case WeightType::kInt8:                                                                     \
        return MatmulRowsTyped<V, WeightType::kInt8>(w, x, m, ldx, bias, y, ldy, n_begin, n_end); \
      case WeightType::kQ8_0:                                                                     \
        return MatmulBlocks<WeightType::kQ8_0>(w, x, m, ldx, bias, y, ldy, n_begin, n_end);       \
      case WeightType::kQ4_0:                                                                     \
        return MatmulBlocks<WeightType::kQ4_0>(w, x, m, ldx, bias, y, ldy, n_begin, n_end);       \
      case WeightType::kQ4_1:                                                                     \
        return MatmulBlocks<WeightType::kQ4_1>(w, x, m, ldx, bias, y, ldy, n_begin, n_end);       \
    }                                                                                             \
  }                                                                                               \
  void DequantizeRows##Suffix(const WeightView& w, int64_t n_begin, int64_t n_end, float* out) {  \
    switch (w.type) {                                                                             \
      case WeightType::kF32:                                                                      \
        return DequantizeRowsTyped<V, WeightType::kF32>(w, n_begin, n_end, out);                  \
      case WeightType::kBF16:                                                                     \
        return DequantizeRowsTyped<V, WeightType::kBF16>(w, n_begin, n_end, out);                 \
      case WeightType::kF16:                                                                      \
        return DequantizeRowsTyped<V, WeightType::kF16>(w, n_begin, n_end, out);                  \
      case WeightType::kInt8:                                                                     \
        return DequantizeRowsTyped<V, WeightType::kInt8>(w, n_begin, n_end, out);                 \
      case WeightType::kQ8_0:                                                                     \
        return DequantizeRowsTyped<V, WeightType::kQ8_0>(w, n_begin, n_end, out);                 \
      case WeightType::kQ4_0:                                                                     \
        return DequantizeRowsTyped<V, WeightType::kQ4_0>(w, n_begin, n_end, out);                 \
      case WeightType::kQ4_1:                                                                     \
        return DequantizeRowsTyped<V, WeightType::kQ4_1>(w, n_begin, n_end, out);                 \
    }                                                                                             \
  }                                                                                               \
  }  // namespace gpeserve::model::cpu::internal
