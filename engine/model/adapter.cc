#include "engine/model/adapter.h"

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "engine/formats/safetensors.h"
#include "engine/model/model.h"
#include "engine/model/model_folder.h"

namespace gpeserve::model {
namespace {

// PEFT's prefix of every tensor of a causal-LM adapter.
constexpr char kPrefix[] = "base_model.model.";

// The adapter file's tensors by name, each taken at most once.
class AdapterTensors {
 public:
  AdapterTensors(std::shared_ptr<const SafetensorsFile> file, torch::ScalarType dtype,
                 torch::Device device)
      : file_(std::move(file)), dtype_(dtype), device_(device) {}

  bool Has(const std::string& name) const { return file_->Find(name) != nullptr; }

  // Tensor `name`: 2-D; `rows` / `cols` checked when >= 0; a copy in the activation dtype.
  absl::StatusOr<torch::Tensor> Take(const std::string& name, int64_t rows, int64_t cols,
                                     const std::string& what) {
    const TensorInfo* info = file_->Find(name);
    if (info == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_->path(), ": tensor '", name, "' is missing (", what, ")"));
    }
    if (info->dtype == DType::kI8) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_->path(), ": tensor '", name, "' is I8; adapters are read as floats"));
    }
    if (info->shape.size() != 2 || (rows >= 0 && info->shape[0] != rows) ||
        (cols >= 0 && info->shape[1] != cols)) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_->path(), ": tensor '", name, "' has shape ", ShapeString(info->shape),
                       " but ", what, " needs [", rows >= 0 ? absl::StrCat(rows) : "r", ", ",
                       cols >= 0 ? absl::StrCat(cols) : "r", "]"));
    }
    taken_.insert(name);
    const torch::Tensor view =
        torch::from_blob(const_cast<void*>(file_->Data(*info)), info->shape,
                         torch::TensorOptions().dtype(TorchType(info->dtype)));
    return view.to(device_, dtype_, /*non_blocking=*/false, /*copy=*/true);
  }

  // Tensors no module took.
  std::vector<std::string> Unused() const {
    std::vector<std::string> unused;
    for (const TensorInfo& t : file_->tensors()) {
      if (!taken_.contains(t.name)) unused.push_back(t.name);
    }
    return unused;
  }

  const std::string& path() const { return file_->path(); }

 private:
  std::shared_ptr<const SafetensorsFile> file_;
  torch::ScalarType dtype_;
  torch::Device device_;
  std::set<std::string> taken_;
};

// `full` (float) held like `like`: the same dtype, int8 with row scales, or the same blocks.
Matrix HeldLike(const torch::Tensor& full, const Matrix& like) {
  if (like.scale.defined()) return QuantizeInt8(full);
  if (like.has_blocks()) {
    auto blocks = QuantizeBlocks(full, like.blocks);
    if (!blocks.ok()) throw std::invalid_argument(std::string(blocks.status().message()));
    return *std::move(blocks);
  }
  return {full.to(like.data.device(), like.data.scalar_type()).contiguous(), torch::Tensor()};
}

}  // namespace

void SetLayerModule(LayerLora& l, const std::string& leaf, const LoraWeights& lora,
                    const ModelConfig& c) {
  const int64_t q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim,
                ff = c.intermediate_size;
  auto rows = [&lora](int64_t begin, int64_t count) {
    LoraWeights part = lora;
    part.b = lora.b.narrow(0, begin, count);
    return part;
  };
  if (leaf == "qkv_proj") {
    l.q = rows(0, q_dim);
    l.k = rows(q_dim, kv_dim);
    l.v = rows(q_dim + kv_dim, kv_dim);
  } else if (leaf == "gate_up_proj") {
    l.gate = rows(0, ff);
    l.up = rows(ff, ff);
  } else {
    LoraWeights* slot = leaf == "q_proj"      ? &l.q
                        : leaf == "k_proj"    ? &l.k
                        : leaf == "v_proj"    ? &l.v
                        : leaf == "o_proj"    ? &l.o
                        : leaf == "gate_proj" ? &l.gate
                        : leaf == "up_proj"   ? &l.up
                                              : &l.down;
    *slot = lora;
  }
}

void LayerLora::Stack() {
  auto stack = [](std::initializer_list<LoraWeights*> members) {
    std::vector<torch::Tensor> parts;
    int64_t rows = 0;
    const torch::Tensor* previous = nullptr;
    for (LoraWeights* w : members) {
      if (!w->defined()) continue;
      if (previous != nullptr && w->a.is_same(*previous)) {
        w->offset = rows - w->a.size(0);  // a fused projection's part: the same A
        continue;
      }
      w->offset = rows;
      rows += w->a.size(0);
      parts.push_back(w->a);
      previous = &w->a;
    }
    return parts.empty() ? torch::Tensor() : torch::cat(parts).contiguous();
  };
  qkv_a = stack({&q, &k, &v});
  gate_up_a = stack({&gate, &up});
}

torch::Tensor LoraWeights::Delta(const torch::Tensor& x) const {
  return torch::mm(torch::mm(x, a.t()) * scale, b.t());
}

torch::Tensor LoraWeights::EmbedDelta(const torch::Tensor& ids) const {
  return torch::mm(a.index_select(0, ids) * scale, b.t());
}

torch::Tensor LoraWeights::Dense() const {
  const torch::Tensor af = a.to(torch::kFloat32), bf = b.to(torch::kFloat32);
  // Embedding: a [vocab, r], b [hidden, r]; linear: a [r, in], b [out, r].
  return (embedding ? torch::mm(af, bf.t()) : torch::mm(bf, af)) * scale;
}

absl::StatusOr<std::shared_ptr<const Adapter>> LoadAdapter(const std::string& dir,
                                                           const Model& model,
                                                           const std::string& name) {
  namespace fs = std::filesystem;
  auto config = LoadAdapterConfig(dir);
  if (!config.ok()) return config.status();
  const std::string config_path = dir + "/adapter_config.json";
  const ModelConfig& mc = model.config();
  auto targeted = TargetedModules(*config, mc, config_path);
  if (!targeted.ok()) return targeted.status();
  const std::string path = dir + "/adapter_model.safetensors";
  if (!fs::exists(path)) {
    if (fs::exists(dir + "/adapter_model.bin")) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir,
          "/adapter_model.bin is a pickle, which gpeserve does not read: save the adapter "
          "with safe_serialization=True (PEFT's default) to get adapter_model.safetensors"));
    }
    return absl::NotFoundError(absl::StrCat(dir, ": no adapter_model.safetensors"));
  }
  auto file = SafetensorsFile::Open(path);
  if (!file.ok()) return file.status();
  AdapterTensors tensors(*file, model.dtype(), model.device());

  auto adapter = std::make_shared<Adapter>();
  adapter->name = name;
  adapter->dir = dir;
  adapter->config = *config;
  adapter->layers.resize(mc.num_layers);
  try {
    for (const AdaptableModule& module : *targeted) {
      const std::string key = kPrefix + module.name;
      const int64_t rank = config->RankOf(module.name);
      const std::string what = absl::StrCat(
          module.name, " (", module.in, " -> ", module.out, ") at rank ", rank, " (",
          config->rank_pattern.empty() ? "r" : "r or rank_pattern", " in adapter_config.json)");
      LoraWeights lora;
      lora.scale = config->ScalingOf(module.name, rank);
      if (module.kind == AdaptableModule::Kind::kEmbedding) {
        auto a = tensors.Take(key + ".lora_embedding_A", rank, module.in, what);
        if (!a.ok()) return a.status();
        auto b = tensors.Take(key + ".lora_embedding_B", module.out, rank, what);
        if (!b.ok()) return b.status();
        lora.a = a->t().contiguous();
        lora.b = *std::move(b);
        lora.embedding = true;
        adapter->embed = lora;
      } else {
        auto a = tensors.Take(key + ".lora_A.weight", rank, module.in, what);
        if (!a.ok()) return a.status();
        auto b = tensors.Take(key + ".lora_B.weight", module.out, rank, what);
        if (!b.ok()) return b.status();
        lora.a = *std::move(a);
        lora.b = *std::move(b);
        if (module.layer < 0) {
          adapter->lm_head = lora;
        } else {
          SetLayerModule(adapter->layers[module.layer],
                         module.name.substr(module.name.rfind('.') + 1), lora, mc);
        }
      }
    }
    // modules_to_save: the whole module, saved under its plain name.
    const Weights& base = model.weights();
    for (const std::string& saved : config->modules_to_save) {
      std::vector<std::string> matched;
      for (const AdaptableModule& module : AdaptableModules(mc)) {
        if (module.name.ends_with(saved)) matched.push_back(module.name);
      }
      for (const std::string& other : OtherModuleNames(mc)) {
        if (other.ends_with(saved)) {
          return absl::InvalidArgumentError(
              absl::StrCat(config_path, ": \"modules_to_save\" entry '", saved, "' matches '",
                           other, "': only embed_tokens and lm_head can be replaced whole"));
        }
      }
      for (const std::string& module : matched) {
        if (module != "lm_head" && module != "model.embed_tokens") {
          return absl::InvalidArgumentError(
              absl::StrCat(config_path, ": \"modules_to_save\" entry '", saved, "' matches '",
                           module, "': only embed_tokens and lm_head can be replaced whole"));
        }
        const bool head = module == "lm_head";
        auto full = tensors.Take(kPrefix + module + ".weight", mc.vocab_size, mc.hidden_size,
                                 absl::StrCat(module, " saved whole (modules_to_save)"));
        if (!full.ok()) return full.status();
        (head ? adapter->lm_head_saved : adapter->embed_saved) =
            HeldLike(*full, head ? base.lm_head : base.embed);
      }
    }
    // PEFT saves the base matrix of an adapted embedding or head too (save_embedding_layers,
    // for vocabularies resized in training) and loads it over the base's: a replacement unless
    // it is the base's own matrix.
    for (const char* module : {"model.embed_tokens", "lm_head"}) {
      const std::string key = absl::StrCat(kPrefix, module, ".base_layer.weight");
      if (!tensors.Has(key)) continue;
      const bool head = std::string(module) == "lm_head";
      auto full = tensors.Take(key, mc.vocab_size, mc.hidden_size,
                               absl::StrCat(module, "'s base matrix (save_embedding_layers)"));
      if (!full.ok()) return full.status();
      const Matrix& held = head ? base.lm_head : base.embed;
      Matrix& saved = head ? adapter->lm_head_saved : adapter->embed_saved;
      if (!saved.data.defined() &&
          !torch::equal(full->to(torch::kFloat32).cpu(), Dequantized(held).cpu())) {
        saved = HeldLike(*full, held);
      }
    }
    for (LayerLora& layer : adapter->layers) layer.Stack();
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat(path, ": libtorch error while loading: ", e.what_without_backtrace()));
  }
  if (const std::vector<std::string> unused = tensors.Unused(); !unused.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tensor '", unused.front(), "' belongs to no module adapter_config.json adapts",
        unused.size() > 1 ? absl::StrCat(" (and ", unused.size() - 1, " more)") : "",
        ": target_modules, layers_to_transform or modules_to_save do not match the file"));
  }
  for (const TensorInfo& t : (*file)->tensors()) adapter->parameters += t.numel();
  return std::shared_ptr<const Adapter>(std::move(adapter));
}

Weights MergeAdapter(const Weights& weights, ModelConfig& config, const Adapter& adapter) {
  c10::InferenceMode guard;
  Weights merged = weights;
  auto merge = [](const Matrix& m, const LoraWeights& lora) -> Matrix {
    if (!lora.defined()) return m;
    return HeldLike(Dequantized(m) + lora.Dense().to(m.data.device()), m);
  };
  for (size_t i = 0; i < merged.layers.size(); ++i) {
    LayerWeights& l = merged.layers[i];
    const LayerLora& a = adapter.layers[i];
    l.q_w = merge(l.q_w, a.q);
    l.k_w = merge(l.k_w, a.k);
    l.v_w = merge(l.v_w, a.v);
    l.o_w = merge(l.o_w, a.o);
    l.gate_w = merge(l.gate_w, a.gate);
    l.up_w = merge(l.up_w, a.up);
    l.down_w = merge(l.down_w, a.down);
  }
  // A tied model keeps one matrix for both ends only while the adapter changes neither.
  if (config.tie_word_embeddings && (adapter.touches_embedding() || adapter.touches_lm_head())) {
    config.tie_word_embeddings = false;
  }
  merged.embed = adapter.embed_saved.data.defined() ? adapter.embed_saved : weights.embed;
  merged.embed = merge(merged.embed, adapter.embed);
  merged.lm_head = adapter.lm_head_saved.data.defined() ? adapter.lm_head_saved : weights.lm_head;
  merged.lm_head = merge(merged.lm_head, adapter.lm_head);
  return merged;
}

absl::Status WriteAdapterFolder(const std::string& dir, const AdapterConfig& config,
                                const std::vector<AdapterTensor>& tensors) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) return absl::UnavailableError(absl::StrCat(dir, ": ", error.message()));
  {
    std::ofstream out(fs::path(dir) / "adapter_config.json");
    if (!(out << config.ToJson().dump(2) << "\n")) {
      return absl::UnavailableError(absl::StrCat(dir, "/adapter_config.json: cannot write"));
    }
  }
  if (config.instruction) {
    std::ofstream out(fs::path(dir) / kAdapterPromptFile);
    if (!(out << AdapterPromptJson(config).dump(2) << "\n")) {
      return absl::UnavailableError(absl::StrCat(dir, "/", kAdapterPromptFile, ": cannot write"));
    }
  }
  std::vector<torch::Tensor> keep;
  std::vector<TensorToWrite> to_write;
  for (const auto& [name, t] : tensors) {
    torch::Tensor held = t.detach().to(torch::kCPU);
    if (held.scalar_type() != torch::kBFloat16 && held.scalar_type() != torch::kFloat16) {
      held = held.to(torch::kFloat32);
    }
    const DType dtype = *SafetensorsDType(held.scalar_type());
    keep.push_back(held.contiguous());
    to_write.push_back({name, dtype, std::vector<int64_t>(held.sizes().begin(), held.sizes().end()),
                        keep.back().data_ptr()});
  }
  const std::string path = (fs::path(dir) / "adapter_model.safetensors").string();
  if (absl::Status s = WriteSafetensors(path + ".tmp", to_write, {{"format", "pt"}}); !s.ok()) {
    return s;
  }
  fs::rename(path + ".tmp", path, error);
  if (error) return absl::UnavailableError(absl::StrCat(path, ": ", error.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<AdapterTensor>> RandomAdapterTensors(const Model& model,
                                                                const AdapterConfig& config,
                                                                uint64_t seed, double init_std) {
  const ModelConfig& mc = model.config();
  auto targeted = TargetedModules(config, mc, "the adapter configuration");
  if (!targeted.ok()) return targeted.status();
  c10::InferenceMode guard;
  auto generator = at::detail::createCPUGenerator(seed);
  auto randn = [&](int64_t rows, int64_t cols) {
    return torch::randn({rows, cols}, generator, torch::kFloat32) * init_std;
  };
  std::vector<AdapterTensor> tensors;
  for (const AdaptableModule& module : *targeted) {
    const std::string key = kPrefix + module.name;
    const int64_t rank = config.RankOf(module.name);
    if (module.kind == AdaptableModule::Kind::kEmbedding) {
      tensors.emplace_back(key + ".lora_embedding_A", randn(rank, module.in));
      tensors.emplace_back(key + ".lora_embedding_B", randn(module.out, rank));
    } else {
      tensors.emplace_back(key + ".lora_A.weight", randn(rank, module.in));
      tensors.emplace_back(key + ".lora_B.weight", randn(module.out, rank));
    }
  }
  for (const std::string& saved : config.modules_to_save) {
    for (const char* module : {"lm_head", "model.embed_tokens"}) {
      if (!std::string(module).ends_with(saved)) continue;
      const Matrix& base =
          std::string(module) == "lm_head" ? model.weights().lm_head : model.weights().embed;
      tensors.emplace_back(
          kPrefix + std::string(module) + ".weight",
          Dequantized(base).to(torch::kCPU) + randn(mc.vocab_size, mc.hidden_size));
    }
  }
  return tensors;
}

absl::Status MergeAdapterFolder(const std::string& model_dir, const std::string& adapter_dir,
                                const std::string& out_dir, int threads) {
  auto base = Model::Load(model_dir, {.dtype = "auto", .device = "cpu", .threads = threads});
  if (!base.ok()) return base.status();
  auto adapter = LoadAdapter(adapter_dir, **base);
  if (!adapter.ok()) return adapter.status();
  auto merged = (*base)->WithMergedAdapter(**adapter);
  if (!merged.ok()) return merged.status();
  const bool tied = (*merged)->config().tie_word_embeddings;
  return WriteModelFolder(model_dir, out_dir, (*merged)->config(), (*merged)->weights(),
                          [tied](nlohmann::json& config) { config["tie_word_embeddings"] = tied; });
}

}  // namespace gpeserve::model
