// LoRA adapters on a loaded model: an adapter's low-rank updates as PEFT computes them
// (Δy = scale · (x Aᵀ) Bᵀ on a linear layer; Aᵀ[id] Bᵀ · scale added to an embedding row),
// the modules it replaces whole (modules_to_save), and the runs of tokens of one forward pass
// that use it. The base weights are never changed: a forward step runs the base projections
// once for all its tokens, then each adapter's updates on its own rows only, so sessions of
// different adapters share steps. MergeAdapter folds one into a copy of the weights instead
// (no per-step cost).
//
// Thread-safety: an Adapter is immutable after LoadAdapter and shared as
// std::shared_ptr<const Adapter>.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/formats/adapter_config.h"
#include "engine/formats/config.h"
#include "engine/model/linear.h"

namespace gpeserve::model {

class Model;
struct Weights;

// One low-rank update. Linear: a [r, in], b [out, r]. Embedding: a [vocab, r] (PEFT's
// lora_embedding_A transposed, rows gathered by token id), b [hidden, r]. Undefined: none.
struct LoraWeights {
  torch::Tensor a, b;
  double scale = 1.0;
  bool embedding = false;
  int64_t offset = 0;  // the first row of `a` in its layer's stacked matrix (LayerLora::Stack)

  bool defined() const { return a.defined(); }
  // scale · (x aᵀ) bᵀ for x [rows, in]: [rows, out].
  torch::Tensor Delta(const torch::Tensor& x) const;
  // scale · a[ids] bᵀ: [ids, hidden] (embedding).
  torch::Tensor EmbedDelta(const torch::Tensor& ids) const;
  // scale · b a: the [out, in] update a merge adds (embedding: [vocab, hidden]).
  torch::Tensor Dense() const;
};

// A layer's updates. Fused checkpoint projections (Phi-3's qkv_proj, gate_up_proj) share one
// `a`; their `b` rows are split like the base matrix.
struct LayerLora {
  LoraWeights q, k, v, o, gate, up, down;
  // The A matrices of the modules that read one input stacked, each distinct one once (a fused
  // projection's parts share theirs): one product x Aᵀ serves q, k and v (gate and up). Set by
  // Stack(); undefined: each module multiplies by its own `a` (training). `none`: always
  // undefined (modules with an input of their own).
  torch::Tensor qkv_a, gate_up_a, none;
  // Builds qkv_a and gate_up_a and the members' offsets into them.
  void Stack();
};

// Puts `lora`, the update of the layer module named `leaf` (q_proj ... down_proj, or Phi-3's
// fused qkv_proj / gate_up_proj, whose B rows are split as the base matrix's rows are), into
// `layer`.
void SetLayerModule(LayerLora& layer, const std::string& leaf, const LoraWeights& lora,
                    const ModelConfig& config);

struct Adapter {
  std::string name;  // what sessions ask for (gpeserve --adapter NAME=DIR)
  std::string dir;
  AdapterConfig config;
  std::vector<LayerLora> layers;  // one per decoder layer
  LoraWeights embed, lm_head;
  // modules_to_save: replacements of the whole matrix, in the serving dtype (undefined: none).
  Matrix embed_saved, lm_head_saved;
  int64_t parameters = 0;  // numbers in the adapter's tensors

  // Whether the adapter changes the input embedding or the output projection (a tied model
  // then needs them apart).
  bool touches_embedding() const { return embed.defined() || embed_saved.data.defined(); }
  bool touches_lm_head() const { return lm_head.defined() || lm_head_saved.data.defined(); }
};

// Loads a PEFT adapter folder (adapter_config.json and adapter_model.safetensors, or
// adapter_model.bin refused with a hint) for `model`: every targeted module's lora_A and
// lora_B, shapes checked against the model, in the model's activation dtype on its device.
// Errors name the file and the field or tensor.
absl::StatusOr<std::shared_ptr<const Adapter>> LoadAdapter(const std::string& dir,
                                                           const Model& model,
                                                           const std::string& name = "");

// A named tensor of a PEFT adapter file ("base_model.model.<module>.lora_A.weight", ...).
using AdapterTensor = std::pair<std::string, torch::Tensor>;

// Writes a PEFT adapter folder: adapter_config.json (config.ToJson()),
// adapter_model.safetensors with `tensors` (fp32, bf16 or fp16), and prompt.json when the config
// has an instruction; created if missing.
absl::Status WriteAdapterFolder(const std::string& dir, const AdapterConfig& config,
                                const std::vector<AdapterTensor>& tensors);

// The tensors of an adapter of `config` on `model` with random values (normal, standard
// deviation `init_std`; B too, unlike PEFT's zero start, so that it changes the output;
// modules_to_save: the base matrix plus noise), fp32, named as PEFT names them.
absl::StatusOr<std::vector<AdapterTensor>> RandomAdapterTensors(const Model& model,
                                                                const AdapterConfig& config,
                                                                uint64_t seed, double init_std);

// `gpe merge-adapter`: the model in `model_dir` (served in its stored dtype on the CPU) with the
// adapter in `adapter_dir` merged (MergeAdapter), written to `out_dir` as a Hugging Face folder.
absl::Status MergeAdapterFolder(const std::string& model_dir, const std::string& adapter_dir,
                                const std::string& out_dir, int threads = 0);

// A run of consecutive tokens (or rows) of one forward pass computed with `adapter`.
struct AdapterSpan {
  const Adapter* adapter = nullptr;
  int64_t begin = 0;
  int64_t count = 0;
};

// `weights` with `adapter` folded in (W + scale · B A, modules_to_save replaced), as copies of
// the changed matrices in their held dtype (int8 re-quantized per row); the others are shared.
// A tied embedding the adapter changes on one side only is untied (`config.tie_word_embeddings`
// false afterwards), as PEFT computes it unmerged.
Weights MergeAdapter(const Weights& weights, ModelConfig& config, const Adapter& adapter);

}  // namespace gpeserve::model
