#include "engine/train/trainer.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/model/attention.h"
#include "engine/model/safetensors.h"

namespace gpeserve::train {
namespace {

// Trainable fp32 copy of a weight (tied weights are copied once by the caller).
torch::Tensor Trainable(const torch::Tensor& w) {
  if (!w.defined()) return w;
  return w.detach().to(torch::kFloat32).clone().set_requires_grad(true);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(std::shared_ptr<const model::Model> init,
                                                         const policy::Profile& profile,
                                                         const TrainConfig& config) {
  if (config.mode != "batch") {
    return absl::UnimplementedError(absl::StrCat(
        "training mode '", config.mode,
        "' is not available yet; this build trains in batch mode (the streaming mask of "
        "docs/GPE.md 7 is being built)"));
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
  t->weights_.embed = Trainable(w.embed);
  t->weights_.final_norm = Trainable(w.final_norm);
  t->weights_.lm_head =
      t->init_->config().tie_word_embeddings ? t->weights_.embed : Trainable(w.lm_head);
  for (const model::LayerWeights& l : w.layers) {
    model::LayerWeights c;
    for (auto [to, from] : {std::pair{&c.input_norm, &l.input_norm},
                            {&c.post_norm, &l.post_norm},
                            {&c.q_w, &l.q_w},
                            {&c.q_b, &l.q_b},
                            {&c.k_w, &l.k_w},
                            {&c.k_b, &l.k_b},
                            {&c.v_w, &l.v_w},
                            {&c.v_b, &l.v_b},
                            {&c.o_w, &l.o_w},
                            {&c.o_b, &l.o_b},
                            {&c.gate_w, &l.gate_w},
                            {&c.gate_b, &l.gate_b},
                            {&c.up_w, &l.up_w},
                            {&c.up_b, &l.up_b},
                            {&c.down_w, &l.down_w},
                            {&c.down_b, &l.down_b}}) {
      *to = Trainable(*from);
    }
    t->weights_.layers.push_back(std::move(c));
  }
  for (const auto& [name, p] : model::NamedWeights(t->init_->config(), t->weights_)) {
    t->parameters_.push_back(p);
  }
  t->optimizer_ =
      std::make_unique<torch::optim::AdamW>(t->parameters_, torch::optim::AdamWOptions(config.lr)
                                                                .betas({config.beta1, config.beta2})
                                                                .eps(config.eps)
                                                                .weight_decay(config.weight_decay));
  return t;
}

absl::StatusOr<Sequence> Trainer::BatchSequence(const std::string& source,
                                                const std::string& target) const {
  const tokenizer::Tokenizer& tok = *init_->tokenizer();
  const tokenizer::EncodeOptions plain{.add_special_tokens = false};
  Sequence s;
  auto append = [&](const std::string& text, bool counted) -> absl::Status {
    auto ids = tok.Encode(text, plain);
    if (!ids.ok()) return ids.status();
    for (int32_t id : *ids) {
      if (counted && !s.tokens.empty()) s.targets.back() = id;
      s.tokens.push_back(id);
      s.targets.push_back(-1);
    }
    return absl::OkStatus();
  };
  if (absl::Status st = append(profile_.Prefix(), false); !st.ok()) return st;
  bool first = true;
  for (absl::string_view word : absl::StrSplit(source, ' ', absl::SkipWhitespace())) {
    const std::string text =
        !first && profile_.add_space ? absl::StrCat(" ", word) : std::string(word);
    if (absl::Status st = append(text, false); !st.ok()) return st;
    first = false;
  }
  if (absl::Status st = append(profile_.end, false); !st.ok()) return st;
  if (absl::Status st = append(profile_.assistant, false); !st.ok()) return st;
  if (absl::Status st = append(target, true); !st.ok()) return st;
  const std::vector<int64_t>& eos = init_->config().eos_token_ids;
  const std::optional<int32_t> tok_eos = tok.eos_id();
  if (eos.empty() && !tok_eos) {
    return absl::FailedPreconditionError("the model has no end-of-sequence token to learn");
  }
  s.targets.back() = eos.empty() ? *tok_eos : eos.front();
  for (size_t i = 0; i < s.tokens.size(); ++i) s.positions.push_back(static_cast<int64_t>(i));
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
  // Block-diagonal causal mask: each sequence attends only within itself.
  torch::Tensor allowed = torch::zeros({t, t}, torch::kBool);
  int64_t begin = 0;
  for (const Sequence& s : batch) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    allowed.slice(0, begin, begin + n)
        .slice(1, begin, begin + n)
        .copy_(model::DenseAttention::CausalMask(n));
    begin += n;
  }
  const model::ModelConfig& c = init_->config();
  try {
    const torch::Device device = init_->device();
    const torch::Tensor ids = torch::tensor(tokens, torch::kInt64).to(device);
    const torch::Tensor pos = torch::tensor(positions, torch::kInt64).to(device);
    auto [cos, sin] = init_->Rotary(pos);
    model::DenseAttention attention({}, {}, allowed.to(device));
    const torch::Tensor hidden =
        model::TransformerHidden(c, weights_, ids, cos.unsqueeze(1), sin.unsqueeze(1), attention);
    const torch::Tensor target = torch::tensor(targets, torch::kInt64).to(device);
    const torch::Tensor rows = target.ge(0).nonzero().squeeze(1);
    if (rows.numel() == 0) return absl::InvalidArgumentError("no target tokens in the batch");
    const torch::Tensor logits = model::LmLogits(c, weights_, hidden.index_select(0, rows));
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
  auto [cos, sin] = init_->Rotary(pos);
  model::DenseAttention attention(
      {}, {}, model::DenseAttention::CausalMask(static_cast<int64_t>(tokens.size())).to(device));
  const torch::Tensor hidden =
      model::TransformerHidden(init_->config(), weights_, torch::tensor(tokens).to(device),
                               cos.unsqueeze(1), sin.unsqueeze(1), attention);
  return model::LmLogits(init_->config(), weights_, hidden).to(torch::kCPU, torch::kFloat32);
}

absl::Status Trainer::Save(const std::string& init_dir, const std::string& out_dir) const {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(out_dir, error);
  if (error) return absl::UnavailableError(out_dir + ": " + error.message());
  for (const char* name :
       {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    const fs::path from = fs::path(init_dir) / name;
    if (!fs::exists(from)) continue;
    fs::copy_file(from, fs::path(out_dir) / name, fs::copy_options::overwrite_existing, error);
    if (error) return absl::UnavailableError(absl::StrCat(from.string(), ": ", error.message()));
  }
  std::vector<torch::Tensor> keep;
  std::vector<model::TensorToWrite> tensors;
  for (const auto& [name, w] : model::NamedWeights(init_->config(), weights_)) {
    keep.push_back(w.detach().to(torch::kCPU, torch::kFloat32).contiguous());
    tensors.push_back({name, model::DType::kF32,
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

}  // namespace gpeserve::train
