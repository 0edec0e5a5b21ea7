// The rotary position embedding of a model, as Hugging Face computes it: inverse frequencies
// with the config's scaling (default, linear, llama3, Phi-3's longrope), cos/sin tables cached
// on the device for the first positions, and their application to the first rotary_dim
// channels of each head (all of them unless the embedding is partial).
//
// Thread-safety: immutable after construction.
#pragma once

#include <torch/types.h>

#include <utility>

#include "engine/formats/config.h"

namespace gpeserve::model {

class RotaryEmbedding {
 public:
  RotaryEmbedding() = default;
  // Tables for positions below min(32768, max_position_embeddings) on `device`.
  RotaryEmbedding(const ModelConfig& config, const torch::Device& device);

  // (cos, sin), each [T, rotary_dim] float32 on the device, for positions [T] (int64, on the
  // device). longrope: a position below original_max_position_embeddings takes the short
  // factors, the others the long ones, token by token (docs/model.md).
  std::pair<torch::Tensor, torch::Tensor> Tables(const torch::Tensor& positions) const;

 private:
  // One set of factors at `positions`: looked up in the tables or computed beyond them.
  std::pair<torch::Tensor, torch::Tensor> Lookup(const torch::Tensor& positions, bool in_table,
                                                 const torch::Tensor& inv_freq,
                                                 const torch::Tensor& cos_table,
                                                 const torch::Tensor& sin_table) const;

  double attention_factor_ = 1.0;
  int64_t long_from_ = 0;                // longrope: the first position of the long factors
  torch::Tensor inv_freq_;               // [rotary_dim / 2] float32
  torch::Tensor cos_table_, sin_table_;  // [table positions, rotary_dim] float32
  // longrope only: the long factors' frequencies and tables.
  torch::Tensor long_inv_freq_, long_cos_table_, long_sin_table_;
};

// The rotary tables of one forward pass, each [T, 1, rotary_dim] in the activation dtype: the
// layers' (cos, sin), and Gemma 3's windowed layers' own (local_cos, local_sin; undefined for the
// other families).
struct RotaryTables {
  torch::Tensor cos, sin;
  torch::Tensor local_cos, local_sin;
};

// x [T, H, D] with the rotary embedding of tables cos, sin [T, 1, R] on its first R channels.
torch::Tensor ApplyRotary(const torch::Tensor& x, const torch::Tensor& cos,
                          const torch::Tensor& sin);

}  // namespace gpeserve::model
