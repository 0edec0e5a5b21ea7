#include "engine/train/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/formats/safetensors.h"
#include "engine/model/attention.h"
#include "nlohmann/json.hpp"

namespace gpeserve::train {
namespace {

// Trainable fp32 copy of a weight (tied weights are copied once by the caller).
torch::Tensor Trainable(const torch::Tensor& w) {
  if (!w.defined()) return w;
  return w.detach().to(torch::kFloat32).clone().set_requires_grad(true);
}

}  // namespace

Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(std::shared_ptr<const model::Model> init,
                                                         const policy::Profile& profile,
                                                         const TrainConfig& config) {
  if (config.mode != "batch" && config.mode != "streaming" && config.mode != "mixed") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown training mode '", config.mode, "' (batch, streaming, mixed)"));
  }
  if (config.wait_k < 1) return absl::InvalidArgumentError("wait_k must be at least 1");
  if (config.wait_k_max != 0 && config.wait_k_max < config.wait_k) {
    return absl::InvalidArgumentError("wait_k_max must be 0 or at least wait_k");
  }
  if (config.batch_fraction < 0 || config.batch_fraction > 1) {
    return absl::InvalidArgumentError("batch_fraction must be between 0 and 1");
  }
  if (init->weights().embed.scale.defined()) {
    return absl::InvalidArgumentError(
        "the init model is held as int8: load it with dtype fp32 (int8 weights cannot train)");
  }
  if (init->tokenizer() == nullptr) {
    return absl::InvalidArgumentError("the init model folder has no tokenizer.json");
  }
  if (config.lr <= 0 || config.total_steps < 1 || config.warmup_steps < 0) {
    return absl::InvalidArgumentError("lr must be positive, total_steps at least 1");
  }
  std::unique_ptr<Trainer> t(new Trainer());
  t->init_ = std::move(init);
  t->profile_ = profile;
  t->config_ = config;
  const model::Weights& w = t->init_->weights();
  if (config.lora) {
    t->weights_ = w;  // frozen, shared with the loaded model
    if (absl::Status s = t->CreateAdapter(); !s.ok()) return s;
  } else {
    t->CopyTrainableWeights();
  }
  t->optimizer_ =
      std::make_unique<torch::optim::AdamW>(t->parameters_, torch::optim::AdamWOptions(config.lr)
                                                                .betas({config.beta1, config.beta2})
                                                                .eps(config.eps)
                                                                .weight_decay(config.weight_decay));
  return t;
}

void Trainer::CopyTrainableWeights() {
  const model::Weights& w = init_->weights();
  weights_.embed.data = Trainable(w.embed.data);
  weights_.final_norm = Trainable(w.final_norm);
  weights_.lm_head.data =
      init_->config().tie_word_embeddings ? weights_.embed.data : Trainable(w.lm_head.data);
  parameters_ = {weights_.embed.data, weights_.final_norm};
  if (!init_->config().tie_word_embeddings) parameters_.push_back(weights_.lm_head.data);
  for (const model::LayerWeights& l : w.layers) {
    model::LayerWeights copy = l;  // shares the served tensors until replaced below
    copy.ForEachTensor([&](torch::Tensor& tensor) {
      if (!tensor.defined()) return;
      tensor = Trainable(tensor);
      parameters_.push_back(tensor);
    });
    copy.q_w.scale = copy.k_w.scale = copy.v_w.scale = copy.o_w.scale = copy.gate_w.scale =
        copy.up_w.scale = copy.down_w.scale = torch::Tensor();
    weights_.layers.push_back(std::move(copy));
  }
}

absl::Status Trainer::CreateAdapter() {
  const model::ModelConfig& c = init_->config();
  model::AdapterConfig& lora = *config_.lora;
  auto targeted = model::TargetedModules(lora, c, "--lora_targets");
  if (!targeted.ok()) return targeted.status();
  if (!lora.modules_to_save.empty()) {
    return absl::UnimplementedError("training modules_to_save is not implemented");
  }
  const torch::Device device = init_->device();
  // Drawn on the CPU from the seed (the same adapter on every device), then moved.
  auto generator = at::detail::createCPUGenerator(config_.lora_seed);
  const auto fp32 = torch::TensorOptions().dtype(torch::kFloat32);
  adapter_ = std::make_shared<model::Adapter>();
  adapter_->config = lora;
  adapter_->layers.resize(c.num_layers);
  torch::NoGradGuard no_grad;
  for (const model::AdaptableModule& module : *targeted) {
    const std::string key = "base_model.model." + module.name;
    const int64_t rank = lora.RankOf(module.name);
    model::LoraWeights w;
    w.scale = lora.ScalingOf(module.name, rank);
    torch::Tensor a, b;
    if (module.kind == model::AdaptableModule::Kind::kEmbedding) {
      // PEFT: A zero, B normal; A is held transposed ([vocab, r]), saved as [r, vocab].
      a = torch::zeros({module.in, rank}, fp32).to(device);
      b = torch::randn({module.out, rank}, generator, fp32).to(device);
      w.embedding = true;
      adapter_tensors_.emplace_back(key + ".lora_embedding_A", a);  // transposed when saved
      adapter_tensors_.emplace_back(key + ".lora_embedding_B", b);
    } else {
      // PEFT: kaiming_uniform(a = sqrt(5)) on A, i.e. uniform in +-1/sqrt(in); B zero.
      const double bound = 1.0 / std::sqrt(static_cast<double>(module.in));
      a = (torch::rand({rank, module.in}, generator, fp32) * (2 * bound) - bound).to(device);
      b = torch::zeros({module.out, rank}, fp32).to(device);
      adapter_tensors_.emplace_back(key + ".lora_A.weight", a);
      adapter_tensors_.emplace_back(key + ".lora_B.weight", b);
    }
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    parameters_.push_back(a);
    parameters_.push_back(b);
    w.a = a;
    w.b = b;
    if (module.kind == model::AdaptableModule::Kind::kEmbedding) {
      adapter_->embed = w;
      continue;
    }
    if (module.layer < 0) {
      adapter_->lm_head = w;
      continue;
    }
    // A fused projection's parts are row views of its one B (gradients reach it through them).
    model::SetLayerModule(adapter_->layers[module.layer],
                          module.name.substr(module.name.rfind('.') + 1), w, c);
  }
  return absl::OkStatus();
}

std::vector<model::AdapterSpan> Trainer::Spans(int64_t rows) const {
  if (!adapter_) return {};
  return {{adapter_.get(), 0, rows}};
}

absl::StatusOr<Trainer::Tokenized> Trainer::Tokenize(const std::string& source,
                                                     const std::string& target) const {
  const tokenizer::Tokenizer& tok = *init_->tokenizer();
  const tokenizer::EncodeOptions plain{.add_special_tokens = false};
  Tokenized t;
  auto add_unit = [&](const std::string& text) -> absl::Status {
    auto ids = tok.Encode(text, plain);
    if (!ids.ok()) return ids.status();
    t.source.insert(t.source.end(), ids->begin(), ids->end());
    t.unit_end.push_back(static_cast<int64_t>(t.source.size()));
    return absl::OkStatus();
  };
  if (absl::Status st = add_unit(profile_.Prefix()); !st.ok()) return st;
  for (absl::string_view word : absl::StrSplit(source, ' ', absl::SkipWhitespace())) {
    const std::string text =
        t.words > 0 && profile_.add_space ? absl::StrCat(" ", word) : std::string(word);
    if (absl::Status st = add_unit(text); !st.ok()) return st;
    ++t.words;
  }
  if (absl::Status st = add_unit(profile_.end); !st.ok()) return st;
  auto header = tok.Encode(profile_.assistant, plain);
  auto body = tok.Encode(target, plain);
  if (!header.ok()) return header.status();
  if (!body.ok()) return body.status();
  if (header->empty()) return absl::InvalidArgumentError("the profile's assistant header is empty");
  t.header.assign(header->begin(), header->end());
  t.body.assign(body->begin(), body->end());
  const std::vector<int64_t>& eos_ids = init_->config().eos_token_ids;
  const std::optional<int32_t> tok_eos = tok.eos_id();
  if (eos_ids.empty() && !tok_eos) {
    return absl::FailedPreconditionError("the model has no end-of-sequence token to learn");
  }
  t.eos = eos_ids.empty() ? *tok_eos : eos_ids.front();
  return t;
}

absl::StatusOr<Sequence> Trainer::BatchSequence(const std::string& source,
                                                const std::string& target) const {
  auto t = Tokenize(source, target);
  if (!t.ok()) return t.status();
  // One plain causal sequence; the rows before each target token and before EOS are counted.
  Sequence s;
  s.tokens = t->source;
  s.tokens.insert(s.tokens.end(), t->header.begin(), t->header.end());
  const int64_t context = static_cast<int64_t>(s.tokens.size());
  s.tokens.insert(s.tokens.end(), t->body.begin(), t->body.end());
  const int64_t size = static_cast<int64_t>(s.tokens.size());
  s.targets.assign(size, -1);
  for (int64_t i = context - 1; i + 1 < size; ++i) s.targets[i] = s.tokens[i + 1];
  s.targets.back() = t->eos;
  for (int64_t i = 0; i < size; ++i) s.positions.push_back(i);
  s.source_length = size;
  return s;
}

absl::StatusOr<Sequence> Trainer::MakeSequence(const std::string& source, const std::string& target,
                                               std::mt19937_64& rng) const {
  if (config_.mode == "batch") return BatchSequence(source, target);
  if (config_.mode == "mixed" &&
      std::uniform_real_distribution<double>(0, 1)(rng) < config_.batch_fraction) {
    return BatchSequence(source, target);
  }
  const int k = config_.wait_k_max > config_.wait_k
                    ? std::uniform_int_distribution<int>(config_.wait_k, config_.wait_k_max)(rng)
                    : config_.wait_k;
  return StreamingSequence(source, target, k);
}

absl::StatusOr<Sequence> Trainer::StreamingSequence(const std::string& source,
                                                    const std::string& target, int wait_k) const {
  if (wait_k < 0) return absl::InvalidArgumentError("wait_k must be at least 1");
  auto t = Tokenize(source, target);
  if (!t.ok()) return t.status();
  const tokenizer::Tokenizer& tok = *init_->tokenizer();
  const int64_t source_length = static_cast<int64_t>(t->source.size());
  // Target: header (word 0), the target's words 1..T, then end-of-sequence (word T + 1). A
  // word starts at a token whose text starts with a space, or after a terminating mark.
  std::vector<int64_t> target_tokens = t->header;
  std::vector<int64_t> word(t->header.size(), 0);
  int64_t words = 0;
  bool after_mark = true;  // the first token starts word 1
  for (int64_t id : t->body) {
    const int32_t one[] = {static_cast<int32_t>(id)};
    const std::string text = tok.Decode(one, {.skip_special_tokens = true});
    if (after_mark || (!text.empty() && text[0] == ' ')) ++words;
    target_tokens.push_back(id);
    word.push_back(std::max<int64_t>(words, 1));
    const std::string mark(absl::StripAsciiWhitespace(text));
    after_mark = mark.size() == 1 && std::string(".,:;?!").find(mark[0]) != std::string::npos;
  }
  target_tokens.push_back(t->eos);
  word.push_back(words + 1);

  // Source units visible to target word t, as a token count.
  const int64_t k = wait_k > 0 ? wait_k : config_.wait_k, n = t->words;
  auto visible = [&](int64_t w) {
    const int64_t units = std::min(w == 0 ? k - 1 : k + w - 1, n + 1);
    return t->unit_end[std::max<int64_t>(units, 0)];
  };
  Sequence s;
  const int64_t m = static_cast<int64_t>(target_tokens.size());
  for (int64_t j = 0; j < m; ++j) {
    s.visible_source.push_back(visible(word[std::min(j + 1, m - 1)]));
  }
  s.tokens = t->source;
  s.tokens.insert(s.tokens.end(), target_tokens.begin(), target_tokens.end());
  s.source_length = source_length;
  for (int64_t i = 0; i < source_length; ++i) s.positions.push_back(i);
  for (int64_t j = 0; j < m; ++j) s.positions.push_back(profile_.phi + j);
  // Labels: the first header token from the first source token after the prompt; then each
  // target token from the target row before it.
  s.targets.assign(s.tokens.size(), -1);
  const int64_t prefix = t->unit_end[0];
  s.targets[prefix < source_length ? prefix : source_length - 1] = target_tokens[0];
  for (int64_t j = 0; j + 1 < m; ++j) s.targets[source_length + j] = target_tokens[j + 1];
  return s;
}

absl::StatusOr<double> Trainer::Loss(const std::vector<Sequence>& batch, bool backward,
                                     double scale) {
  if (batch.empty()) return absl::InvalidArgumentError("an empty batch");
  std::vector<int64_t> tokens, positions, targets;
  for (const Sequence& s : batch) {
    tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
    positions.insert(positions.end(), s.positions.begin(), s.positions.end());
    targets.insert(targets.end(), s.targets.begin(), s.targets.end());
  }
  const int64_t t = static_cast<int64_t>(tokens.size());
  // Each sequence attends only within itself (padded to the longest: B * L^2 attention, not
  // the (B * L)^2 of one mask over the packed rows), causally, and its target rows (streaming)
  // to their visible source rows and the target rows up to themselves. Built in plain memory:
  // per-row tensor slicing costs more than the forward pass of a small model.
  const int64_t b = static_cast<int64_t>(batch.size());
  int64_t length = 0;
  for (const Sequence& s : batch) length = std::max<int64_t>(length, s.tokens.size());
  std::vector<int64_t> rows(static_cast<size_t>(b * length), t);  // t: padding
  std::vector<uint8_t> mask(static_cast<size_t>(b * length * length), 0);
  int64_t begin = 0;
  for (int64_t i = 0; i < b; ++i) {
    const Sequence& s = batch[i];
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    const int64_t src = s.source_length;
    for (int64_t r = 0; r < length; ++r) {
      uint8_t* row = mask.data() + (i * length + r) * length;
      if (r >= n) {  // padding sees itself, so that its softmax is defined
        row[r] = 1;
        continue;
      }
      rows[i * length + r] = begin + r;
      const bool target_row = r >= src && !s.visible_source.empty();
      std::fill(row, row + (target_row ? s.visible_source[r - src] : r + 1), 1);
      if (target_row) std::fill(row + src, row + r + 1, 1);
    }
    begin += n;
  }
  const torch::Tensor allowed =
      torch::from_blob(mask.data(), {b, length, length}, torch::kUInt8).to(torch::kBool);
  const torch::Tensor row_index = torch::from_blob(rows.data(), {b, length}, torch::kInt64).clone();
  const model::ModelConfig& c = init_->config();
  try {
    const torch::Device device = init_->device();
    const torch::Tensor ids = torch::tensor(tokens, torch::kInt64).to(device);
    const torch::Tensor pos = torch::tensor(positions, torch::kInt64).to(device);
    model::PaddedAttention attention(row_index.to(device), allowed.to(device));
    const torch::Tensor hidden = model::TransformerHidden(
        c, weights_, ids, init_->Rotary(pos, torch::kFloat32), attention, Spans(ids.size(0)));
    const torch::Tensor target = torch::tensor(targets, torch::kInt64).to(device);
    const torch::Tensor rows = target.ge(0).nonzero().squeeze(1);
    if (rows.numel() == 0) return absl::InvalidArgumentError("no target tokens in the batch");
    const torch::Tensor logits =
        model::LmLogits(c, weights_, hidden.index_select(0, rows), Spans(rows.size(0)));
    const torch::Tensor loss =
        torch::nn::functional::cross_entropy(logits, target.index_select(0, rows));
    if (backward) (loss * scale).backward();
    return loss.item<double>();
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("libtorch error in training: ", e.what_without_backtrace()));
  }
}

double Trainer::LearningRate() const {
  const double step = static_cast<double>(steps_ + 1);
  if (config_.warmup_steps > 0 && step <= config_.warmup_steps) {
    return config_.lr * step / config_.warmup_steps;
  }
  const double decay_steps = std::max(1, config_.total_steps - config_.warmup_steps);
  const double done = step - config_.warmup_steps;
  return config_.lr * std::max(0.0, 1.0 - (done - 1) / decay_steps);
}

double Trainer::OptimizerStep() {
  const double lr = LearningRate();
  for (auto& group : optimizer_->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
  if (config_.max_grad_norm > 0) {
    torch::nn::utils::clip_grad_norm_(parameters_, config_.max_grad_norm);
  }
  optimizer_->step();
  optimizer_->zero_grad();
  ++steps_;
  return lr;
}

torch::Tensor Trainer::Logits(const std::vector<int64_t>& tokens,
                              const std::vector<int64_t>& positions) {
  torch::NoGradGuard no_grad;
  const torch::Device device = init_->device();
  const torch::Tensor pos = torch::tensor(positions, torch::kInt64).to(device);
  model::DenseAttention attention(
      {}, {}, model::DenseAttention::CausalMask(static_cast<int64_t>(tokens.size())).to(device));
  const torch::Tensor hidden = model::TransformerHidden(
      init_->config(), weights_, torch::tensor(tokens).to(device),
      init_->Rotary(pos, torch::kFloat32), attention, Spans(static_cast<int64_t>(tokens.size())));
  return model::LmLogits(init_->config(), weights_, hidden,
                         Spans(static_cast<int64_t>(tokens.size())))
      .to(torch::kCPU, torch::kFloat32);
}

absl::Status Trainer::Save(const std::string& init_dir, const std::string& out_dir,
                           model::DType dtype) const {
  namespace fs = std::filesystem;
  torch::NoGradGuard no_grad;  // fused projections are concatenated for the file
  if (adapter_) {
    model::AdapterConfig config = *config_.lora;
    config.base_model_name_or_path = init_dir;
    config.instruction = profile_.instruction;  // the task it learns, for its sessions
    std::vector<model::AdapterTensor> tensors;
    for (const auto& [name, t] : adapter_tensors_) {
      // The embedding's A is held [vocab, r]; PEFT stores [r, vocab].
      const torch::Tensor held = name.ends_with("lora_embedding_A") ? t.t() : t;
      tensors.emplace_back(name, held.to(model::TorchType(dtype)));
    }
    return model::WriteAdapterFolder(out_dir, config, tensors);
  }
  std::error_code error;
  fs::create_directories(out_dir, error);
  if (error) return absl::UnavailableError(out_dir + ": " + error.message());
  for (const char* name : {"generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    const fs::path from = fs::path(init_dir) / name;
    if (!fs::exists(from)) continue;
    fs::copy_file(from, fs::path(out_dir) / name, fs::copy_options::overwrite_existing, error);
    if (error) return absl::UnavailableError(absl::StrCat(from.string(), ": ", error.message()));
  }
  {
    const fs::path from = fs::path(init_dir) / "config.json";
    std::ifstream in(from);
    nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!config.is_object())
      return absl::InvalidArgumentError(from.string() + ": not a JSON object");
    config["torch_dtype"] = dtype == model::DType::kF32    ? "float32"
                            : dtype == model::DType::kBF16 ? "bfloat16"
                                                           : "float16";
    std::ofstream out(fs::path(out_dir) / "config.json");
    if (!(out << config.dump(2) << "\n")) {
      return absl::UnavailableError(out_dir + "/config.json: cannot write");
    }
  }
  const torch::ScalarType stored = model::TorchType(dtype);
  std::vector<torch::Tensor> keep;
  std::vector<model::TensorToWrite> tensors;
  for (const auto& [name, w] : model::NamedWeights(init_->config(), weights_)) {
    keep.push_back(w.detach().to(torch::kCPU, stored).contiguous());
    tensors.push_back({name, dtype,
                       std::vector<int64_t>(keep.back().sizes().begin(), keep.back().sizes().end()),
                       keep.back().data_ptr()});
  }
  // Written to a temporary name first so that a crash never leaves a torn checkpoint.
  const std::string path = (fs::path(out_dir) / "model.safetensors").string();
  if (absl::Status s = model::WriteSafetensors(path + ".tmp", tensors, {{"format", "pt"}});
      !s.ok()) {
    return s;
  }
  fs::rename(path + ".tmp", path, error);
  if (error) return absl::UnavailableError(path + ": " + error.message());
  return absl::OkStatus();
}

absl::Status Trainer::SaveState(const std::string& dir) const {
  namespace fs = std::filesystem;
  const fs::path state = fs::path(dir) / "trainer_state";
  std::error_code error;
  fs::create_directories(state, error);
  if (error) return absl::UnavailableError(state.string() + ": " + error.message());
  try {
    std::vector<torch::Tensor> weights;
    for (const torch::Tensor& p : parameters_) weights.push_back(p.detach().to(torch::kCPU));
    torch::save(weights, (state / "weights.pt").string());
    torch::save(*optimizer_, (state / "optimizer.pt").string());
  } catch (const c10::Error& e) {
    return absl::UnavailableError(
        absl::StrCat(state.string(), ": cannot write: ", e.what_without_backtrace()));
  }
  std::ofstream out(state / "state.json");
  const nlohmann::json json = {
      {"step", steps_}, {"mode", config_.mode}, {"parameters", parameters_.size()}};
  if (!(out << json.dump(2) << "\n")) {
    return absl::UnavailableError(state.string() + "/state.json: cannot write");
  }
  return absl::OkStatus();
}

absl::Status Trainer::LoadState(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path state = fs::path(dir) / "trainer_state";
  std::ifstream in(state / "state.json");
  const nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("step") || !json["step"].is_number_integer() ||
      !json.contains("parameters") || !json["parameters"].is_number_integer()) {
    return absl::NotFoundError(
        absl::StrCat(state.string(),
                     "/state.json is missing or unreadable: resume from a checkpoint folder "
                     "written by gpe train (checkpoint-STEP)"));
  }
  if (json["parameters"].get<size_t>() != parameters_.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " was saved from a model with ", json["parameters"].get<size_t>(),
                     " weight tensors; this one has ", parameters_.size()));
  }
  try {
    std::vector<torch::Tensor> weights;
    torch::load(weights, (state / "weights.pt").string());
    if (weights.size() != parameters_.size()) {
      return absl::DataLossError(state.string() + "/weights.pt does not match state.json");
    }
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < weights.size(); ++i) {
      if (!weights[i].sizes().equals(parameters_[i].sizes())) {
        return absl::FailedPreconditionError(
            absl::StrCat(dir, ": weight ", i, " has shape ", c10::str(weights[i].sizes()),
                         ", the model's has ", c10::str(parameters_[i].sizes())));
      }
      parameters_[i].copy_(weights[i]);
    }
    torch::load(*optimizer_, (state / "optimizer.pt").string());
  } catch (const c10::Error& e) {
    return absl::DataLossError(
        absl::StrCat(state.string(), ": cannot read: ", e.what_without_backtrace()));
  }
  steps_ = json["step"].get<int64_t>();
  return absl::OkStatus();
}

}  // namespace gpeserve::train
