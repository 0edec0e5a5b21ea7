// Runs StreamSession work on a model: RunWorks executes the pieces of work of any number of
// sessions as one forward pass over the paged KV cache (what the engine loop does each
// step); RunToCompletion drives one session alone with greedy decoding (offline tools and
// tests).
//
// Thread-safety: functions of their arguments; the pool and allocator must not be used by
// another thread meanwhile.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/kv_pool.h"
#include "engine/model/model.h"
#include "engine/session/stream_session.h"

namespace gpeserve::session {

// One forward pass over every token of `works` (pieces with no tokens are skipped). Returns
// float32 logits [number of works with `sample` set, vocab] on the CPU, in order. INTERNAL when
// libtorch fails (a bad slot, out of memory): the caller ends the works' sessions.
absl::StatusOr<torch::Tensor> RunWorks(const model::Model& model, kv::KvPool& pool,
                                       std::span<const Work> works);

// A session for a source known in full: Create, then all the words, then EndSource.
absl::StatusOr<std::unique_ptr<StreamSession>> CreateOfflineSession(
    const model::Model& model, const SessionOptions& options,
    const std::vector<std::string>& words);

struct SessionResult {
  std::vector<int32_t> output;  // generated target tokens
  std::string text;             // their text (special tokens skipped)
  std::vector<int64_t> delays;  // source units read when each target word was complete
  int64_t source_units = 0;     // |X|: words (or tokens) + 1 for the end segment
  SessionCounters counters;
  policy::DoneReason reason = policy::DoneReason::kNone;
};

// Runs `session` alone, greedy, in pieces of at most `max_step_tokens` tokens (0: no limit),
// until it is done; frees its blocks. Error if it waits for source (it must have ended).
absl::StatusOr<SessionResult> RunToCompletion(const model::Model& model, StreamSession& session,
                                              kv::KvPool& pool, kv::BlockAllocator& allocator,
                                              int64_t max_step_tokens = 0);

// The result of a finished session.
SessionResult ResultOf(const StreamSession& session);

}  // namespace gpeserve::session
