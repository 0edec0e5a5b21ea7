// Matrix-vector product for bf16 weights on x86 CPUs with AVX512-BF16. A decode step is a
// chain of such products, bounded by how fast the weights stream from memory; this libtorch's
// bf16 matrix-vector path is compute-bound well below that.
//
// Thread-safety: pure functions; callers split rows across threads.
#pragma once

#include <cstdint>

namespace gpeserve::model {

// True when this CPU can run Bf16Gemv (checked once).
bool Bf16GemvSupported();

// For rows [row_begin, row_end) of the row-major bf16 matrix w [rows, cols]:
//   y[r] = bf16(sum_c w[r, c] * x[c] + bias[r])   (fp32 accumulation; bias may be null)
// REQUIRES: Bf16GemvSupported(); cols % 32 == 0.
void Bf16Gemv(const uint16_t* w, const uint16_t* x, const uint16_t* bias, uint16_t* y, int64_t cols,
              int64_t row_begin, int64_t row_end);

}  // namespace gpeserve::model
