#include "engine/model/attention.h"

#include <cmath>

namespace gpeserve::model {

namespace {

// scale * scores, soft-capped as Gemma 2 does (divide, tanh, multiply), in the scores' dtype.
torch::Tensor ScaleScores(const torch::Tensor& scores, const LayerAttention& layer) {
  torch::Tensor scaled = scores * layer.scale;
  if (layer.softcap > 0) scaled = torch::tanh(scaled / layer.softcap) * layer.softcap;
  return scaled;
}

// The mask for `window`, cached per window in `cache`.
const torch::Tensor& Windowed(const torch::Tensor& allowed, int64_t window,
                              std::map<int64_t, torch::Tensor>& cache) {
  if (window <= 0) return allowed;
  auto [it, inserted] = cache.try_emplace(window);
  if (inserted) it->second = WindowMask(allowed, window);
  return it->second;
}

}  // namespace

torch::Tensor WindowMask(const torch::Tensor& allowed, int64_t window) {
  if (window <= 0) return allowed;
  // Visible keys counted from the right: a key is kept while at most `window` visible keys
  // lie at or after it.
  const torch::Tensor from_right = allowed.flip(-1).cumsum(-1).flip(-1);
  return allowed.logical_and(from_right <= window);
}

torch::Tensor ScaledDotProductAttention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& allowed,
                                        const LayerAttention& layer) {
  const int64_t heads = q.size(1), kv_heads = k.size(1), head_dim = q.size(2);
  if (q.device().is_cpu() && q.scalar_type() != torch::kFloat32) {
    // libtorch 1.13's CPU batched matmul is slow in bf16/fp16 for these strided shapes (it
    // made a bf16 decode step grow visibly with the context); the attention matrices are
    // small next to the weights, so compute them in fp32 and round the result.
    return ScaledDotProductAttention(q.to(torch::kFloat32), k.to(torch::kFloat32),
                                     v.to(torch::kFloat32), allowed, layer)
        .to(q.scalar_type());
  }
  // Grouped-query attention without copying keys: query head h uses key/value head
  // h / group, so the queries are regrouped as [kv_heads, group * T, D] against [kv_heads, S, D].
  const int64_t tokens = q.size(0), group = heads / kv_heads, keys_len = k.size(0);
  const torch::Tensor qg = q.view({tokens, kv_heads, group, head_dim})
                               .permute({1, 2, 0, 3})
                               .reshape({kv_heads, group * tokens, head_dim});
  const torch::Tensor kh = k.transpose(0, 1);  // [KV, S, D]
  const torch::Tensor vh = v.transpose(0, 1);  // [KV, S, D]
  torch::Tensor scores = ScaleScores(torch::matmul(qg, kh.transpose(1, 2)), layer);
  scores = scores.view({kv_heads, group, tokens, keys_len})
               .to(torch::kFloat32)
               .masked_fill(allowed.logical_not().reshape({1, 1, tokens, keys_len}),
                            -std::numeric_limits<float>::infinity());
  const torch::Tensor probs = torch::softmax(scores, -1).to(q.scalar_type());
  return torch::matmul(probs.view({kv_heads, group * tokens, keys_len}), vh)  // [KV, G*T, D]
      .view({kv_heads, group, tokens, head_dim})
      .permute({2, 0, 1, 3})
      .reshape({tokens, heads, head_dim});
}

DenseAttention::DenseAttention(std::vector<torch::Tensor> past_k, std::vector<torch::Tensor> past_v,
                               torch::Tensor allowed)
    : past_k_(std::move(past_k)), past_v_(std::move(past_v)), allowed_(std::move(allowed)) {}

torch::Tensor DenseAttention::Attend(const LayerAttention& spec, const torch::Tensor& q,
                                     const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t layer = spec.layer;
  new_k_.push_back(k);
  new_v_.push_back(v);
  torch::Tensor keys = k, values = v;
  if (static_cast<size_t>(layer) < past_k_.size() && past_k_[layer].defined() &&
      past_k_[layer].size(0) > 0) {
    keys = torch::cat({past_k_[layer].to(k.device(), k.scalar_type()), k}, 0);
    values = torch::cat({past_v_[layer].to(v.device(), v.scalar_type()), v}, 0);
  }
  if (allowed_.device() != q.device()) allowed_ = allowed_.to(q.device());
  return ScaledDotProductAttention(q, keys, values, Windowed(allowed_, spec.window, windowed_),
                                   spec);
}

torch::Tensor DenseAttention::CausalMask(int64_t tokens) {
  return torch::ones({tokens, tokens}, torch::kBool).tril();
}

PaddedAttention::PaddedAttention(torch::Tensor rows, torch::Tensor allowed)
    : batch_(rows.size(0)), length_(rows.size(1)) {
  rows_ = rows.reshape({-1});
  allowed_ = allowed.view({batch_, 1, 1, length_, length_});
  // Each flat row's padded position: scatter the positions 0..B*L-1 to the rows they hold
  // (the padding positions all point at the extra row T, dropped afterwards).
  const int64_t total = rows_.max().item<int64_t>() + 1;
  torch::Tensor back = torch::zeros({total}, torch::TensorOptions().dtype(torch::kInt64));
  back.index_put_({rows_}, torch::arange(batch_ * length_, torch::kInt64));
  back_ = back.to(rows.device());
  rows_ = rows_.to(rows.device());
  allowed_ = allowed_.to(rows.device());
}

torch::Tensor PaddedAttention::Attend(const LayerAttention& layer, const torch::Tensor& q,
                                      const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t tokens = q.size(0), heads = q.size(1), kv_heads = k.size(1), dim = q.size(2);
  const int64_t group = heads / kv_heads, b = batch_, l = length_;
  auto pad = [&](const torch::Tensor& x) {  // [T, H, D] -> [B, L, H, D], padding rows zero
    const torch::Tensor with_zero = torch::cat({x, torch::zeros_like(x.narrow(0, 0, 1))});
    return with_zero.index_select(0, rows_).view({b, l, x.size(1), dim});
  };
  const torch::Tensor qg = pad(q)
                               .view({b, l, kv_heads, group, dim})
                               .permute({0, 2, 3, 1, 4})
                               .reshape({b, kv_heads, group * l, dim});
  const torch::Tensor kh = pad(k).permute({0, 2, 1, 3});  // [B, KV, L, D]
  const torch::Tensor vh = pad(v).permute({0, 2, 1, 3});
  torch::Tensor scores = ScaleScores(torch::matmul(qg, kh.transpose(-1, -2)), layer);
  scores = scores.view({b, kv_heads, group, l, l})
               .to(torch::kFloat32)
               .masked_fill(Windowed(allowed_, layer.window, windowed_).logical_not(),
                            -std::numeric_limits<float>::infinity());
  const torch::Tensor probs = torch::softmax(scores, -1).to(q.scalar_type());
  const torch::Tensor out = torch::matmul(probs.view({b, kv_heads, group * l, l}), vh)
                                .view({b, kv_heads, group, l, dim})
                                .permute({0, 3, 1, 2, 4})
                                .reshape({b * l, heads, dim});
  TORCH_CHECK(back_.size(0) >= tokens, "PaddedAttention: rows do not cover the tokens");
  return out.index_select(0, back_.narrow(0, 0, tokens));
}

}  // namespace gpeserve::model
