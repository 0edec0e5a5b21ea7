#include "engine/model/weight_layout.h"

#include "absl/strings/str_cat.h"

namespace gpeserve::model {
namespace {

// A length of the layout, resolved against a config.
enum class Dim : uint8_t { kNone, kVocab, kHidden, kQ, kKv, kFf, kHeadDim, kQkv, kGateUp };

// Which checkpoints hold a row: the architecture switches of ModelConfig.
enum class When : uint8_t {
  kAlways,
  kUntied,         // !tie_word_embeddings
  kPlainNorms,     // !sandwich_norms
  kSandwichNorms,  // sandwich_norms (Gemma 2)
  kSplit,          // !fused_projections
  kFused,          // fused_projections (Phi-3)
  kQkNorm,         // qk_norm (Qwen 3)
  kAttentionBias,  // attention_bias: q, k, v
  kOProjBias,      // o_proj_bias
  kMlpBias,        // mlp_bias
};

struct Row {
  const char* name;       // Hugging Face; inside a layer, after "model.layers.N."
  const char* gguf_name;  // llama.cpp; inside a layer, after "blk.N."
  WeightSpec::Kind kind;
  Dim rows, cols;  // cols kNone: a vector
  When when;
  std::vector<Role> roles;  // the members it fills, in row order
};

// The table. Its order is gpe make-model's (the order its random weights are drawn in, so the
// bytes it writes for a seed never change): keep it.
using enum WeightSpec::Kind;
using enum Dim;
using enum When;
// clang-format off
const std::vector<Row>& BeforeLayers() {
  static const std::vector<Row> rows = {
      {"model.embed_tokens.weight", "token_embd.weight", kMatrix, kVocab, kHidden, kAlways,
       {Role::kEmbed}},
  };
  return rows;
}

const std::vector<Row>& LayerRows() {
  static const std::vector<Row> rows = {
      {"input_layernorm.weight",            "attn_norm.weight",           kNorm,   kHidden, kNone,
       kAlways,        {Role::kInputNorm}},
      // One Hugging Face name: the MLP's input norm, or with sandwich norms the attention
      // output's.
      {"post_attention_layernorm.weight",   "ffn_norm.weight",            kNorm,   kHidden, kNone,
       kPlainNorms,    {Role::kMlpNorm}},
      {"post_attention_layernorm.weight",   "post_attention_norm.weight", kNorm,   kHidden, kNone,
       kSandwichNorms, {Role::kAttnOutNorm}},
      {"pre_feedforward_layernorm.weight",  "ffn_norm.weight",            kNorm,   kHidden, kNone,
       kSandwichNorms, {Role::kMlpNorm}},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight",       kNorm,   kHidden, kNone,
       kSandwichNorms, {Role::kMlpOutNorm}},
      {"self_attn.qkv_proj.weight",         "attn_qkv.weight",            kMatrix, kQkv,    kHidden,
       kFused,         {Role::kQ, Role::kK, Role::kV}},
      {"self_attn.q_proj.weight",           "attn_q.weight",              kMatrix, kQ,      kHidden,
       kSplit,         {Role::kQ}},
      {"self_attn.k_proj.weight",           "attn_k.weight",              kMatrix, kKv,     kHidden,
       kSplit,         {Role::kK}},
      {"self_attn.v_proj.weight",           "attn_v.weight",              kMatrix, kKv,     kHidden,
       kSplit,         {Role::kV}},
      {"self_attn.q_norm.weight",           "attn_q_norm.weight",         kNorm,   kHeadDim, kNone,
       kQkNorm,        {Role::kQNorm}},
      {"self_attn.k_norm.weight",           "attn_k_norm.weight",         kNorm,   kHeadDim, kNone,
       kQkNorm,        {Role::kKNorm}},
      {"self_attn.o_proj.weight",           "attn_output.weight",         kMatrix, kHidden, kQ,
       kAlways,        {Role::kO}},
      {"self_attn.q_proj.bias",             "attn_q.bias",                kBias,   kQ,      kNone,
       kAttentionBias, {Role::kQBias}},
      {"self_attn.k_proj.bias",             "attn_k.bias",                kBias,   kKv,     kNone,
       kAttentionBias, {Role::kKBias}},
      {"self_attn.v_proj.bias",             "attn_v.bias",                kBias,   kKv,     kNone,
       kAttentionBias, {Role::kVBias}},
      {"self_attn.o_proj.bias",             "attn_output.bias",           kBias,   kHidden, kNone,
       kOProjBias,     {Role::kOBias}},
      // llama.cpp keeps Phi-3's fused gate_up_proj under the up projection's name.
      {"mlp.gate_up_proj.weight",           "ffn_up.weight",              kMatrix, kGateUp, kHidden,
       kFused,         {Role::kGate, Role::kUp}},
      {"mlp.gate_proj.weight",              "ffn_gate.weight",            kMatrix, kFf,     kHidden,
       kSplit,         {Role::kGate}},
      {"mlp.up_proj.weight",                "ffn_up.weight",              kMatrix, kFf,     kHidden,
       kSplit,         {Role::kUp}},
      {"mlp.down_proj.weight",              "ffn_down.weight",            kMatrix, kHidden, kFf,
       kAlways,        {Role::kDown}},
      {"mlp.gate_proj.bias",                "ffn_gate.bias",              kBias,   kFf,     kNone,
       kMlpBias,       {Role::kGateBias}},
      {"mlp.up_proj.bias",                  "ffn_up.bias",                kBias,   kFf,     kNone,
       kMlpBias,       {Role::kUpBias}},
      {"mlp.down_proj.bias",                "ffn_down.bias",              kBias,   kHidden, kNone,
       kMlpBias,       {Role::kDownBias}},
  };
  return rows;
}

const std::vector<Row>& AfterLayers() {
  static const std::vector<Row> rows = {
      {"model.norm.weight", "output_norm.weight", kNorm,   kHidden, kNone,   kAlways,
       {Role::kFinalNorm}},
      {"lm_head.weight",    "output.weight",      kMatrix, kVocab,  kHidden, kUntied,
       {Role::kLmHead}},
  };
  return rows;
}
// clang-format on

bool Holds(const ModelConfig& c, When when) {
  switch (when) {
    case When::kAlways:
      return true;
    case When::kUntied:
      return !c.tie_word_embeddings;
    case When::kPlainNorms:
      return !c.sandwich_norms;
    case When::kSandwichNorms:
      return c.sandwich_norms;
    case When::kSplit:
      return !c.fused_projections;
    case When::kFused:
      return c.fused_projections;
    case When::kQkNorm:
      return c.qk_norm;
    case When::kAttentionBias:
      return c.attention_bias;
    case When::kOProjBias:
      return c.o_proj_bias;
    case When::kMlpBias:
      return c.mlp_bias;
  }
  return false;
}

int64_t Length(const ModelConfig& c, Dim dim) {
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  switch (dim) {
    case Dim::kNone:
      return 0;
    case Dim::kVocab:
      return c.vocab_size;
    case Dim::kHidden:
      return c.hidden_size;
    case Dim::kQ:
      return q;
    case Dim::kKv:
      return kv;
    case Dim::kFf:
      return c.intermediate_size;
    case Dim::kHeadDim:
      return c.head_dim;
    case Dim::kQkv:
      return q + 2 * kv;
    case Dim::kGateUp:
      return 2 * c.intermediate_size;
  }
  return 0;
}

// The rows of a fused projection's part.
int64_t PartRows(const ModelConfig& c, Role role) {
  switch (role) {
    case Role::kQ:
      return Length(c, Dim::kQ);
    case Role::kK:
    case Role::kV:
      return Length(c, Dim::kKv);
    default:
      return Length(c, Dim::kFf);  // gate, up
  }
}

WeightSpec Spec(const ModelConfig& c, const Row& row, int64_t layer) {
  WeightSpec spec;
  const std::string prefix = layer < 0 ? "" : absl::StrCat("model.layers.", layer, ".");
  const std::string gguf_prefix = layer < 0 ? "" : absl::StrCat("blk.", layer, ".");
  spec.name = prefix + row.name;
  spec.gguf_name = gguf_prefix + row.gguf_name;
  spec.shape = {Length(c, row.rows)};
  if (row.cols != Dim::kNone) spec.shape.push_back(Length(c, row.cols));
  spec.kind = row.kind;
  spec.layer = layer;
  for (Role role : row.roles) {
    spec.parts.push_back({role, row.roles.size() == 1 ? spec.shape[0] : PartRows(c, role)});
  }
  return spec;
}

// The tensor member of a norm or bias role; nullptr for a matrix role.
torch::Tensor* VectorMember(Weights& w, Role role, int64_t layer) {
  if (role == Role::kFinalNorm) return &w.final_norm;
  if (layer < 0) return nullptr;
  LayerWeights& l = w.layers[layer];
  switch (role) {
    case Role::kInputNorm:
      return &l.input_norm;
    case Role::kMlpNorm:
      return &l.mlp_norm;
    case Role::kAttnOutNorm:
      return &l.attn_out_norm;
    case Role::kMlpOutNorm:
      return &l.mlp_out_norm;
    case Role::kQNorm:
      return &l.q_norm;
    case Role::kKNorm:
      return &l.k_norm;
    case Role::kQBias:
      return &l.q_b;
    case Role::kKBias:
      return &l.k_b;
    case Role::kVBias:
      return &l.v_b;
    case Role::kOBias:
      return &l.o_b;
    case Role::kGateBias:
      return &l.gate_b;
    case Role::kUpBias:
      return &l.up_b;
    case Role::kDownBias:
      return &l.down_b;
    default:
      return nullptr;
  }
}

// The matrix member of a matrix role; nullptr for a norm or bias role.
Matrix* MatrixMember(Weights& w, Role role, int64_t layer) {
  if (role == Role::kEmbed) return &w.embed;
  if (role == Role::kLmHead) return &w.lm_head;
  if (layer < 0) return nullptr;
  LayerWeights& l = w.layers[layer];
  switch (role) {
    case Role::kQ:
      return &l.q_w;
    case Role::kK:
      return &l.k_w;
    case Role::kV:
      return &l.v_w;
    case Role::kO:
      return &l.o_w;
    case Role::kGate:
      return &l.gate_w;
    case Role::kUp:
      return &l.up_w;
    case Role::kDown:
      return &l.down_w;
    default:
      return nullptr;
  }
}

}  // namespace

std::vector<WeightSpec> WeightLayout(const ModelConfig& c) {
  std::vector<WeightSpec> layout;
  for (const Row& row : BeforeLayers()) {
    if (Holds(c, row.when)) layout.push_back(Spec(c, row, -1));
  }
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    for (const Row& row : LayerRows()) {
      if (Holds(c, row.when)) layout.push_back(Spec(c, row, layer));
    }
  }
  for (const Row& row : AfterLayers()) {
    if (Holds(c, row.when)) layout.push_back(Spec(c, row, -1));
  }
  return layout;
}

torch::Tensor& HeldVector(const WeightSpec& spec, Weights& weights) {
  return *VectorMember(weights, spec.parts.front().role, spec.layer);
}

const torch::Tensor& HeldVector(const WeightSpec& spec, const Weights& weights) {
  // Only reads through the member found.
  return HeldVector(spec, const_cast<Weights&>(weights));
}

std::vector<Matrix*> HeldMatrices(const WeightSpec& spec, Weights& weights) {
  std::vector<Matrix*> held;
  for (const WeightSpec::Part& part : spec.parts) {
    held.push_back(MatrixMember(weights, part.role, spec.layer));
  }
  return held;
}

std::vector<const Matrix*> HeldMatrices(const WeightSpec& spec, const Weights& weights) {
  std::vector<const Matrix*> held;
  for (Matrix* m : HeldMatrices(spec, const_cast<Weights&>(weights))) held.push_back(m);
  return held;
}

void PlaceMatrix(const WeightSpec& spec, const Matrix& matrix, Weights& weights) {
  const std::vector<Matrix*> held = HeldMatrices(spec, weights);
  if (held.size() == 1) {
    *held.front() = matrix;
    return;
  }
  int64_t row = 0;
  for (size_t i = 0; i < held.size(); ++i) {
    *held[i] = matrix.Rows(row, spec.parts[i].rows);
    row += spec.parts[i].rows;
  }
}

Matrix GatherMatrix(const WeightSpec& spec, const Weights& weights) {
  const std::vector<const Matrix*> held = HeldMatrices(spec, weights);
  if (held.size() == 1) return *held.front();
  std::vector<Matrix> parts;
  for (const Matrix* m : held) parts.push_back(*m);
  return ConcatRows(parts);
}

std::vector<std::pair<std::string, torch::Tensor>> NamedWeights(const ModelConfig& config,
                                                                const Weights& weights) {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const WeightSpec& spec : WeightLayout(config)) {
    if (spec.kind != WeightSpec::Kind::kMatrix) {
      named.emplace_back(spec.name, HeldVector(spec, weights));
      continue;
    }
    const Matrix m = GatherMatrix(spec, weights);
    // ggml's blocks have no safetensors dtype: written widened to fp32.
    named.emplace_back(spec.name, m.has_blocks() ? Dequantized(m) : m.data);
    if (m.scale.defined()) named.emplace_back(spec.name + "_scale", m.scale);
  }
  return named;
}

}  // namespace gpeserve::model
