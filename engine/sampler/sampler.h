// Choosing the next token from a row of logits: greedy, or sampling with temperature, top-k and
// top-p (nucleus), from a generator private to the session, so that with a seed the output is
// the same whatever else runs in the batch.
//
// Thread-safety: a Sampler is one session's; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>

#include "absl/status/status.h"

namespace gpeserve::sampler {

struct SamplingParams {
  double temperature = 0;        // 0: greedy (the first largest logit)
  int top_k = 0;                 // keep the k most likely tokens; 0: all
  double top_p = 1;              // keep the most likely tokens whose probabilities sum to top_p
  std::optional<uint64_t> seed;  // unset: a seed the engine picks
};

// InvalidArgument naming the field when a value is out of range (temperature < 0 or not
// finite, top_k < 0, top_p not in (0, 1]).
absl::Status Validate(const SamplingParams& params);

class Sampler {
 public:
  // `default_seed` is used when params.seed is unset.
  Sampler(const SamplingParams& params, uint64_t default_seed);

  bool greedy() const { return params_.temperature == 0; }
  // REQUIRES: logits non-empty.
  int32_t Sample(std::span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace gpeserve::sampler
