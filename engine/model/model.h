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

 private:
  struct Layer {
    torch::Tensor input_norm, post_norm;
    torch::Tensor q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b;
    torch::Tensor gate_w, gate_b, up_w, up_b, down_w, down_b;
  };

  Model() : device_(torch::kCPU) {}
  torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight) const;
  // (cos, sin), each [T, head_dim], for the given positions.
  std::pair<torch::Tensor, torch::Tensor> Rotary(const torch::Tensor& positions) const;

  // ---- Constant after Load ----
  ModelConfig config_;
  torch::ScalarType dtype_ = torch::kFloat32;
  torch::Device device_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;  // keep mmaps alive
  torch::Tensor embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  torch::Tensor inv_freq_;               // [head_dim / 2] float32, on device
  torch::Tensor cos_table_, sin_table_;  // [kRotaryTablePositions, head_dim] float32, on device
};

}  // namespace gpeserve::model
