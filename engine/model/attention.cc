#include "engine/model/attention.h"

#include <cmath>

namespace gpeserve::model {

torch::Tensor ScaledDotProductAttention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& allowed) {
  const int64_t heads = q.size(1), kv_heads = k.size(1), head_dim = q.size(2);
  if (q.device().is_cpu() && q.scalar_type() != torch::kFloat32) {
    // libtorch 1.13's CPU batched matmul is slow in bf16/fp16 for these strided shapes (it
    // made a bf16 decode step grow visibly with the context); the attention matrices are
    // small next to the weights, so compute them in fp32 and round the result.
    return ScaledDotProductAttention(q.to(torch::kFloat32), k.to(torch::kFloat32),
                                     v.to(torch::kFloat32), allowed)
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
  torch::Tensor scores = torch::matmul(qg, kh.transpose(1, 2)) / std::sqrt(double(head_dim));
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

torch::Tensor DenseAttention::Attend(int64_t layer, const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v) {
  new_k_.push_back(k);
  new_v_.push_back(v);
  torch::Tensor keys = k, values = v;
  if (static_cast<size_t>(layer) < past_k_.size() && past_k_[layer].defined() &&
      past_k_[layer].size(0) > 0) {
    keys = torch::cat({past_k_[layer].to(k.device(), k.scalar_type()), k}, 0);
    values = torch::cat({past_v_[layer].to(v.device(), v.scalar_type()), v}, 0);
  }
  return ScaledDotProductAttention(q, keys, values, allowed_.to(q.device()));
}

torch::Tensor DenseAttention::CausalMask(int64_t tokens) {
  return torch::ones({tokens, tokens}, torch::kBool).tril();
}

}  // namespace gpeserve::model
