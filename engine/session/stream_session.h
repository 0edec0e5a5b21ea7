// One streaming session over the paged KV cache: the source and target token groups of
// docs/GPE.md section 2, the wait-k policy, and the positions and attention context of each
// read and write. The engine (and `gpe eval`) asks it for the next piece of work, runs the
// model, and hands back the result. RunToCompletion drives a session alone with greedy
// decoding, for offline evaluation.
//
// Paradigms implemented: `gpe` (group positions: target j at phi + j, source never sees the
// target) and `batch` (read the whole source, then generate with plain causal positions
// S + j). Re-encode and interleaved streaming follow.
//
// Thread-safety: not thread-safe; one instance per session, on the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/block_allocator.h"
#include "engine/kv/block_table.h"
#include "engine/kv/kv_pool.h"
#include "engine/model/model.h"
#include "engine/policy/profile.h"
#include "engine/policy/wait_k_policy.h"

namespace gpeserve::session {

enum class Paradigm { kGpe, kBatch };

struct SessionOptions {
  policy::Profile profile;
  policy::PolicyConfig policy;
  Paradigm paradigm = Paradigm::kGpe;
};

struct SessionResult {
  std::vector<int32_t> output;  // generated target tokens
  std::string text;             // their text (special tokens skipped)
  std::vector<int64_t> delays;  // source units read when each target word was complete
  int64_t source_units = 0;     // |X|: words (or tokens) + 1 for the end segment
  int64_t source_tokens = 0;    // tokens of all source segments, prompt prefix included
  int64_t forward_tokens = 0;   // tokens the model computed (re-fed tokens count again)
  policy::DoneReason reason = policy::DoneReason::kNone;
};

class StreamSession {
 public:
  // `words`: the whole source, split into words (it is cut into tokens in token split mode).
  static absl::StatusOr<std::unique_ptr<StreamSession>> Create(
      std::shared_ptr<const model::Model> model, const SessionOptions& options,
      const std::vector<std::string>& words);

  // Runs the session to its end alone, greedy, on `pool`/`allocator`; frees its blocks.
  absl::StatusOr<SessionResult> RunToCompletion(kv::KvPool& pool, kv::BlockAllocator& allocator);

  // Source segments as tokens: prompt prefix, units, end segment.
  const std::vector<std::vector<int32_t>>& segments() const { return segments_; }

 private:
  StreamSession() = default;
  // One forward pass for `tokens` at `positions`, new K/V into `table`, attending to
  // `context` slots; returns the last row's logits when `want_logits`.
  absl::StatusOr<torch::Tensor> Run(const std::vector<int32_t>& tokens,
                                    const std::vector<int64_t>& positions,
                                    std::vector<int64_t> context, kv::BlockTable& table,
                                    bool want_logits, kv::KvPool& pool,
                                    kv::BlockAllocator& allocator);

  std::shared_ptr<const model::Model> model_;
  SessionOptions options_;
  std::vector<std::vector<int32_t>> segments_;  // source: prefix, units..., end
  std::unique_ptr<policy::WaitKPolicy> policy_;
  kv::BlockTable source_, target_;
  int64_t forward_tokens_ = 0;
};

}  // namespace gpeserve::session
