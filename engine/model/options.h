// How a model is loaded for serving: the weights' dtype, the device, the CPU threads. Plain C++
// (no libtorch), so that flag parsing and configuration code need not include the model.
//
// Thread-safety: plain values.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace gpeserve::model {

struct ModelOptions {
  // How the weights are held for serving: auto | fp32 | bf16 | fp16 | int8 (see ServingDtype).
  std::string dtype = "auto";
  std::string device = "cpu";  // cpu | cuda | cuda:N
  int threads = 0;             // CPU intra-op threads; 0 = all cores
};

// The serving dtype names the weights' format in memory. On the CPU the activations, the KV
// cache and attention are fp32 whatever it is, and the linear layers run the cpu_matmul.h
// kernels (bf16/fp16 widen to fp32 exactly in registers; int8 is symmetric per output row, made
// at load or by `gpe quantize`). On CUDA the whole model runs in the serving dtype (fp32, bf16,
// fp16; int8 is CPU-only).
//   auto: the fastest exact choice here: the checkpoint's own dtype (int8 for a quantized
//   folder), except that bf16/fp16 weights are served as fp32 on a CPU without AVX2.
enum class ServingDtype { kAuto, kF32, kBF16, kF16, kInt8 };

// For command-line flags: the choices and what they mean.
inline constexpr char kServingDtypeChoices[] = "auto|fp32|bf16|fp16|int8";
inline constexpr char kServingDtypeHelp[] =
    "how the weights are held (CPU activations are fp32 always); auto: the fastest exact one "
    "on this machine";

// Parses "auto", "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16", "int8".
absl::StatusOr<ServingDtype> ParseServingDtype(const std::string& name);

}  // namespace gpeserve::model
