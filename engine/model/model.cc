#include "engine/model/model.h"

#include <torch/cuda.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/formats/gguf_tokenizer.h"
#include "engine/kernels/cpu_matmul.h"
#include "engine/model/checkpoint.h"

namespace gpeserve::model {
namespace {

// The checkpoint's tokenizer: tokenizer.json (+ tokenizer_config.json) in a folder, the
// tokenizer.ggml.* metadata of a GGUF file; null when there is none.
absl::StatusOr<std::shared_ptr<const tokenizer::Tokenizer>> LoadTokenizer(
    const Checkpoint& checkpoint) {
  if (checkpoint.is_gguf()) {
    if (!GgufHasTokenizer(*checkpoint.gguf())) return nullptr;
    return GgufTokenizer(*checkpoint.gguf());
  }
  if (!std::filesystem::exists(checkpoint.path() + "/tokenizer.json")) return nullptr;
  return tokenizer::Tokenizer::Load(checkpoint.path());
}

absl::StatusOr<torch::Device> ParseDevice(const std::string& name) {
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name == "cuda" || name.starts_with("cuda:")) {
    if (!torch::cuda::is_available()) {
      return absl::FailedPreconditionError(
          absl::StrCat("device '", name, "' requested but this libtorch sees no CUDA device"));
    }
    try {
      return torch::Device(name);
    } catch (const c10::Error& e) {
      return absl::InvalidArgumentError(absl::StrCat("bad device '", name, "'"));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", name, "' (cpu, cuda, cuda:N)"));
}

const char* ServingDtypeName(ServingDtype dtype) {
  switch (dtype) {
    case ServingDtype::kAuto:
      return "auto";
    case ServingDtype::kF32:
      return "fp32";
    case ServingDtype::kBF16:
      return "bf16";
    case ServingDtype::kF16:
      return "fp16";
    case ServingDtype::kInt8:
      return "int8";
    case ServingDtype::kQ8_0:
      return "q8_0";
    case ServingDtype::kQ4_0:
      return "q4_0";
    case ServingDtype::kQ4_1:
      return "q4_1";
    case ServingDtype::kGguf:
      return "gguf";
  }
  return "?";
}

// The block type a serving dtype holds its matrices in (kF32 for the others).
cpu::WeightType ServingBlocks(ServingDtype dtype) {
  switch (dtype) {
    case ServingDtype::kQ8_0:
      return cpu::WeightType::kQ8_0;
    case ServingDtype::kQ4_0:
      return cpu::WeightType::kQ4_0;
    case ServingDtype::kQ4_1:
      return cpu::WeightType::kQ4_1;
    default:
      return cpu::WeightType::kF32;
  }
}

// The block type the kernels read a GGUF tensor type as (kF32 for the others).
cpu::WeightType GgufBlocks(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0:
      return cpu::WeightType::kQ8_0;
    case GgmlType::kQ4_0:
      return cpu::WeightType::kQ4_0;
    case GgmlType::kQ4_1:
      return cpu::WeightType::kQ4_1;
    default:
      return cpu::WeightType::kF32;
  }
}

// The serving dtype `requested` resolves to for the checkpoint's weights, stored as `stored`
// (its embedding's dtype) on `device`, or why it is refused.
absl::StatusOr<ServingDtype> ResolveServingDtype(ServingDtype requested, DType stored,
                                                 const Checkpoint& checkpoint,
                                                 const torch::Device& device) {
  const std::string& dir = checkpoint.path();
  const bool blocks =
      requested == ServingDtype::kGguf || cpu::IsBlockType(ServingBlocks(requested));
  if (requested == ServingDtype::kGguf && !checkpoint.is_gguf()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype gguf serves a GGUF file's own types, but ", dir,
                     " is a folder: name a dtype (q8_0, q4_0, q4_1 quantize it at load), or auto"));
  }
  if (blocks && device.is_cuda()) {
    return absl::UnimplementedError(
        absl::StrCat("--dtype ", ServingDtypeName(requested),
                     ": ggml's blocks run on the CPU only: serve CUDA in bf16 or fp16 "
                     "(--dtype bf16; a GGUF file's blocks are widened at load)"));
  }
  if (stored == DType::kI8) {
    if (requested != ServingDtype::kAuto && requested != ServingDtype::kInt8) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, " holds int8 weights (written by gpe quantize), which cannot be served as ",
          ServingDtypeName(requested),
          ": use --dtype int8 (or auto), or the folder it was "
          "quantized from"));
    }
    requested = ServingDtype::kInt8;
  }
  if (requested == ServingDtype::kAuto) {
    // A GGUF file's quantized matrices stay as they are where the kernels read them.
    if (checkpoint.has_quantized_matrices() && device.is_cpu() &&
        cpu::ActiveIsa() != cpu::Isa::kScalar) {
      return ServingDtype::kGguf;
    }
    switch (stored) {
      case DType::kBF16:
      case DType::kF16:
        // Exact either way; 16-bit reads half the bytes where a kernel widens it in registers.
        if (device.is_cuda() || cpu::ActiveIsa() != cpu::Isa::kScalar) {
          return stored == DType::kBF16 ? ServingDtype::kBF16 : ServingDtype::kF16;
        }
        return ServingDtype::kF32;
      default:
        return ServingDtype::kF32;
    }
  }
  if (device.is_cuda() && requested == ServingDtype::kInt8) {
    return absl::UnimplementedError(
        "int8 weights run on the CPU only: serve CUDA in bf16 or fp16 (--dtype bf16)");
  }
  if (device.is_cpu() && requested != ServingDtype::kF32 &&
      cpu::DetectedIsa() == cpu::Isa::kScalar) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--dtype ", ServingDtypeName(requested),
        " on this CPU (it lacks AVX2, FMA or F16C) would run the scalar kernels, several times "
        "slower than fp32's BLAS: serve with --dtype fp32 (or auto, which picks it)"));
  }
  return requested;
}

}  // namespace

absl::StatusOr<ServingDtype> ParseServingDtype(const std::string& name) {
  if (name == "auto") return ServingDtype::kAuto;
  if (name == "fp32" || name == "float32") return ServingDtype::kF32;
  if (name == "bf16" || name == "bfloat16") return ServingDtype::kBF16;
  if (name == "fp16" || name == "float16") return ServingDtype::kF16;
  if (name == "int8") return ServingDtype::kInt8;
  if (name == "q8_0") return ServingDtype::kQ8_0;
  if (name == "q4_0") return ServingDtype::kQ4_0;
  if (name == "q4_1") return ServingDtype::kQ4_1;
  if (name == "gguf") return ServingDtype::kGguf;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "' (",
                   absl::StrReplaceAll(kServingDtypeChoices, {{"|", ", "}}), ")"));
}

absl::StatusOr<CpuActivations> ParseCpuActivations(const std::string& name) {
  if (name == "fp32") return CpuActivations::kFp32;
  if (name == "bf16") return CpuActivations::kBf16;
  if (name == "auto") return CpuActivations::kAuto;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown CPU activations '", name, "' (",
                   absl::StrReplaceAll(kCpuActivationChoices, {{"|", ", "}}), ")"));
}

torch::ScalarType ServingScalarType(ServingDtype dtype) {
  switch (dtype) {
    case ServingDtype::kBF16:
      return torch::kBFloat16;
    case ServingDtype::kF16:
      return torch::kFloat16;
    case ServingDtype::kInt8:
      return torch::kChar;
    default:
      return torch::kFloat32;
  }
}

const char* Model::weight_dtype_name() const { return ServingDtypeName(weight_dtype_); }

absl::StatusOr<std::shared_ptr<const Model>> Model::Load(const std::string& dir,
                                                         const ModelOptions& options) {
  auto dtype = ParseServingDtype(options.dtype);
  if (!dtype.ok()) return dtype.status();
  auto device = ParseDevice(options.device);
  if (!device.ok()) return device.status();
  auto activations = ParseCpuActivations(options.cpu_activations);
  if (!activations.ok()) return activations.status();
  auto checkpoint = Checkpoint::Open(dir);
  if (!checkpoint.ok()) return checkpoint.status();
  if (device->is_cpu()) {
    int threads = options.threads > 0 ? options.threads
                                      : static_cast<int>(std::thread::hardware_concurrency());
#if defined(GPESERVE_TSAN)
    // ThreadSanitizer cannot see the fork and join of OpenMP (Debian's libgomp is not
    // instrumented): a sanitizer build computes on one thread (scripts/sanitize tsan).
    threads = 1;
#endif
    torch::set_num_threads(std::max(1, threads));
  }

  std::shared_ptr<Model> model(new Model());
  model->checkpoint_ = *checkpoint;
  model->config_ = (*checkpoint)->config();
  model->device_ = *device;
  const ModelConfig& c = model->config_;

  auto tok = LoadTokenizer(**checkpoint);
  if (!tok.ok()) return tok.status();
  if (*tok != nullptr && (*tok)->vocab_size() > c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": the tokenizer has ", (*tok)->vocab_size(), " tokens but the model's vocab_size is ",
        c.vocab_size, ": tokenizer and model do not match"));
  }
  model->tokenizer_ = *std::move(tok);

  auto stored = (*checkpoint)->EmbeddingDType();
  if (!stored.ok()) return stored.status();
  if ((*stored == DType::kI8) != c.int8_weights) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": model.embed_tokens.weight is ", DTypeName(*stored), " but config.json ",
        c.int8_weights ? "says the folder is quantized (quantization_config)"
                       : "has no quantization_config"));
  }
  auto serving = ResolveServingDtype(*dtype, *stored, **checkpoint, *device);
  if (!serving.ok()) return serving.status();
  // On CUDA activations run in the serving dtype; Gemma 2's overflow fp16 (transformers warns
  // likewise). The CPU computes in fp32 whatever the weights.
  if (device->is_cuda() && *serving == ServingDtype::kF16 && c.scale_embeddings) {
    return absl::FailedPreconditionError(
        "Gemma's activations overflow fp16: serve it on CUDA with --dtype bf16 (or fp32)");
  }
  model->weight_dtype_ = *serving;
  model->dtype_ = device->is_cpu() ? torch::kFloat32 : ServingScalarType(*serving);
  // bf16 activations go into the bf16 matrices only (linear.h, Matrix::bf16_activations).
  const bool bf16_activations =
      device->is_cpu() && (*activations == CpuActivations::kBf16 ||
                           (*activations == CpuActivations::kAuto && cpu::HasBf16Dot()));
  model->kernel_path_ = LinearKernelPath(ServingDtypeName(*serving), *device, bf16_activations);
  try {
    const Checkpoint& source = **checkpoint;
    // Matrices: the serving dtype; int8 as stored by gpe quantize, or quantized here; blocks
    // as the GGUF file holds them, or quantized here.
    auto load_matrix = [&](const WeightSpec& spec) -> absl::StatusOr<Matrix> {
      if (c.int8_weights) {
        auto data = source.Load(spec, torch::kChar, model->device_);
        if (!data.ok()) return data.status();
        auto scale = source.LoadScale(spec, model->device_);
        if (!scale.ok()) return scale.status();
        return Matrix{*std::move(data), *std::move(scale)};
      }
      if (*serving == ServingDtype::kGguf || cpu::IsBlockType(ServingBlocks(*serving))) {
        cpu::WeightType stored_blocks = cpu::WeightType::kF32;
        torch::ScalarType widened = torch::kFloat32;
        if (source.is_gguf()) {
          auto type = source.GgufType(spec);
          if (!type.ok()) return type.status();
          stored_blocks = GgufBlocks(*type);
          if (*type == GgmlType::kF16) widened = torch::kFloat16;
          if (*type == GgmlType::kBF16) widened = torch::kBFloat16;
        }
        const cpu::WeightType wanted =
            *serving == ServingDtype::kGguf ? stored_blocks : ServingBlocks(*serving);
        if (cpu::IsBlockType(wanted) && wanted == stored_blocks) {
          auto data = source.LoadBlocks(spec);
          if (!data.ok()) return data.status();
          return Matrix{*std::move(data), torch::Tensor(), wanted};
        }
        // gguf: F16 and BF16 as they are, the other types widened to fp32.
        auto full =
            source.Load(spec, cpu::IsBlockType(wanted) ? torch::kFloat32 : widened, model->device_);
        if (!full.ok()) return full.status();
        if (!cpu::IsBlockType(wanted)) return Matrix{*std::move(full), torch::Tensor()};
        auto quantized = QuantizeBlocks(*full, wanted);
        if (!quantized.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(dir, ": ", spec.name, ": ", quantized.status().message()));
        }
        return quantized;
      }
      if (*serving != ServingDtype::kInt8) {
        auto data = source.Load(spec, ServingScalarType(*serving), model->device_);
        if (!data.ok()) return data.status();
        return Matrix{*std::move(data), torch::Tensor()};
      }
      auto full = source.Load(spec, torch::kFloat32, model->device_);
      if (!full.ok()) return full.status();
      return QuantizeInt8(*full);
    };
    Weights& w = model->weights_;
    w.layers.resize(c.num_layers);
    for (const WeightSpec& spec : WeightLayout(c)) {
      if (spec.kind == WeightSpec::Kind::kMatrix) {
        auto matrix = load_matrix(spec);
        if (!matrix.ok()) return matrix.status();
        matrix->bf16_activations = bf16_activations && !matrix->has_blocks() &&
                                   matrix->data.scalar_type() == torch::kBFloat16;
        PlaceMatrix(spec, *matrix, w);
      } else {
        // Norms and biases: the activation dtype.
        auto vector = source.Load(spec, model->dtype_, model->device_);
        if (!vector.ok()) return vector.status();
        HeldVector(spec, w) = *std::move(vector);
      }
    }
    if (c.tie_word_embeddings) w.lm_head = w.embed;
    model->rotary_ = RotaryEmbedding(c, model->device_);
    if (c.rope_local_theta > 0) {
      ModelConfig local = c;
      local.rope_theta = c.rope_local_theta;
      local.rope_scaling = RopeScaling();
      model->local_rotary_ = RotaryEmbedding(local, model->device_);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat(dir, ": libtorch error while loading: ", e.what_without_backtrace()));
  }
  return std::shared_ptr<const Model>(std::move(model));
}

RotaryTables Model::Rotary(const torch::Tensor& positions, torch::ScalarType dtype) const {
  RotaryTables tables;
  auto [cos, sin] = rotary_.Tables(positions);
  tables.cos = cos.to(dtype).unsqueeze(1);  // [T, 1, R]
  tables.sin = sin.to(dtype).unsqueeze(1);
  if (config_.rope_local_theta > 0) {
    auto [local_cos, local_sin] = local_rotary_.Tables(positions);
    tables.local_cos = local_cos.to(dtype).unsqueeze(1);
    tables.local_sin = local_sin.to(dtype).unsqueeze(1);
  }
  return tables;
}

absl::StatusOr<torch::Tensor> Model::Forward(const torch::Tensor& tokens,
                                             const torch::Tensor& positions,
                                             const torch::Tensor& logit_rows,
                                             AttentionContext& attention,
                                             std::span<const AdapterSpan> adapters) const {
  const ModelConfig& c = config_;
  if (tokens.dim() != 1 || positions.dim() != 1 || tokens.size(0) != positions.size(0)) {
    return absl::InvalidArgumentError("tokens and positions must be 1-D and of equal length");
  }
  const int64_t t = tokens.size(0);
  if (t == 0) return absl::InvalidArgumentError("no tokens to run");
  try {
    c10::InferenceMode guard;
    const torch::Tensor ids = tokens.to(device_, torch::kInt64);
    const torch::Tensor pos = positions.to(device_, torch::kInt64);
    const torch::Tensor rows = logit_rows.to(device_, torch::kInt64);
    if (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ids must be in [0, ", c.vocab_size, ")"));
    }
    if (pos.min().item<int64_t>() < 0) {
      return absl::InvalidArgumentError("position ids must be non-negative");
    }
    if (rows.numel() > 0 && (rows.min().item<int64_t>() < 0 || rows.max().item<int64_t>() >= t)) {
      return absl::InvalidArgumentError(absl::StrCat("logit rows must be in [0, ", t, ")"));
    }
    // The adapters' runs over the logit rows (ascending): the rows inside each token run.
    std::vector<AdapterSpan> row_spans;
    if (!adapters.empty()) {
      const torch::Tensor cpu_rows = rows.to(torch::kCPU).contiguous();
      const std::span<const int64_t> r(cpu_rows.data_ptr<int64_t>(), cpu_rows.numel());
      if (!std::is_sorted(r.begin(), r.end())) {
        return absl::InvalidArgumentError("logit rows must be ascending when adapters are used");
      }
      int64_t end = 0;
      for (const AdapterSpan& span : adapters) {
        if (span.adapter == nullptr || span.begin < end || span.count < 0 ||
            span.begin + span.count > t) {
          return absl::InvalidArgumentError(absl::StrCat(
              "adapter runs must be disjoint, in order and within the ", t, " tokens"));
        }
        end = span.begin + span.count;
        const auto lo = std::lower_bound(r.begin(), r.end(), span.begin) - r.begin();
        const auto hi = std::lower_bound(r.begin(), r.end(), end) - r.begin();
        if (hi > lo) row_spans.push_back({span.adapter, lo, hi - lo});
      }
    }
    const torch::Tensor x =
        TransformerHidden(c, weights_, ids, Rotary(pos, dtype_), attention, adapters);
    return LmLogits(c, weights_, x.index_select(0, rows), row_spans)
        .to(torch::kCPU, torch::kFloat32);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("libtorch error in forward: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<std::shared_ptr<const Model>> Model::WithMergedAdapter(
    const Adapter& adapter) const {
  if (adapter.layers.size() != weights_.layers.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("adapter ", adapter.dir, " was not loaded for this model"));
  }
  try {
    std::shared_ptr<Model> merged(new Model(*this));
    merged->weights_ = MergeAdapter(weights_, merged->config_, adapter);
    return std::shared_ptr<const Model>(std::move(merged));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("libtorch error while merging ", adapter.dir, ": ",
                                            e.what_without_backtrace()));
  }
}

int64_t Model::weight_bytes() const {
  int64_t bytes = 0;
  auto add = [&bytes](const torch::Tensor& t) {
    if (t.defined()) bytes += t.numel() * t.element_size();
  };
  for (const WeightSpec& spec : WeightLayout(config_)) {
    if (spec.kind != WeightSpec::Kind::kMatrix) {
      add(HeldVector(spec, weights_));
      continue;
    }
    for (const Matrix* m : HeldMatrices(spec, weights_)) {
      add(m->data);
      add(m->scale);
    }
  }
  return bytes;
}

}  // namespace gpeserve::model
