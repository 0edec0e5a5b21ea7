#include "engine/model/rotary.h"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace gpeserve::model {
namespace {

constexpr int64_t kTablePositions = 32768;

// Inverse rotary frequencies with the config's scaling, as Hugging Face computes them (the
// short factors for longrope; `long_factors` picks the long ones).
torch::Tensor InverseFrequencies(const ModelConfig& c, bool long_factors) {
  const int64_t dim = c.rotary_dim;
  const torch::Tensor exponent =
      torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(dim);
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScaling::Type::kLongRope) {
    const torch::Tensor ext =
        torch::tensor(long_factors ? s.long_factor : s.short_factor, torch::kFloat64)
            .to(torch::kFloat32);
    return 1.0 / (ext * torch::pow(c.rope_theta, exponent));
  }
  torch::Tensor inv_freq = 1.0 / torch::pow(c.rope_theta, exponent);
  if (s.type == RopeScaling::Type::kLinear) return inv_freq / s.factor;
  if (s.type != RopeScaling::Type::kLlama3) return inv_freq;
  const double old_context = static_cast<double>(s.original_max_position);
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  const torch::Tensor wavelen = 2 * M_PI / inv_freq;
  torch::Tensor scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  const torch::Tensor smooth =
      (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const torch::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const torch::Tensor medium =
      (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return torch::where(medium, smoothed, scaled);
}

// (cos, sin) [P, rotary_dim] of positions P (float32) for inverse frequencies `inv_freq`, times
// `factor` (longrope's attention factor) as transformers scales them.
std::pair<torch::Tensor, torch::Tensor> Tables(const torch::Tensor& positions,
                                               const torch::Tensor& inv_freq, double factor) {
  const torch::Tensor freqs = torch::outer(positions, inv_freq);
  const torch::Tensor emb = torch::cat({freqs, freqs}, -1);
  if (factor == 1.0) return {emb.cos(), emb.sin()};
  return {emb.cos() * factor, emb.sin() * factor};
}

torch::Tensor RotateHalf(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(const ModelConfig& c, const torch::Device& device)
    : attention_factor_(c.rope_scaling.attention_factor) {
  const int64_t table = std::min(kTablePositions, c.max_position_embeddings);
  const torch::Tensor positions =
      torch::arange(table, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  inv_freq_ = InverseFrequencies(c, /*long_factors=*/false).to(device);
  std::tie(cos_table_, sin_table_) = model::Tables(positions, inv_freq_, attention_factor_);
  if (c.rope_scaling.type == RopeScaling::Type::kLongRope) {
    long_from_ = c.rope_scaling.original_max_position;
    long_inv_freq_ = InverseFrequencies(c, /*long_factors=*/true).to(device);
    std::tie(long_cos_table_, long_sin_table_) =
        model::Tables(positions, long_inv_freq_, attention_factor_);
  }
}

std::pair<torch::Tensor, torch::Tensor> RotaryEmbedding::Lookup(
    const torch::Tensor& positions, bool in_table, const torch::Tensor& inv_freq,
    const torch::Tensor& cos_table, const torch::Tensor& sin_table) const {
  if (in_table) {
    return {cos_table.index_select(0, positions), sin_table.index_select(0, positions)};
  }
  return model::Tables(positions.to(torch::kFloat32), inv_freq, attention_factor_);
}

std::pair<torch::Tensor, torch::Tensor> RotaryEmbedding::Tables(
    const torch::Tensor& positions) const {
  const bool in_table =
      positions.numel() == 0 || positions.max().item<int64_t>() < cos_table_.size(0);
  auto [cos, sin] = Lookup(positions, in_table, inv_freq_, cos_table_, sin_table_);
  if (!long_inv_freq_.defined()) return {cos, sin};
  const torch::Tensor is_long = (positions >= long_from_).unsqueeze(1);
  auto [long_cos, long_sin] =
      Lookup(positions, in_table, long_inv_freq_, long_cos_table_, long_sin_table_);
  return {torch::where(is_long, long_cos, cos), torch::where(is_long, long_sin, sin)};
}

torch::Tensor ApplyRotary(const torch::Tensor& x, const torch::Tensor& cos,
                          const torch::Tensor& sin) {
  const int64_t rotary = cos.size(-1);
  if (rotary == x.size(-1)) return x * cos + RotateHalf(x) * sin;
  const torch::Tensor part = x.narrow(-1, 0, rotary);
  return torch::cat(
      {part * cos + RotateHalf(part) * sin, x.narrow(-1, rotary, x.size(-1) - rotary)}, -1);
}

}  // namespace gpeserve::model
