#include "engine/model/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/formats/gguf_config.h"
#include "engine/kernels/cpu_matmul.h"
#include "engine/kernels/ggml_quants.h"
#include "nlohmann/json.hpp"

namespace gpeserve::model {
namespace {

// The safetensors files of folder `dir`: model.safetensors, or the shards its index names.
absl::StatusOr<std::vector<std::shared_ptr<const SafetensorsFile>>> OpenSafetensors(
    const std::string& dir) {
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  std::vector<std::string> shard_names;
  if (std::filesystem::exists(single)) {
    shard_names.push_back("model.safetensors");
  } else if (std::filesystem::exists(index)) {
    std::ifstream in(index);
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(index, ": not valid JSON: ", e.what()));
    }
    if (!json.contains("weight_map") || !json["weight_map"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(index, ": missing \"weight_map\""));
    }
    std::set<std::string> names;
    for (const auto& [tensor, file] : json["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(index, ": weight_map['", tensor, "']: expected a file name"));
      }
      names.insert(file.get<std::string>());
    }
    shard_names.assign(names.begin(), names.end());
  } else {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no model.safetensors or model.safetensors.index.json"));
  }
  std::vector<std::shared_ptr<const SafetensorsFile>> files;
  for (const std::string& name : shard_names) {
    auto file = SafetensorsFile::Open(dir + "/" + name);
    if (!file.ok()) return file.status();
    files.push_back(*std::move(file));
  }
  return files;
}

// True for a GGUF tensor type in blocks with scales (not F32, F16 or BF16).
bool IsQuantized(GgmlType type) {
  return type != GgmlType::kF32 && type != GgmlType::kF16 && type != GgmlType::kBF16;
}

// The safetensors dtype a GGUF tensor type is served like (quantized types: dequantized to F32).
DType GgufServedDType(GgmlType type) {
  switch (type) {
    case GgmlType::kF16:
      return DType::kF16;
    case GgmlType::kBF16:
      return DType::kBF16;
    default:
      return DType::kF32;
  }
}

// llama.cpp's converter interleaves each head's rows of a Llama q or k projection (rotary on
// adjacent pairs, its "normal" rope); Hugging Face rotates the two halves of the head. Row
// h * d + 2 i + j of the file is row h * d + j * d / 2 + i of the checkpoint.
torch::Tensor UndoRotaryInterleave(const torch::Tensor& w, int64_t heads) {
  const std::vector<int64_t> shape(w.sizes().begin(), w.sizes().end());
  return w.reshape({heads, shape[0] / heads / 2, 2, -1})
      .transpose(1, 2)
      .reshape(shape)
      .contiguous();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Checkpoint>> Checkpoint::Open(const std::string& path) {
  std::shared_ptr<Checkpoint> checkpoint(new Checkpoint());
  checkpoint->path_ = path;
  if (std::filesystem::is_regular_file(path)) {
    auto file = GgufFile::Open(path);
    if (!file.ok()) return file.status();
    auto config = GgufModelConfig(**file);
    if (!config.ok()) return config.status();
    for (const WeightSpec& spec : WeightLayout(*config)) {
      const GgufTensorInfo* info = (*file)->Find(spec.gguf_name);
      if (spec.kind == WeightSpec::Kind::kMatrix && info != nullptr && IsQuantized(info->type)) {
        checkpoint->has_quantized_matrices_ = true;
      }
    }
    checkpoint->gguf_ = *std::move(file);
    checkpoint->config_ = *std::move(config);
    return std::shared_ptr<const Checkpoint>(std::move(checkpoint));
  }
  auto config = LoadModelConfig(path);
  if (!config.ok()) return config.status();
  auto files = OpenSafetensors(path);
  if (!files.ok()) return files.status();
  checkpoint->config_ = *std::move(config);
  checkpoint->files_ = *std::move(files);
  if (checkpoint->config_.multimodal) {
    if (absl::Status s = checkpoint->FindLanguageModel(); !s.ok()) return s;
  }
  return std::shared_ptr<const Checkpoint>(std::move(checkpoint));
}

absl::Status Checkpoint::FindLanguageModel() {
  // The original checkpoints' names, and those transformers 4.52 and later save.
  constexpr std::pair<const char*, const char*> kLayouts[] = {
      {"language_model.model.", "language_model.lm_head."},
      {"model.language_model.", "lm_head."},
  };
  for (const auto& [model, head] : kLayouts) {
    const std::string embed = absl::StrCat(model, "embed_tokens.weight");
    for (const auto& file : files_) {
      if (file->Find(embed) == nullptr) continue;
      model_prefix_ = model;
      head_prefix_ = head;
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(absl::StrCat(path_, ": ", config_.architecture_name,
                                          " without its language model's embedding (looked for "
                                          "'language_model.model.embed_tokens.weight' and "
                                          "'model.language_model.embed_tokens.weight')"));
}

std::string Checkpoint::StoredName(const std::string& name) const {
  constexpr std::string_view kModel = "model.", kHead = "lm_head.";
  if (name.starts_with(kModel)) return model_prefix_ + name.substr(kModel.size());
  if (name.starts_with(kHead)) return head_prefix_ + name.substr(kHead.size());
  return name;
}

absl::StatusOr<DType> Checkpoint::EmbeddingDType() const {
  const std::vector<WeightSpec> layout = WeightLayout(config_);
  const WeightSpec& embed = layout.front();  // the layout begins with the embedding
  if (gguf_ != nullptr) {
    const GgufTensorInfo* info = gguf_->Find(embed.gguf_name);
    if (info == nullptr) {
      return absl::NotFoundError(
          absl::StrCat(path_, ": tensor '", embed.gguf_name, "' is missing"));
    }
    return GgufServedDType(info->type);
  }
  const std::string stored = StoredName(embed.name);
  for (const auto& file : files_) {
    if (const TensorInfo* info = file->Find(stored)) return info->dtype;
  }
  return absl::NotFoundError(absl::StrCat(path_, ": tensor '", stored, "' is missing"));
}

absl::StatusOr<torch::Tensor> Checkpoint::Load(const WeightSpec& spec, torch::ScalarType dtype,
                                               torch::Device device) const {
  if (gguf_ != nullptr) return LoadGguf(spec, dtype, device);
  return LoadSafetensors(StoredName(spec.name), spec.shape, dtype, device);
}

absl::StatusOr<torch::Tensor> Checkpoint::LoadScale(const WeightSpec& spec,
                                                    torch::Device device) const {
  return LoadSafetensors(StoredName(spec.name) + "_scale", {spec.shape[0]}, torch::kFloat32,
                         device);
}

absl::StatusOr<torch::Tensor> Checkpoint::LoadSafetensors(const std::string& name,
                                                          const std::vector<int64_t>& shape,
                                                          torch::ScalarType dtype,
                                                          torch::Device device) const {
  for (const auto& file : files_) {
    const TensorInfo* info = file->Find(name);
    if (info == nullptr) continue;
    if (info->shape != shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(file->path(), ": tensor '", name, "' has shape ", ShapeString(info->shape),
                       " but config.json implies ", ShapeString(shape)));
    }
    // int8 values mean something only with their scales: never converted to or from.
    if ((info->dtype == DType::kI8) != (dtype == torch::kChar)) {
      return absl::InvalidArgumentError(absl::StrCat(
          file->path(), ": tensor '", name, "' is ", DTypeName(info->dtype),
          info->dtype == DType::kI8
              ? " but config.json has no quantization_config (int8 weights need their scales)"
              : " but config.json's quantization_config says the matrices are I8"));
    }
    torch::Tensor view = torch::from_blob(const_cast<void*>(file->Data(*info)), info->shape,
                                          torch::TensorOptions().dtype(TorchType(info->dtype)));
    // Same dtype on the CPU: the tensor stays a view of the mapping (no copy).
    return view.to(device, dtype);
  }
  std::vector<std::string> paths;
  for (const auto& file : files_) paths.push_back(file->path());
  return absl::NotFoundError(
      absl::StrCat("tensor '", name, "' is missing (looked in ", absl::StrJoin(paths, ", "), ")"));
}

absl::StatusOr<const GgufTensorInfo*> Checkpoint::FindGguf(const WeightSpec& spec) const {
  if (gguf_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(path_, " is not a GGUF file"));
  }
  const GgufTensorInfo* info = gguf_->Find(spec.gguf_name);
  if (info == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(path_, ": tensor '", spec.gguf_name, "' (", spec.name, ") is missing"));
  }
  if (info->shape() != spec.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": tensor '", spec.gguf_name, "' has shape ", ShapeString(info->shape()),
        " but the file's metadata implies ", ShapeString(spec.shape)));
  }
  return info;
}

absl::StatusOr<GgmlType> Checkpoint::GgufType(const WeightSpec& spec) const {
  auto info = FindGguf(spec);
  if (!info.ok()) return info.status();
  return (*info)->type;
}

torch::Tensor Checkpoint::UndoInterleave(const WeightSpec& spec, torch::Tensor t) const {
  const Role role = spec.parts.front().role;
  if (config_.architecture == Architecture::kLlama &&
      (role == Role::kQ || role == Role::kQBias || role == Role::kK || role == Role::kKBias)) {
    const bool q = role == Role::kQ || role == Role::kQBias;
    t = UndoRotaryInterleave(t, q ? config_.num_heads : config_.num_kv_heads);
  }
  return t;
}

absl::StatusOr<torch::Tensor> Checkpoint::LoadBlocks(const WeightSpec& spec) const {
  auto info = FindGguf(spec);
  if (!info.ok()) return info.status();
  const int64_t rows = spec.shape[0];
  // Rows are whole blocks (ParseGguf checks that each row is).
  torch::Tensor t =
      torch::from_blob(const_cast<void*>(gguf_->Data(**info)),
                       {rows, static_cast<int64_t>((*info)->size) / rows}, torch::kUInt8);
  return UndoInterleave(spec, t);
}

absl::StatusOr<torch::Tensor> Checkpoint::LoadGguf(const WeightSpec& spec, torch::ScalarType dtype,
                                                   torch::Device device) const {
  auto found = FindGguf(spec);
  if (!found.ok()) return found.status();
  const GgufTensorInfo* info = *found;
  if (dtype == torch::kChar) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": a GGUF file holds no int8 folder"));
  }
  torch::Tensor t;
  const DType served = GgufServedDType(info->type);
  if (!IsQuantized(info->type)) {
    t = torch::from_blob(const_cast<void*>(gguf_->Data(*info)), spec.shape,
                         torch::TensorOptions().dtype(TorchType(served)));
  } else {
    const auto type = static_cast<uint32_t>(info->type);
    if (!cpu::CanDequantizeGgml(type)) {
      return absl::UnimplementedError(absl::StrCat(path_, ": tensor '", spec.gguf_name, "' is ",
                                                   GgmlTypeName(info->type),
                                                   ", which is not read yet (F32, F16, BF16, Q8_0, "
                                                   "Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)"));
    }
    t = torch::empty(spec.shape, torch::kFloat32);
    cpu::DequantizeGgml(type, gguf_->Data(*info), t.numel(), t.data_ptr<float>());
  }
  t = UndoInterleave(spec, t);
  if (config_.norm_weight_plus_one && spec.kind == WeightSpec::Kind::kNorm) {
    // Gemma's norms scale by (1 + w); llama.cpp's converter stores 1 + w.
    t = t.to(torch::kFloat32) - 1.0f;
  }
  return t.to(device, dtype);
}

}  // namespace gpeserve::model
