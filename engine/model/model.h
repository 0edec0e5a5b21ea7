// A loaded causal language model (Qwen 2/3, Llama, Mistral, Gemma 2, Phi-3) and its transformer
// forward pass over
// a flat batch of new tokens with explicit position ids; attention is delegated to an
// AttentionContext, which is what group position encoding and a paged KV cache need.
//
// Ownership and threads: a Model is immutable after Load and shared as
// std::shared_ptr<const Model>; Forward may be called from any thread (libtorch's intra-op
// thread pool is sized once, at load).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/formats/config.h"
#include "engine/formats/safetensors.h"
#include "engine/model/adapter.h"
#include "engine/model/attention.h"
#include "engine/model/linear.h"
#include "engine/model/options.h"
#include "engine/model/rotary.h"
#include "engine/model/weight_layout.h"
#include "engine/tokenizer/tokenizer.h"

namespace gpeserve::model {

// The transformer body: embeddings, every layer (attention through `attention`), returning
// the hidden states [T, hidden] before the final norm. `rotary`: the tables of the tokens'
// positions (Model::Rotary). `adapters`: runs of tokens computed with a LoRA adapter
// (disjoint; the other tokens use the base weights alone). Differentiable (training) unless run
// in inference mode.
torch::Tensor TransformerHidden(const ModelConfig& config, const Weights& weights,
                                const torch::Tensor& ids, const RotaryTables& rotary,
                                AttentionContext& attention,
                                std::span<const AdapterSpan> adapters = {});
// Final norm, LM head and final soft-capping: logits [R, vocab] of hidden rows [R, hidden]
// (activation dtype); `adapters` as above, over the R rows.
torch::Tensor LmLogits(const ModelConfig& config, const Weights& weights,
                       const torch::Tensor& hidden, std::span<const AdapterSpan> adapters = {});

class Checkpoint;

// The libtorch type of weights served as `dtype`: bf16, fp16, int8, else fp32 (the block types'
// tensors are raw bytes; see Matrix).
torch::ScalarType ServingScalarType(ServingDtype dtype);

class Model {
 public:
  // Loads `dir`, a folder: config.json (+ generation_config.json), model.safetensors or
  // model.safetensors.index.json with its shards, and the tokenizer files when present (their
  // vocabulary must fit the model's); or a GGUF file (checkpoint.h). Errors name the file and
  // the tensor.
  static absl::StatusOr<std::shared_ptr<const Model>> Load(const std::string& dir,
                                                           const ModelOptions& options = {});

  // Runs the transformer over T new tokens. tokens, positions: [T] int64 (any device);
  // logit_rows: [R] int64 indices into the T tokens. Returns float32 logits [R, vocab] on the
  // CPU. `attention` sees every layer's q/k/v (rotary applied with `positions`). `adapters`:
  // runs of the T tokens computed with a LoRA adapter loaded for this model (disjoint, in
  // order); logit_rows must then be ascending.
  absl::StatusOr<torch::Tensor> Forward(const torch::Tensor& tokens, const torch::Tensor& positions,
                                        const torch::Tensor& logit_rows,
                                        AttentionContext& attention,
                                        std::span<const AdapterSpan> adapters = {}) const;

  // This model with `adapter` (loaded for it) folded into its weights (MergeAdapter): serves
  // as base + adapter at no per-step cost.
  absl::StatusOr<std::shared_ptr<const Model>> WithMergedAdapter(const Adapter& adapter) const;

  const ModelConfig& config() const { return config_; }
  // Null when the folder has no tokenizer.json.
  const std::shared_ptr<const tokenizer::Tokenizer>& tokenizer() const { return tokenizer_; }
  // The tokenizer's chat template, which --profile auto follows (empty without either).
  std::string chat_template() const { return tokenizer_ ? tokenizer_->chat_template() : ""; }
  // The activation dtype: what Forward computes in and what the KV cache holds (fp32 on the
  // CPU; the serving dtype on CUDA).
  torch::ScalarType dtype() const { return dtype_; }
  // How the weights are held ("fp32", "bf16", ..., "gguf"): the serving dtype, resolved.
  const char* weight_dtype_name() const;
  ServingDtype weight_dtype() const { return weight_dtype_; }
  torch::Device device() const { return device_; }
  // One line naming the code each matrix product runs: the instruction set and kernel for
  // decode-sized steps and for prefill (logged by every binary that loads a model).
  const std::string& kernel_path() const { return kernel_path_; }
  // Bytes of all weights (what a decode step reads, plus the untied embedding).
  int64_t weight_bytes() const;
  // The weights (read-only views of the mapped files where the stored dtype is served).
  const Weights& weights() const { return weights_; }
  // The rotary tables of the given positions in `dtype` on the model's device (computed in
  // float32). longrope: a position below original_max_position_embeddings takes the short
  // factors, the others the long ones, token by token (what transformers computes when it
  // decodes one token at a time; see docs/model.md).
  RotaryTables Rotary(const torch::Tensor& positions, torch::ScalarType dtype) const;

 private:
  Model() : device_(torch::kCPU) {}

  // ---- Constant after Load ----
  ModelConfig config_;
  torch::ScalarType dtype_ = torch::kFloat32;
  ServingDtype weight_dtype_ = ServingDtype::kF32;
  std::string kernel_path_;
  torch::Device device_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::shared_ptr<const Checkpoint> checkpoint_;  // keeps the mapped files alive
  Weights weights_;
  RotaryEmbedding rotary_;
  RotaryEmbedding local_rotary_;  // Gemma 3's windowed layers (config_.rope_local_theta)
};

}  // namespace gpeserve::model
