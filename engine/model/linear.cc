#include "engine/model/linear.h"

#include <ATen/Parallel.h>
#include <torch/nn/functional/linear.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "engine/kernels/cpu_gemm.h"
#include "engine/kernels/cpu_matmul.h"
#include "engine/model/paged_attention.h"

namespace gpeserve::model {
namespace {

// Activation rows up to which a CPU linear runs the cpu_matmul kernel (weights read once for
// all rows); beyond, a matrix-matrix product (oneDNN's sgemm, cpu_gemm.h, on weight tiles
// widened to fp32 unless they are fp32 already). On Zen 3 (AVX2) the kernel holds 55-74 GFLOP/s a
// core from 8 rows up while OpenBLAS's GEMM gives 45 at 32 rows and 62 at 64, 79 only at 512, and
// the widening costs extra: the crossover is past 64 rows (docs/model.md).
constexpr int64_t kKernelRows = 64;
// fp32 elements in one widened weight tile of the prefill path (16 MiB).
constexpr int64_t kTileElements = int64_t{4} << 20;

// The GEMM of steps beyond kKernelRows: oneDNN's, or libtorch's (OpenBLAS under Debian's
// libtorch) when the environment variable GPESERVE_CPU_GEMM is "libtorch" (to compare them in
// one run). Read once.
bool GemmIsLibtorch() {
  static const bool libtorch = [] {
    const char* v = std::getenv("GPESERVE_CPU_GEMM");
    return v != nullptr && std::string_view(v) == "libtorch";
  }();
  return libtorch;
}

// y[:, n0:n0+rows] = x w^T for fp32 rows w [rows, in] (all threads).
void Gemm(const torch::Tensor& x, const float* w, int64_t rows, torch::Tensor& y, int64_t n0) {
  const int64_t m = x.size(0), in = x.size(1), out = y.size(1);
  const std::string error =
      cpu::Sgemm(m, rows, in, x.data_ptr<float>(), in, w, in, y.data_ptr<float>() + n0, out);
  if (!error.empty()) throw std::runtime_error(error);  // the forward's boundary makes a Status
}

cpu::WeightType CpuWeightType(const Matrix& w) {
  return w.has_blocks() ? w.blocks : CpuElementType(w.data.scalar_type());
}

cpu::WeightView CpuView(const Matrix& w) {
  return {w.data.data_ptr(), w.scale.defined() ? w.scale.data_ptr<float>() : nullptr,
          CpuWeightType(w), w.data.size(0), w.in()};
}

// y = x W^T + b on the CPU for fp32 activations x [m, in] and any stored W (see kKernelRows).
torch::Tensor CpuLinear(const torch::Tensor& x, const Matrix& w, const torch::Tensor& b) {
  torch::Tensor xc = x.contiguous();
  const int64_t m = xc.size(0), out = w.data.size(0), in = w.in();
  const cpu::WeightView view = CpuView(w);
  const cpu::Isa isa = cpu::ActiveIsa();
  if (w.bf16_activations) {
    // Every row rounded alone, whatever the step: batched still equals alone.
    torch::Tensor rounded = torch::empty({m, in}, xc.options().dtype(torch::kBFloat16));
    auto* xb = reinterpret_cast<uint16_t*>(rounded.data_ptr());
    cpu::RoundToBf16(xc.data_ptr<float>(), m * in, xb);
    if (cpu::HasBf16Dot()) {
      // Every step size, prefill included, in blocks of kKernelRows activation rows: the dot
      // products keep a 64-row block compute-bound (reading the weights again per block costs
      // little next to it), and a row's sum never depends on the step.
      torch::Tensor y = torch::empty({m, out}, xc.options());
      const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
      float* yp = y.data_ptr<float>();
      at::parallel_for(0, out, 32, [&](int64_t begin, int64_t end) {
        for (int64_t i = 0; i < m; i += kKernelRows) {
          cpu::MatmulRowsBf16Dot(view, xb + i * in, std::min(kKernelRows, m - i), in, bp,
                                 yp + i * out, out, begin, end);
        }
      });
      return y;
    }
    // Without AVX512-BF16: the rounded values widened back (exactly) to fp32.
    xc = rounded.to(torch::kFloat32);
  }
  if (m <= kKernelRows) {
    torch::Tensor y = torch::empty({m, out}, xc.options());
    const float* xp = xc.data_ptr<float>();
    const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
    float* yp = y.data_ptr<float>();
    at::parallel_for(0, out, 32, [&](int64_t begin, int64_t end) {
      cpu::MatmulRows(isa, view, xp, m, in, bp, yp, out, begin, end);
    });
    return y;
  }
  if (view.type == cpu::WeightType::kF32) {
    if (GemmIsLibtorch()) {
      return b.defined() ? torch::nn::functional::linear(xc, w.data, b)
                         : torch::nn::functional::linear(xc, w.data);
    }
    torch::Tensor y = torch::empty({m, out}, xc.options());
    Gemm(xc, w.data.data_ptr<float>(), out, y, 0);
    if (b.defined()) y.add_(b);
    return y;
  }
  // Prefill: widen a tile of weight rows to fp32 (all threads), multiply it with the fp32 GEMM,
  // next tile.
  torch::Tensor y = torch::empty({m, out}, xc.options());
  const int64_t tile_rows = std::min(out, std::max<int64_t>(64, kTileElements / in));
  torch::Tensor tile = torch::empty({tile_rows, in}, xc.options());
  float* tp = tile.data_ptr<float>();
  for (int64_t n0 = 0; n0 < out; n0 += tile_rows) {
    const int64_t rows = std::min(tile_rows, out - n0);
    at::parallel_for(n0, n0 + rows, 16, [&](int64_t begin, int64_t end) {
      cpu::DequantizeRows(isa, view, begin, end, tp + (begin - n0) * in);
    });
    if (GemmIsLibtorch()) {
      y.narrow(1, n0, rows).copy_(torch::mm(xc, tile.narrow(0, 0, rows).t()));
    } else {
      Gemm(xc, tp, rows, y, n0);
    }
  }
  if (b.defined()) y.add_(b);
  return y;
}

}  // namespace

cpu::WeightType CpuElementType(torch::ScalarType type) {
  switch (type) {
    case torch::kBFloat16:
      return cpu::WeightType::kBF16;
    case torch::kFloat16:
      return cpu::WeightType::kF16;
    case torch::kChar:
      return cpu::WeightType::kInt8;
    default:
      return cpu::WeightType::kF32;
  }
}

torch::ScalarType TorchType(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return torch::kBFloat16;
    case DType::kF16:
      return torch::kFloat16;
    case DType::kI8:
      return torch::kChar;
    case DType::kF32:
      break;
  }
  return torch::kFloat32;
}

absl::StatusOr<DType> SafetensorsDType(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat32:
      return DType::kF32;
    case torch::kBFloat16:
      return DType::kBF16;
    case torch::kFloat16:
      return DType::kF16;
    case torch::kChar:
      return DType::kI8;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("a ", c10::toString(type), " tensor cannot be written to safetensors here"));
  }
}

Matrix QuantizeInt8(const torch::Tensor& w) {
  const torch::Tensor c = w.to(torch::kCPU, torch::kFloat32).contiguous();
  const int64_t rows = c.size(0), cols = c.size(1);
  Matrix q{torch::empty({rows, cols}, torch::kChar), torch::empty({rows}, torch::kFloat32)};
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    cpu::QuantizeRowsInt8(c.data_ptr<float>(), cols, begin, end, q.data.data_ptr<int8_t>(),
                          q.scale.data_ptr<float>());
  });
  return q;
}

absl::StatusOr<Matrix> QuantizeBlocks(const torch::Tensor& w, cpu::WeightType type) {
  const torch::Tensor c = w.to(torch::kCPU, torch::kFloat32).contiguous();
  const int64_t rows = c.size(0), cols = c.size(1);
  if (cols % cpu::kBlockWeights != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(cpu::WeightTypeName(type), " holds rows of whole blocks of ",
                     cpu::kBlockWeights, " weights, but this matrix has rows of ", cols));
  }
  Matrix q{torch::empty({rows, cpu::WeightBytes(type, cols)}, torch::kUInt8), torch::Tensor(),
           type};
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    cpu::QuantizeRowsBlocks(type, c.data_ptr<float>(), cols, begin, end, q.data.data_ptr());
  });
  return q;
}

torch::Tensor Dequantized(const Matrix& w) {
  if (!w.has_blocks()) {
    torch::Tensor f = w.data.to(torch::kFloat32);
    return w.scale.defined() ? f * w.scale.unsqueeze(1) : f;
  }
  const torch::Tensor data = w.data.contiguous();
  Matrix packed = w;
  packed.data = data;
  const cpu::WeightView view = CpuView(packed);
  torch::Tensor out = torch::empty({view.rows, view.cols}, torch::kFloat32);
  const cpu::Isa isa = cpu::ActiveIsa();
  at::parallel_for(0, view.rows, 16, [&](int64_t begin, int64_t end) {
    cpu::DequantizeRows(isa, view, begin, end, out.data_ptr<float>() + begin * view.cols);
  });
  return out;
}

torch::Tensor Linear(const torch::Tensor& x, const Matrix& w, const torch::Tensor& b) {
  // Training (gradients) and CUDA use libtorch; CPU inference our kernels.
  if (x.device().is_cpu() && !x.requires_grad() && !w.data.requires_grad()) {
    return CpuLinear(x, w, b);
  }
  // A frozen weight held in another dtype than the activations (a LoRA's base in training):
  // widened for this product.
  const torch::Tensor weight = w.has_blocks() || w.scale.defined() ? Dequantized(w).to(x.dtype())
                               : w.data.scalar_type() == x.scalar_type()
                                   ? w.data
                                   : w.data.to(x.scalar_type());
  return b.defined() ? torch::nn::functional::linear(x, weight, b)
                     : torch::nn::functional::linear(x, weight);
}

// Rows `ids` of the embedding, in `dtype`.
torch::Tensor Embed(const Matrix& e, const torch::Tensor& ids, torch::ScalarType dtype) {
  if (e.has_blocks()) {
    Matrix rows = e;
    rows.data = e.data.index_select(0, ids);
    return Dequantized(rows).to(dtype);
  }
  if (e.scale.defined()) {
    return e.data.index_select(0, ids).to(torch::kFloat32) *
           e.scale.index_select(0, ids).unsqueeze(1);
  }
  return e.data.index_select(0, ids).to(dtype);
}

std::string LinearKernelPath(const std::string& dtype_name, const torch::Device& device,
                             bool bf16_activations) {
  const std::string name =
      dtype_name == "gguf"
          ? std::string(
                "the GGUF file's own (q8_0, q4_0, q4_1, fp16, bf16 as stored; other "
                "quantized types widened to fp32 at load)")
          : dtype_name;
  if (device.is_cuda()) {
    return absl::StrCat("cuda: ", name, " weights and activations, libtorch (cuBLAS)");
  }
  const cpu::Isa isa = cpu::ActiveIsa();
  std::string path =
      absl::StrCat("cpu ", cpu::IsaName(isa), ", ", torch::get_num_threads(), " threads: ");
  if (bf16_activations && name == "bf16" && cpu::HasBf16Dot()) {
    absl::StrAppend(&path, "bf16 weights, bf16 activations (--cpu_activations): AVX512-BF16 dot ",
                    "products in blocks of ", kKernelRows, " rows, prefill included");
  } else {
    const bool blocks = name == "q8_0" || name == "q4_0" || name == "q4_1" || dtype_name == "gguf";
    // The block kernels (not the scalar ones) round each activation row to int8 blocks.
    const char* blocks_note = !blocks || isa == cpu::Isa::kScalar ? ""
                              : cpu::HasVnni()
                                  ? "; blocks: activations rounded to int8 blocks, AVX512-VNNI"
                                  : "; blocks: activations rounded to int8 blocks";
    absl::StrAppend(&path, name, " weights, fp32 activations; steps of up to ", kKernelRows,
                    " rows: cpu_matmul ", cpu::IsaName(isa), " ", name,
                    " kernel (weights read once per step", blocks_note, "); larger steps: ");
    const char* gemm = GemmIsLibtorch() ? "libtorch fp32 GEMM (GPESERVE_CPU_GEMM)" : "oneDNN sgemm";
    if (name == "fp32") {
      absl::StrAppend(&path, gemm);
    } else {
      absl::StrAppend(&path, name, " tiles widened to fp32 + ", gemm);
    }
    if (bf16_activations) {
      absl::StrAppend(&path, "; bf16 weights take bf16 activations (--cpu_activations): ",
                      cpu::HasBf16Dot() ? "AVX512-BF16 dot products"
                                        : "rounded, then widened back to fp32 (no AVX512-BF16)");
    }
  }
  if (cpu::IsaForced()) {
    absl::StrAppend(&path, " (GPESERVE_CPU_ISA forces ", cpu::IsaName(isa), "; this CPU runs ",
                    cpu::IsaName(cpu::DetectedIsa()), ")");
  }
  // Serving attention reads the paged KV cache in place (cpu_attention.h); the dense attention
  // of `gpe logits` and training goes through libtorch, whose BLAS may have misread the CPU.
  absl::StrAppend(&path, "; attention: ",
                  PagedAttention::InPlaceOnCpu()
                      ? absl::StrCat("paged in place, cpu_attention ",
                                     cpu::IsaName(isa == cpu::Isa::kScalar ? isa : cpu::Isa::kAvx2))
                      : std::string("libtorch (GPESERVE_CPU_ATTENTION)"),
                  "; ", cpu::BlasCoreReport(cpu::OpenBlasCore()));
  return path;
}

}  // namespace gpeserve::model
