// The transformer body and the LM head as transformers computes them (TransformerHidden,
// LmLogits: model.h), with each LoRA adapter's updates on its own runs of tokens; shared by
// inference (Model::Forward) and training.
#include <cmath>
#include <span>
#include <vector>

#include "engine/model/adapter.h"
#include "engine/model/linear.h"
#include "engine/model/model.h"
#include "engine/model/rotary.h"

namespace gpeserve::model {

namespace {

// RMSNorm over the last dimension, as transformers computes it: Llama's weight * normed (in the
// input dtype), or Gemma's normed * (1 + weight) in fp32.
torch::Tensor RmsNorm(const ModelConfig& c, const torch::Tensor& x, const torch::Tensor& weight) {
  const torch::Tensor xf = x.to(torch::kFloat32);
  const torch::Tensor normed =
      xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + c.rms_norm_eps);
  if (c.norm_weight_plus_one) {
    return (normed * (1.0 + weight.to(torch::kFloat32))).to(x.scalar_type());
  }
  return weight * normed.to(x.scalar_type());
}

torch::Tensor Activate(const ModelConfig& c, const torch::Tensor& x) {
  return c.activation == Activation::kGeluTanh ? torch::gelu(x, "tanh") : torch::silu(x);
}

// Adds each span's update to its rows of `y` (the product of `in` with a base matrix): the
// LoRA `pick` gives of the span's adapter. A span over every row adds out of place (training
// differentiates through it); the others add into their rows.
template <typename Pick>
torch::Tensor Adapted(torch::Tensor y, const torch::Tensor& in,
                      std::span<const AdapterSpan> adapters, Pick pick) {
  for (const AdapterSpan& span : adapters) {
    const LoraWeights& lora = pick(*span.adapter);
    if (!lora.defined()) continue;
    if (span.begin == 0 && span.count == y.size(0)) {
      y = y + lora.Delta(in);
    } else {
      y.narrow(0, span.begin, span.count).add_(lora.Delta(in.narrow(0, span.begin, span.count)));
    }
  }
  return y;
}

// A layer's modules that read one input: their LoRA slots, their outputs (the base products,
// updated in place or replaced), and the slot of their stacked A matrices (LayerLora::Stack).
struct SharedInput {
  std::vector<std::pair<LoraWeights LayerLora::*, torch::Tensor*>> modules;
  torch::Tensor LayerLora::*stacked;
};

// Adds each span's updates of `group` (modules reading `in`, in layer `layer`): x Aᵀ once for
// all of them when the adapter stacked their A matrices, then one addmm per module.
void AddLora(std::span<const AdapterSpan> adapters, size_t layer, const torch::Tensor& in,
             const SharedInput& group) {
  for (const AdapterSpan& span : adapters) {
    const LayerLora& l = span.adapter->layers[layer];
    const bool all = span.begin == 0 && span.count == in.size(0);
    const torch::Tensor x = all ? in : in.narrow(0, span.begin, span.count);
    const torch::Tensor& stacked = l.*group.stacked;
    const torch::Tensor xa = stacked.defined() ? torch::mm(x, stacked.t()) : torch::Tensor();
    for (const auto& [slot, out] : group.modules) {
      const LoraWeights& w = l.*slot;
      if (!w.defined()) continue;
      const torch::Tensor part =
          xa.defined() ? xa.narrow(1, w.offset, w.a.size(0)) : torch::mm(x, w.a.t());
      if (all) {
        *out = torch::addmm(*out, part, w.b.t(), 1.0, w.scale);
      } else {
        out->narrow(0, span.begin, span.count).addmm_(part, w.b.t(), 1.0, w.scale);
      }
    }
  }
}

}  // namespace

torch::Tensor TransformerHidden(const ModelConfig& c, const Weights& w, const torch::Tensor& ids,
                                const RotaryTables& rotary, AttentionContext& attention,
                                std::span<const AdapterSpan> adapters) {
  const int64_t t = ids.size(0);
  // The rotary tables come in the activation dtype.
  const torch::ScalarType dtype = rotary.cos.scalar_type();
  torch::Tensor x = Embed(w.embed, ids, dtype);
  for (const AdapterSpan& span : adapters) {
    const Adapter& a = *span.adapter;
    if (!a.touches_embedding()) continue;
    const torch::Tensor span_ids = ids.narrow(0, span.begin, span.count);
    torch::Tensor rows =
        a.embed_saved.data.defined() ? Embed(a.embed_saved, span_ids, dtype) : torch::Tensor();
    if (a.embed.defined()) {
      const torch::Tensor delta = a.embed.EmbedDelta(span_ids).to(dtype);
      rows = rows.defined() ? rows + delta : x.narrow(0, span.begin, span.count) + delta;
    }
    if (span.begin == 0 && span.count == t) {
      x = rows;
    } else {
      x.narrow(0, span.begin, span.count).copy_(rows);
    }
  }
  if (c.scale_embeddings) {
    // Gemma: times sqrt(hidden_size) rounded to the activation dtype first, as transformers.
    x = x * torch::scalar_tensor(std::sqrt(static_cast<double>(c.hidden_size)), dtype).item();
  }
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    const torch::Tensor h = RmsNorm(c, x, l.input_norm);
    torch::Tensor q = Linear(h, l.q_w, l.q_b), k = Linear(h, l.k_w, l.k_b),
                  v = Linear(h, l.v_w, l.v_b);
    if (!adapters.empty()) {
      AddLora(adapters, i, h,
              {{{&LayerLora::q, &q}, {&LayerLora::k, &k}, {&LayerLora::v, &v}}, &LayerLora::qkv_a});
    }
    q = q.view({t, c.num_heads, c.head_dim});
    k = k.view({t, c.num_kv_heads, c.head_dim});
    v = v.view({t, c.num_kv_heads, c.head_dim});
    if (c.qk_norm) {
      q = RmsNorm(c, q, l.q_norm);
      k = RmsNorm(c, k, l.k_norm);
    }
    const int64_t layer = static_cast<int64_t>(i);
    const bool local = c.local_rotary(layer);
    const torch::Tensor& cos = local ? rotary.local_cos : rotary.cos;
    const torch::Tensor& sin = local ? rotary.local_sin : rotary.sin;
    q = ApplyRotary(q, cos, sin);
    k = ApplyRotary(k, cos, sin);
    const torch::Tensor attn = attention
                                   .Attend({.layer = layer,
                                            .scale = c.attention_scale(),
                                            .softcap = c.attn_logit_softcapping,
                                            .window = c.windowed(layer) ? c.sliding_window : 0},
                                           q, k, v)
                                   .reshape({t, c.num_heads * c.head_dim});
    torch::Tensor out = Linear(attn, l.o_w, l.o_b);
    if (!adapters.empty()) AddLora(adapters, i, attn, {{{&LayerLora::o, &out}}, &LayerLora::none});
    if (c.sandwich_norms) out = RmsNorm(c, out, l.attn_out_norm);
    x = x + out;
    const torch::Tensor m = RmsNorm(c, x, l.mlp_norm);
    torch::Tensor gate = Linear(m, l.gate_w, l.gate_b), up = Linear(m, l.up_w, l.up_b);
    if (!adapters.empty()) {
      AddLora(adapters, i, m,
              {{{&LayerLora::gate, &gate}, {&LayerLora::up, &up}}, &LayerLora::gate_up_a});
    }
    const torch::Tensor act = Activate(c, gate) * up;
    out = Linear(act, l.down_w, l.down_b);
    if (!adapters.empty()) {
      AddLora(adapters, i, act, {{{&LayerLora::down, &out}}, &LayerLora::none});
    }
    if (c.sandwich_norms) out = RmsNorm(c, out, l.mlp_out_norm);
    x = x + out;
  }
  return x;
}

torch::Tensor LmLogits(const ModelConfig& c, const Weights& w, const torch::Tensor& hidden,
                       std::span<const AdapterSpan> adapters) {
  const torch::Tensor normed = RmsNorm(c, hidden, w.final_norm);
  torch::Tensor logits = Linear(normed, w.lm_head, torch::Tensor());
  for (const AdapterSpan& span : adapters) {
    const Adapter& a = *span.adapter;
    if (!a.lm_head_saved.data.defined() || span.count == 0) continue;
    const torch::Tensor rows =
        Linear(normed.narrow(0, span.begin, span.count), a.lm_head_saved, torch::Tensor());
    if (span.begin == 0 && span.count == logits.size(0)) {
      logits = rows;
    } else {
      logits.narrow(0, span.begin, span.count).copy_(rows);
    }
  }
  if (!adapters.empty()) {
    logits = Adapted(std::move(logits), normed, adapters,
                     [](const Adapter& a) -> const LoraWeights& { return a.lm_head; });
  }
  if (c.final_logit_softcapping > 0) {
    logits = torch::tanh(logits / c.final_logit_softcapping) * c.final_logit_softcapping;
  }
  return logits;
}

}  // namespace gpeserve::model
