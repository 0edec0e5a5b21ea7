#include "engine/session/runner.h"

#include <exception>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/model/paged_attention.h"

namespace gpeserve::session {

absl::StatusOr<torch::Tensor> RunWorks(const model::Model& model, kv::KvPool& pool,
                                       std::span<const Work> works) {
  // A libtorch failure anywhere in the step (building the inputs, attention over the pool, the
  // forward) ends the step's sessions, not the process.
  try {
    std::vector<int64_t> tokens, positions, rows;
    std::vector<model::AttentionSegment> segments;
    for (const Work& work : works) {
      if (work.tokens.empty()) continue;
      const auto begin = static_cast<int64_t>(tokens.size());
      const auto length = static_cast<int64_t>(work.tokens.size());
      tokens.insert(tokens.end(), work.tokens.begin(), work.tokens.end());
      positions.insert(positions.end(), work.positions.begin(), work.positions.end());
      segments.push_back({begin, length, work.context, work.slots, work.noncausal});
      if (work.sample) rows.push_back(begin + length - 1);
    }
    if (tokens.empty()) return torch::empty({0, model.config().vocab_size}, torch::kFloat32);
    model::PagedAttention attention(pool, segments);
    return model.Forward(torch::tensor(tokens, torch::kInt64),
                         torch::tensor(positions, torch::kInt64),
                         torch::tensor(rows, torch::kInt64), attention);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("libtorch error in a forward step: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("error in a forward step: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<StreamSession>> CreateOfflineSession(
    const model::Model& model, const SessionOptions& options,
    const std::vector<std::string>& words) {
  auto session = StreamSession::Create(model.tokenizer(), model.config().eos_token_ids, options);
  if (!session.ok()) return session.status();
  if (absl::Status s = (*session)->AddWords(words); !s.ok()) return s;
  (*session)->EndSource();
  return session;
}

SessionResult ResultOf(const StreamSession& session) {
  SessionResult result;
  result.output = session.output();
  result.text = session.FinalText();
  result.delays = session.FinalDelays();
  result.source_units = session.source_units();
  result.counters = session.counters();
  result.reason = session.done_reason();
  return result;
}

absl::StatusOr<SessionResult> RunToCompletion(const model::Model& model, StreamSession& session,
                                              kv::KvPool& pool, kv::BlockAllocator& allocator,
                                              int64_t max_step_tokens) {
  if (max_step_tokens <= 0) max_step_tokens = std::numeric_limits<int64_t>::max();
  absl::Status status;
  while (status.ok()) {
    const StreamSession::State state = session.state();
    if (state == StreamSession::State::kDone) break;
    if (state == StreamSession::State::kWaiting) {
      status = absl::FailedPreconditionError("the session waits for source it was never given");
      break;
    }
    auto work = session.Prepare(max_step_tokens, allocator);
    if (!work.ok()) {
      status = work.status();
      break;
    }
    auto logits = RunWorks(model, pool, {&*work, 1});
    if (!logits.ok()) {
      status = logits.status();
      break;
    }
    std::optional<int32_t> token;
    if (work->sample) token = static_cast<int32_t>(logits->argmax(-1).item<int64_t>());
    session.Complete(token, allocator);
  }
  session.Release(allocator);
  if (!status.ok()) return status;
  return ResultOf(session);
}

}  // namespace gpeserve::session
