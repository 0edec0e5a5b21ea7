// A loaded causal language model (Qwen2, Llama, Mistral) and its transformer forward pass over
// a flat batch of new tokens with explicit position ids; attention is delegated to an
// AttentionContext, which is what group position encoding and a paged KV cache need.
//
// Ownership and threads: a Model is immutable after Load and shared as
// std::shared_ptr<const Model>; Forward may be called from any thread (libtorch's intra-op
// thread pool is sized once, at load).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/attention.h"
#include "engine/model/config.h"
#include "engine/model/safetensors.h"
#include "engine/tokenizer/tokenizer.h"

namespace gpeserve::model {

struct ModelOptions {
  std::string dtype = "fp32";  // serving dtype: fp32 | bf16 | fp16
  std::string device = "cpu";  // cpu | cuda | cuda:N
  int threads = 0;             // CPU intra-op threads; 0 = all cores
};

// Parses "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16".
absl::StatusOr<torch::ScalarType> ParseServingDtype(const std::string& name);

// A model's weights in the serving dtype (inference) or as trainable fp32 parameters
// (training); both run through the same TransformerHidden.
struct LayerWeights {
  torch::Tensor input_norm, post_norm;
  torch::Tensor q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b;  // biases undefined when absent
  torch::Tensor gate_w, gate_b, up_w, up_b, down_w, down_b;
};
struct Weights {
  torch::Tensor embed, final_norm, lm_head;  // lm_head is embed when tied
  std::vector<LayerWeights> layers;
};

// Every defined weight with its Hugging Face name (lm_head only when untied), in file order.
std::vector<std::pair<std::string, torch::Tensor>> NamedWeights(const ModelConfig& config,
                                                                const Weights& weights);

// The transformer body: embeddings, every layer (attention through `attention`), returning
// the hidden states [T, hidden] before the final norm. cos, sin: [T, 1, head_dim] rotary
// tables for the tokens' positions. Differentiable (training) unless run in inference mode.
torch::Tensor TransformerHidden(const ModelConfig& config, const Weights& weights,
                                const torch::Tensor& ids, const torch::Tensor& cos,
                                const torch::Tensor& sin, AttentionContext& attention);
// Final norm and LM head: logits [R, vocab] of hidden rows [R, hidden] (in the weights' dtype).
torch::Tensor LmLogits(const ModelConfig& config, const Weights& weights,
                       const torch::Tensor& hidden);

class Model {
 public:
  // Loads DIR: config.json (+ generation_config.json), model.safetensors or
  // model.safetensors.index.json with its shards, and the tokenizer files when present (their
  // vocabulary must fit the model's). Errors name the file and the tensor.
  static absl::StatusOr<std::shared_ptr<const Model>> Load(const std::string& dir,
                                                           const ModelOptions& options = {});

  // Runs the transformer over T new tokens. tokens, positions: [T] int64 (any device);
  // logit_rows: [R] int64 indices into the T tokens. Returns float32 logits [R, vocab] on the
  // CPU. `attention` sees every layer's q/k/v (rotary applied with `positions`).
  absl::StatusOr<torch::Tensor> Forward(const torch::Tensor& tokens, const torch::Tensor& positions,
                                        const torch::Tensor& logit_rows,
                                        AttentionContext& attention) const;

  const ModelConfig& config() const { return config_; }
  // Null when the folder has no tokenizer.json.
  const std::shared_ptr<const tokenizer::Tokenizer>& tokenizer() const { return tokenizer_; }
  torch::ScalarType dtype() const { return dtype_; }
  torch::Device device() const { return device_; }
  // Bytes of all weights (what a decode step reads).
  int64_t weight_bytes() const;
  // The weights (read-only views of the mapped files on the CPU in the stored dtype).
  const Weights& weights() const { return weights_; }
  // (cos, sin), each [T, head_dim] float32 on the model's device, for the given positions.
  std::pair<torch::Tensor, torch::Tensor> Rotary(const torch::Tensor& positions) const;

 private:
  Model() : device_(torch::kCPU) {}

  // ---- Constant after Load ----
  ModelConfig config_;
  torch::ScalarType dtype_ = torch::kFloat32;
  torch::Device device_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;  // keep mmaps alive
  Weights weights_;
  torch::Tensor inv_freq_;               // [head_dim / 2] float32, on device
  torch::Tensor cos_table_, sin_table_;  // [kRotaryTablePositions, head_dim] float32, on device
};

}  // namespace gpeserve::model
