// The attention step of a forward pass, kept behind one interface so that a paged or fused
// kernel can replace it. The model computes q, k, v for the new tokens of a flat batch (rotary
// already applied) and calls Attend once per layer, in layer order; the context decides which
// keys each new token may see, where the new k/v go, and computes the attention output.
//
// Thread-safety: an AttentionContext belongs to one forward call on one thread.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <vector>

namespace gpeserve::model {

// What one layer's attention computes besides q, k, v: the model's, fixed per layer.
struct LayerAttention {
  int64_t layer = 0;
  double scale = 1.0;    // multiplies q.k (head_dim^-0.5 unless the model says otherwise)
  double softcap = 0.0;  // > 0: scores become softcap * tanh(scores / softcap) (Gemma 2)
  // > 0: each query sees only the last `window` of the keys it may see, in key (cache) order;
  // with fewer visible keys it is plain attention.
  int64_t window = 0;
};

class AttentionContext {
 public:
  virtual ~AttentionContext() = default;
  // q: [T, num_heads, head_dim]; k, v: [T, num_kv_heads, head_dim] (the serving dtype and
  // device). Returns [T, num_heads, head_dim].
  virtual torch::Tensor Attend(const LayerAttention& layer, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v) = 0;
};

// softmax(cap(scale * q k^T) + mask) v with grouped-query heads, as Hugging Face's eager
// attention computes it: scores in the serving dtype, softmax in fp32 (on the CPU, bf16/fp16
// inputs are computed in fp32 throughout: libtorch 1.13's reduced-precision batched matmul is
// slow there). q: [T, Hq, D]; k, v: [S, Hkv, D]; allowed: [T, S] bool (true = may attend), the
// window already applied (WindowMask). Every row must allow at least one key.
torch::Tensor ScaledDotProductAttention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& allowed,
                                        const LayerAttention& layer);

// `allowed` [..., S] bool keeping, in each row, only the last `window` true entries (the keys
// a windowed layer sees); `allowed` itself when window is 0.
torch::Tensor WindowMask(const torch::Tensor& allowed, int64_t window);

// Reference attention over explicit tensors: the new tokens see the rows of `past` K/V allowed
// by `allowed` [T, P + T] (columns: the P past keys, then the T new keys). The new K/V of every
// layer are kept for the caller (e.g. to append to a cache).
class DenseAttention : public AttentionContext {
 public:
  // past_k / past_v: one [P, Hkv, D] tensor per layer, or empty vectors when P = 0.
  DenseAttention(std::vector<torch::Tensor> past_k, std::vector<torch::Tensor> past_v,
                 torch::Tensor allowed);

  torch::Tensor Attend(const LayerAttention& layer, const torch::Tensor& q, const torch::Tensor& k,
                       const torch::Tensor& v) override;

  // The new tokens' K/V per layer, [T, Hkv, D], after the forward call.
  const std::vector<torch::Tensor>& new_k() const { return new_k_; }
  const std::vector<torch::Tensor>& new_v() const { return new_v_; }

  // [T, T] lower-triangular mask: plain causal attention among T new tokens.
  static torch::Tensor CausalMask(int64_t tokens);

 private:
  std::vector<torch::Tensor> past_k_, past_v_;
  torch::Tensor allowed_;
  std::map<int64_t, torch::Tensor> windowed_;  // allowed_ by window, made on first use
  std::vector<torch::Tensor> new_k_, new_v_;
};

// Attention within independent sequences of one flat batch, each padded to the longest: the
// cost is B * L^2 instead of the (B * L)^2 of one block-diagonal mask over the packed rows
// (training packs B sequences of length about L). `rows` [B, L] int64: the flat row of each
// sequence position, or T (the number of rows) for padding; `allowed` [B, L, L] bool: which
// positions of its own sequence a position sees (every row at least one, padding included).
// Differentiable. q: [T, Hq, D]; k, v: [T, Hkv, D].
class PaddedAttention : public AttentionContext {
 public:
  PaddedAttention(torch::Tensor rows, torch::Tensor allowed);

  torch::Tensor Attend(const LayerAttention& layer, const torch::Tensor& q, const torch::Tensor& k,
                       const torch::Tensor& v) override;

 private:
  torch::Tensor rows_;                         // [B * L]
  torch::Tensor allowed_;                      // [B, 1, 1, L, L]
  std::map<int64_t, torch::Tensor> windowed_;  // allowed_ by window, made on first use
  torch::Tensor back_;                         // [T]: the padded position of each flat row
  int64_t batch_, length_;
};

}  // namespace gpeserve::model
