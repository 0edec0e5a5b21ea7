// How a model is loaded for serving: the weights' dtype, the device, the CPU threads. Plain C++
// (no libtorch), so that flag parsing and configuration code need not include the model.
//
// Thread-safety: plain values.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace gpeserve::model {

struct ModelOptions {
  // How the weights are held for serving: kServingDtypeChoices (see ServingDtype).
  std::string dtype = "auto";
  std::string device = "cpu";  // cpu | cuda | cuda:N
  int threads = 0;             // CPU intra-op threads; 0 = all cores
  // How CPU activations enter the products with bf16 weights: kCpuActivationChoices (see
  // CpuActivations).
  std::string cpu_activations = "fp32";
};

// The serving dtype names the weights' format in memory. On the CPU the activations and attention
// are fp32 whatever it is (bf16 weights: see CpuActivations), and the linear layers run the
// cpu_matmul.h kernels (bf16/fp16 widen to fp32 exactly in registers; int8 is symmetric per output
// row, made at load or by `gpe quantize`; q8_0, q4_0 and q4_1 are ggml's blocks of 32 weights with
// a scale each, kept as a GGUF file holds them or made at load). On CUDA the whole model runs in
// the serving dtype (fp32, bf16, fp16; int8 and the blocks are CPU-only).
//   gguf: a GGUF file's matrices as the file holds them where a kernel reads them (F32, F16,
//   BF16, Q8_0, Q4_0, Q4_1), the other quantized types widened to fp32 at load.
//   auto: the fastest exact choice here: the checkpoint's own dtype (int8 for a quantized
//   folder, gguf for a GGUF file with quantized matrices on the CPU), except that bf16/fp16
//   weights are served as fp32 on a CPU without AVX2.
enum class ServingDtype { kAuto, kF32, kBF16, kF16, kInt8, kQ8_0, kQ4_0, kQ4_1, kGguf };

// For command-line flags: the choices and what they mean.
inline constexpr char kServingDtypeChoices[] = "auto|fp32|bf16|fp16|int8|q8_0|q4_0|q4_1|gguf";
inline constexpr char kServingDtypeHelp[] =
    "how the weights are held (CPU activations fp32 unless --cpu_activations); auto: the fastest "
    "exact one "
    "on this machine (a GGUF file's own types); q8_0|q4_0|q4_1: ggml's blocks, made at load "
    "where the file holds others";

// How a CPU model's activations enter its products with bf16 weights (issue 46).
//   fp32: as they are; the weights widen exactly, so the products are exact (the results that
//   match transformers in fp32).
//   bf16: each activation row rounded to bf16 first (to nearest even), then multiplied with
//   AVX512-BF16's dot products where the CPU has them (twice the multiply-adds of an fp32 FMA,
//   no widening of the weights), else widened back to fp32; sums in fp32 either way. Results
//   move by bf16's rounding of the activations (8 bits of mantissa), each row alone as before.
//   auto: bf16 where the CPU has AVX512-BF16, else fp32.
// Matrices held in other dtypes, attention, norms and the KV cache keep fp32; CUDA ignores it.
enum class CpuActivations { kFp32, kBf16, kAuto };
inline constexpr char kCpuActivationChoices[] = "fp32|bf16|auto";
inline constexpr char kCpuActivationsHelp[] =
    "CPU activations into bf16 weights: fp32 (exact), bf16 (rounded to bf16 for AVX512-BF16's "
    "dot products: faster steps of many rows, results within bf16 rounding), auto (bf16 where "
    "the CPU has AVX512-BF16)";
// Parses kCpuActivationChoices' names.
absl::StatusOr<CpuActivations> ParseCpuActivations(const std::string& name);

// Parses "auto", "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16", "int8", "q8_0",
// "q4_0", "q4_1", "gguf".
absl::StatusOr<ServingDtype> ParseServingDtype(const std::string& name);

}  // namespace gpeserve::model
