// A model's matrices and the products with them: how a weight matrix is held for serving
// (fp32, bf16, fp16, int8 with a scale per output row, or ggml's Q8_0, Q4_0, Q4_1 blocks) and
// which code multiplies by it (on the CPU the cpu_matmul.h kernels or libtorch's fp32 GEMM on
// widened tiles; on CUDA and in training libtorch).
//
// Thread-safety: pure functions over immutable weights; CPU products use libtorch's intra-op
// thread pool.
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/formats/safetensors.h"
#include "engine/kernels/cpu_matmul.h"

namespace gpeserve::model {

// A weight matrix [out, in]: fp32, bf16 or fp16 values; int8 with one float32 scale per output
// row (W[n, k] = data[n, k] * scale[n]); or ggml's blocks of 32 weights with a scale each
// (`blocks` Q8_0, Q4_0 or Q4_1, cpu_matmul.h): then data is uint8 [out, bytes of a row] and in
// a multiple of 32. Blocks are served on the CPU only.
struct Matrix {
  torch::Tensor data;
  torch::Tensor scale;                             // [out] float32; defined only for int8
  cpu::WeightType blocks = cpu::WeightType::kF32;  // a block type when data holds blocks
  // bf16 data on the CPU: round the activations to bf16 before the product
  // (ModelOptions::cpu_activations).
  bool bf16_activations = false;

  bool has_blocks() const { return cpu::IsBlockType(blocks); }
  // Columns of W.
  int64_t in() const {
    return has_blocks()
               ? data.size(1) / cpu::WeightBytes(blocks, cpu::kBlockWeights) * cpu::kBlockWeights
               : data.size(1);
  }
  // Output rows [begin, begin + count): a view (a fused projection's part).
  Matrix Rows(int64_t begin, int64_t count) const {
    return {data.narrow(0, begin, count),
            scale.defined() ? scale.narrow(0, begin, count) : torch::Tensor(), blocks,
            bf16_activations};
  }
};

// The kernels' element type for a tensor of `type`: bf16, fp16, int8, else fp32.
cpu::WeightType CpuElementType(torch::ScalarType type);

// A safetensors dtype as a libtorch one, and back (InvalidArgument for a dtype safetensors
// files here do not hold).
torch::ScalarType TorchType(DType dtype);
absl::StatusOr<DType> SafetensorsDType(torch::ScalarType type);

// The matrices stacked by output rows (a fused projection as a checkpoint stores it): a copy.
// REQUIRES: the parts are held alike (the same dtype, scales or block type).
inline Matrix ConcatRows(const std::vector<Matrix>& parts) {
  std::vector<torch::Tensor> data, scale;
  for (const Matrix& m : parts) {
    data.push_back(m.data);
    if (m.scale.defined()) scale.push_back(m.scale);
  }
  return {torch::cat(data), scale.empty() ? torch::Tensor() : torch::cat(scale),
          parts.front().blocks, parts.front().bf16_activations};
}

// `w` [out, in] (float32, CPU) as int8 with one scale per output row (symmetric, the largest
// magnitude of the row maps to 127).
Matrix QuantizeInt8(const torch::Tensor& w);

// `w` [out, in] (float, CPU) in ggml's blocks of `type` (Q8_0, Q4_0, Q4_1; cpu_matmul.h's
// QuantizeRowsBlocks). InvalidArgument when `in` is not a multiple of 32.
absl::StatusOr<Matrix> QuantizeBlocks(const torch::Tensor& w, cpu::WeightType type);

// W as float32 [out, in] on its device: the scales applied, blocks decoded.
torch::Tensor Dequantized(const Matrix& w);

// x [rows, in] times W^T, plus b when defined: [rows, out]. On the CPU x is fp32 and W any
// held dtype; with gradients, or on CUDA, libtorch's linear.
torch::Tensor Linear(const torch::Tensor& x, const Matrix& w, const torch::Tensor& b);

// Rows `ids` of an embedding matrix, in `dtype` (int8 rows times their scale and blocks
// decoded, in fp32).
torch::Tensor Embed(const Matrix& e, const torch::Tensor& ids, torch::ScalarType dtype);

// One line naming the code Linear runs for weights held as `dtype_name` (fp32, bf16, fp16,
// int8, q8_0, q4_0, q4_1, gguf: each matrix as the file holds it) on `device`: the
// instruction set and kernel for decode-sized steps and for prefill, and the activations that
// enter bf16 weights.
std::string LinearKernelPath(const std::string& dtype_name, const torch::Device& device,
                             bool bf16_activations = false);

}  // namespace gpeserve::model
