// A model's matrices and the products with them: how a weight matrix is held for serving
// (fp32, bf16, fp16, or int8 with a scale per output row) and which code multiplies by it
// (on the CPU the cpu_matmul.h kernels or libtorch's fp32 GEMM on widened tiles; on CUDA and
// in training libtorch).
//
// Thread-safety: pure functions over immutable weights; CPU products use libtorch's intra-op
// thread pool.
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/formats/safetensors.h"

namespace gpeserve::model {

// A weight matrix [out, in]: fp32, bf16 or fp16 values, or int8 with one float32 scale per
// output row (W[n, k] = data[n, k] * scale[n]).
struct Matrix {
  torch::Tensor data;
  torch::Tensor scale;  // [out] float32; defined only for int8

  // Output rows [begin, begin + count): a view (a fused projection's part).
  Matrix Rows(int64_t begin, int64_t count) const {
    return {data.narrow(0, begin, count),
            scale.defined() ? scale.narrow(0, begin, count) : torch::Tensor()};
  }
};

// A safetensors dtype as a libtorch one, and back (InvalidArgument for a dtype safetensors
// files here do not hold).
torch::ScalarType TorchType(DType dtype);
absl::StatusOr<DType> SafetensorsDType(torch::ScalarType type);

// The matrices stacked by output rows (a fused projection as a checkpoint stores it): a copy.
inline Matrix ConcatRows(const std::vector<Matrix>& parts) {
  std::vector<torch::Tensor> data, scale;
  for (const Matrix& m : parts) {
    data.push_back(m.data);
    if (m.scale.defined()) scale.push_back(m.scale);
  }
  return {torch::cat(data), scale.empty() ? torch::Tensor() : torch::cat(scale)};
}

// `w` [out, in] (float32, CPU) as int8 with one scale per output row (symmetric, the largest
// magnitude of the row maps to 127).
Matrix QuantizeInt8(const torch::Tensor& w);

// x [rows, in] times W^T, plus b when defined: [rows, out]. On the CPU x is fp32 and W any
// held dtype; with gradients, or on CUDA, libtorch's linear.
torch::Tensor Linear(const torch::Tensor& x, const Matrix& w, const torch::Tensor& b);

// Rows `ids` of an embedding matrix, in `dtype` (int8 rows times their scale, in fp32).
torch::Tensor Embed(const Matrix& e, const torch::Tensor& ids, torch::ScalarType dtype);

// One line naming the code Linear runs for weights held as `dtype_name` (fp32, bf16, fp16,
// int8) on `device`: the instruction set and kernel for decode-sized steps and for prefill.
std::string LinearKernelPath(const std::string& dtype_name, const torch::Device& device);

}  // namespace gpeserve::model
