// A model's weights as held in memory, and the one table that names them in checkpoints: every
// tensor of every architecture the project serves, with its Hugging Face name, its GGUF
// (llama.cpp) name, its shape, its kind and the member of Weights it fills. Loading
// (Model::Load), writing (NamedWeights: gpe quantize, training checkpoints, merged adapters) and
// random initialisation (gpe make-model) all walk WeightLayout, so an architecture's tensors are
// written down once; a new family is a few rows and its forward differences.
//
// Thread-safety: pure functions; Weights are plain handles (immutable once a Model is loaded).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/formats/config.h"
#include "engine/model/linear.h"

namespace gpeserve::model {

// A model's weights as served (inference) or as trainable fp32 parameters (training); both run
// through the same TransformerHidden. Norms and biases are in the activation dtype. Undefined
// tensors are absent from the architecture. Fused checkpoint projections (Phi-3's qkv_proj and
// gate_up_proj) are held as row ranges of the fused matrix (views, no copy).
struct LayerWeights {
  torch::Tensor input_norm;      // before attention (input_layernorm)
  torch::Tensor mlp_norm;        // before the MLP (post_attention_layernorm; Gemma 2's
                                 // pre_feedforward_layernorm)
  torch::Tensor attn_out_norm;   // Gemma 2: on the attention output (post_attention_layernorm)
  torch::Tensor mlp_out_norm;    // Gemma 2: on the MLP output (post_feedforward_layernorm)
  torch::Tensor q_norm, k_norm;  // Qwen 3: per head, [head_dim]
  Matrix q_w, k_w, v_w, o_w, gate_w, up_w, down_w;
  torch::Tensor q_b, k_b, v_b, o_b, gate_b, up_b, down_b;

  // Every tensor member, for code that treats them alike (copying, counting).
  template <typename F>
  void ForEachTensor(F&& f) {
    for (torch::Tensor* t : {&input_norm,  &mlp_norm,  &attn_out_norm, &mlp_out_norm, &q_norm,
                             &k_norm,      &q_w.data,  &k_w.data,      &v_w.data,     &o_w.data,
                             &gate_w.data, &up_w.data, &down_w.data,   &q_b,          &k_b,
                             &v_b,         &o_b,       &gate_b,        &up_b,         &down_b}) {
      f(*t);
    }
  }
};
struct Weights {
  Matrix embed, lm_head;  // lm_head is embed when tied
  torch::Tensor final_norm;
  std::vector<LayerWeights> layers;
};

// The member of Weights a checkpoint tensor fills (inside layer WeightSpec::layer for the
// layer roles).
enum class Role : uint8_t {
  // Outside the layers.
  kEmbed,
  kFinalNorm,
  kLmHead,
  // Norms of a layer.
  kInputNorm,
  kMlpNorm,
  kAttnOutNorm,
  kMlpOutNorm,
  kQNorm,
  kKNorm,
  // Matrices of a layer.
  kQ,
  kK,
  kV,
  kO,
  kGate,
  kUp,
  kDown,
  // Biases of a layer.
  kQBias,
  kKBias,
  kVBias,
  kOBias,
  kGateBias,
  kUpBias,
  kDownBias,
};

// One tensor of a checkpoint.
struct WeightSpec {
  enum class Kind : uint8_t {
    kNorm,    // a norm's scale: activation dtype
    kBias,    // activation dtype
    kMatrix,  // [out, in]: the serving dtype; an int8 folder adds "<name>_scale" ([out] fp32)
  };
  // A member the tensor fills and how many of its rows go there.
  struct Part {
    Role role;
    int64_t rows;
  };

  std::string name;            // Hugging Face's, e.g. model.layers.3.self_attn.q_proj.weight
  std::string gguf_name;       // llama.cpp's, e.g. blk.3.attn_q.weight
  std::vector<int64_t> shape;  // as Hugging Face stores it (rows first; GGUF lists it reversed)
  Kind kind = Kind::kMatrix;
  int64_t layer = -1;       // -1: outside the layers
  std::vector<Part> parts;  // in row order: one, or a fused projection's (qkv_proj: q, k, v)
};

// Every tensor of `config`'s checkpoint, in the order gpe make-model writes (and draws) them:
// the embedding, each layer's, the final norm, then lm_head when untied.
std::vector<WeightSpec> WeightLayout(const ModelConfig& config);

// Where `spec` (a norm or a bias) is held in `weights` (its layers already sized).
torch::Tensor& HeldVector(const WeightSpec& spec, Weights& weights);
const torch::Tensor& HeldVector(const WeightSpec& spec, const Weights& weights);
// Where `spec` (a matrix) is held in `weights`: one matrix per part, in row order.
std::vector<Matrix*> HeldMatrices(const WeightSpec& spec, Weights& weights);
std::vector<const Matrix*> HeldMatrices(const WeightSpec& spec, const Weights& weights);

// Puts `matrix`, the checkpoint tensor `spec`, into its members: a fused projection's parts as
// row ranges of it (views, no copy).
void PlaceMatrix(const WeightSpec& spec, const Matrix& matrix, Weights& weights);
// The checkpoint tensor `spec` (a matrix) from its members: a fused projection's parts
// concatenated (a copy); otherwise the held matrix itself.
Matrix GatherMatrix(const WeightSpec& spec, const Weights& weights);

// Every tensor of WeightLayout(config) with its Hugging Face name, in layout order; an int8
// matrix's scale follows it as "<name>_scale"; a matrix held in ggml's blocks comes widened to
// fp32.
std::vector<std::pair<std::string, torch::Tensor>> NamedWeights(const ModelConfig& config,
                                                                const Weights& weights);

}  // namespace gpeserve::model
