// ggml's block formats (what GGUF files hold, llama.cpp's ggml-quants): each block of 32 weights
// keeps its own scale (and minimum), so the rounding error follows the local magnitude of the
// weights. Dequantizing a row to fp32 (what the model does at load for the types it has no
// kernel of its own for).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace gpeserve::model::cpu {

// The block types dequantized here: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, and the
// K-quants Q4_K, Q5_K, Q6_K (ggml type numbers 0, 1, 30, 8, 2, 3, 6, 7, 12, 13, 14).
bool CanDequantizeGgml(uint32_t ggml_type);

// Writes the `n` weights stored from `blocks` (n a whole number of blocks) to out as fp32.
// REQUIRES: CanDequantizeGgml(ggml_type).
void DequantizeGgml(uint32_t ggml_type, const void* blocks, int64_t n, float* out);

}  // namespace gpeserve::model::cpu
