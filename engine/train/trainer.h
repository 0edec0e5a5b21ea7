// Full fine-tuning of a model folder on a parallel corpus, with the same transformer code as
// inference (model::TransformerHidden) on trainable fp32 copies of the weights, AdamW, linear
// warmup and decay, gradient accumulation and clipping, and checkpoints written as Hugging
// Face folders that `gpe eval` and `gpeserve` load unchanged.
//
// Modes (docs/GPE.md 7):
//   batch      the plain causal model over prompt, source, end, header and target, with the
//              loss on the target tokens and the end-of-sequence token after them;
//   streaming  source tokens at positions 0.., target (header first) at phi + j; source rows
//              causal among themselves; the tokens of target word t see the prompt and the
//              first min(k + t - 1, n + 1) source units (the header is word 0 and sees k - 1;
//              the end-of-sequence token is word T + 1), shifted up by one row so that the last
//              token of a word sees what the next word sees; the loss covers every target
//              token (header included, its first token predicted from the row of the first
//              source token after the prompt) and the end-of-sequence token;
//   mixed      each sequence is a batch-mode one with probability batch_fraction, otherwise a
//              streaming one: one model for both batch and GPE streaming decoding.
// In streaming and mixed mode with wait_k_max > wait_k, each streaming sequence draws its k
// uniformly from [wait_k, wait_k_max] (one model for several latencies).
//
// Thread-safety: a Trainer is used from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/formats/safetensors.h"
#include "engine/model/adapter.h"
#include "engine/model/model.h"
#include "engine/policy/profile.h"

namespace torch::optim {
class AdamW;  // <torch/optim/adamw.h>, in trainer.cc only: it brings in torch::nn
}  // namespace torch::optim

namespace gpeserve::train {

struct TrainConfig {
  std::string mode = "batch";   // batch | streaming | mixed
  int wait_k = 3;               // streaming: source units read before the first write
  int wait_k_max = 0;           // > wait_k: k drawn per sequence from [wait_k, wait_k_max]
  double batch_fraction = 0.5;  // mixed: probability that a sequence is a batch-mode one
  double lr = 3e-4;             // peak learning rate
  int warmup_steps = 0;         // linear warmup from 0 to lr, then linear decay to 0 at total_steps
  int total_steps = 1;          // optimizer steps in the whole run (for the schedule)
  double weight_decay = 0.01;
  double max_grad_norm = 1.0;  // 0: no clipping
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  // Set: train only a LoRA adapter of this configuration (the base frozen, in the dtype it was
  // loaded in; the adapter in fp32, initialized as PEFT does: A uniform in +-1/sqrt(in), B
  // zero; embeddings A zero, B normal), and save it as a PEFT folder.
  std::optional<model::AdapterConfig> lora;
  uint64_t lora_seed = 0;  // the adapter's initial values
};

// One training sequence: token ids, position ids, and for each token whether the next token's
// prediction from it counts in the loss (targets[i] is the token predicted at row i, or -1).
struct Sequence {
  std::vector<int64_t> tokens;
  std::vector<int64_t> positions;
  std::vector<int64_t> targets;
  // Streaming: rows from `source_length` on are target rows; target row r sees the first
  // visible_source[r - source_length] rows and the target rows up to itself. Batch: plain
  // causal (source_length = tokens.size(), visible_source empty).
  int64_t source_length = 0;
  std::vector<int64_t> visible_source;
};

class Trainer {
 public:
  // `init`: a model loaded in fp32 on its device (its weights are copied, not changed).
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(std::shared_ptr<const model::Model> init,
                                                         const policy::Profile& profile,
                                                         const TrainConfig& config);
  ~Trainer();  // in trainer.cc, where AdamW is complete

  // The batch-mode sequence of one example: prompt prefix, source words (with spaces as the
  // profile says), end, header, target, end-of-sequence; the loss covers the target and EOS.
  absl::StatusOr<Sequence> BatchSequence(const std::string& source,
                                         const std::string& target) const;
  // The streaming-mode sequence of one example with `wait_k` (0: the configured wait_k).
  absl::StatusOr<Sequence> StreamingSequence(const std::string& source, const std::string& target,
                                             int wait_k = 0) const;
  // The configured mode's sequence; mixed mode and a wait-k range draw from `rng`.
  absl::StatusOr<Sequence> MakeSequence(const std::string& source, const std::string& target,
                                        std::mt19937_64& rng) const;

  // Mean cross-entropy over the counted tokens of `batch` (sequences packed into one forward
  // pass, attending only within themselves). With `backward`, the gradients of loss * `scale`
  // accumulate (scale 1/G for G accumulated micro-batches).
  absl::StatusOr<double> Loss(const std::vector<Sequence>& batch, bool backward,
                              double scale = 1.0);
  // Clips, steps the optimizer at the scheduled learning rate, clears gradients; returns the
  // learning rate used.
  double OptimizerStep();
  int64_t steps() const { return steps_; }

  // Float32 logits [T, vocab] of a plain causal pass of `tokens` at `positions` (no gradient).
  torch::Tensor Logits(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions);

  // Writes a model folder: the init folder's config (its torch_dtype set to what is stored),
  // generation config and tokenizer files, and model.safetensors with the current weights in
  // `dtype` (bf16 halves the folder; the weights are rounded to nearest even). Training a LoRA
  // adapter: a PEFT adapter folder (adapter_config.json naming `init_dir` as the base,
  // adapter_model.safetensors in fp32) that peft and gpeserve --adapter load.
  absl::Status Save(const std::string& init_dir, const std::string& out_dir,
                    model::DType dtype = model::DType::kF32) const;

  // The state to resume from exactly: fp32 weights, the optimizer's moments and the step count,
  // as trainer_state/ inside `dir` (a checkpoint folder).
  absl::Status SaveState(const std::string& dir) const;
  // Restores what SaveState wrote into a trainer created with the same model and config.
  absl::Status LoadState(const std::string& dir);

 private:
  // The segments of one example as token ids: source (prompt, words, end) with the token count
  // after each unit, header, target body, and the end-of-sequence id.
  struct Tokenized {
    std::vector<int64_t> source;
    std::vector<int64_t> unit_end;  // unit_end[u] = tokens in units 0..u
    int64_t words = 0;
    std::vector<int64_t> header, body;
    int64_t eos = 0;
  };

  Trainer() = default;
  absl::StatusOr<Tokenized> Tokenize(const std::string& source, const std::string& target) const;
  // Full fine-tuning: weights_ and parameters_ as trainable fp32 copies of the init's.
  void CopyTrainableWeights();
  // Sets up adapter_ and parameters_ for config_.lora on the frozen weights_.
  absl::Status CreateAdapter();
  // The runs of `rows` rows computed with the adapter: all of them, or none without one.
  std::vector<model::AdapterSpan> Spans(int64_t rows) const;
  double LearningRate() const;

  std::shared_ptr<const model::Model> init_;
  policy::Profile profile_;
  TrainConfig config_;
  model::Weights weights_;  // trainable fp32 (LoRA: the init's, frozen)
  // LoRA: the trainable adapter, its tensors as PEFT names them, and its one span.
  std::shared_ptr<model::Adapter> adapter_;
  std::vector<model::AdapterTensor> adapter_tensors_;
  std::vector<torch::Tensor> parameters_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  int64_t steps_ = 0;
};

}  // namespace gpeserve::train
