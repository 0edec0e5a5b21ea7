#include "engine/sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpeserve::sampler {

absl::Status Validate(const SamplingParams& params) {
  if (!std::isfinite(params.temperature) || params.temperature < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be 0 (greedy) or positive, got ", params.temperature));
  }
  if (params.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be 0 (all tokens) or positive, got ", params.top_k));
  }
  if (!(params.top_p > 0 && params.top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", params.top_p));
  }
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingParams& params, uint64_t default_seed)
    : params_(params), rng_(params.seed.value_or(default_seed)) {}

int32_t Sampler::Sample(std::span<const float> logits) {
  const auto n = static_cast<int32_t>(logits.size());
  const int32_t best =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  if (greedy()) return best;
  // Candidates: tokens whose probability is not negligible next to the best one (e^-40), then
  // the top k of them, most likely first.
  const double t = params_.temperature;
  const float floor = static_cast<float>(logits[best] - 40.0 * t);
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < n; ++i) {
    if (logits[i] >= floor) ids.push_back(i);
  }
  auto more_likely = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < ids.size()) {
    std::nth_element(ids.begin(), ids.begin() + params_.top_k, ids.end(), more_likely);
    ids.resize(params_.top_k);
  }
  // Most likely first where top-k or top-p cut the list; otherwise the candidates stay in id
  // order: sorting a flat distribution over a large vocabulary (151,936 tokens, every one a
  // candidate) took longer than the sampling itself, on the engine loop, once per session.
  if (params_.top_k > 0 || params_.top_p < 1) std::sort(ids.begin(), ids.end(), more_likely);
  std::vector<double> p(ids.size());
  double total = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    p[i] = std::exp((static_cast<double>(logits[ids[i]]) - logits[best]) / t);
    total += p[i];
  }
  if (params_.top_p < 1) {
    double kept = 0;
    size_t keep = 0;
    while (keep < p.size() && kept < params_.top_p * total) kept += p[keep++];
    p.resize(std::max<size_t>(keep, 1));
    total = std::accumulate(p.begin(), p.end(), 0.0);
  }
  // Inverse transform with 53 random bits: reproducible across standard libraries.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    sum += p[i];
    if (u < sum) return ids[i];
  }
  return ids[p.size() - 1];
}

}  // namespace gpeserve::sampler
