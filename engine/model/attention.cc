#include "engine/model/attention.h"

#include <cmath>

namespace gpeserve::model {

torch::Tensor ScaledDotProductAttention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& allowed) {
  const int64_t heads = q.size(1), kv_heads = k.size(1), head_dim = q.size(2);
  torch::Tensor keys = k, values = v;
  if (heads != kv_heads) {
    // Query head h uses key/value head h / (heads / kv_heads).
    keys = k.repeat_interleave(heads / kv_heads, /*dim=*/1);
    values = v.repeat_interleave(heads / kv_heads, /*dim=*/1);
  }
  const torch::Tensor qh = q.transpose(0, 1);       // [H, T, D]
  const torch::Tensor kh = keys.transpose(0, 1);    // [H, S, D]
  const torch::Tensor vh = values.transpose(0, 1);  // [H, S, D]
  torch::Tensor scores = torch::matmul(qh, kh.transpose(1, 2)) / std::sqrt(double(head_dim));
  scores =
      scores.to(torch::kFloat32)
          .masked_fill(allowed.logical_not().unsqueeze(0), -std::numeric_limits<float>::infinity());
  const torch::Tensor probs = torch::softmax(scores, -1).to(q.scalar_type());
  return torch::matmul(probs, vh).transpose(0, 1).contiguous();  // [T, H, D]
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
