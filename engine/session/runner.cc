#include "engine/session/runner.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/model/paged_attention.h"

namespace gpeserve::session {

absl::StatusOr<torch::Tensor> RunWorks(const model::Model& model, kv::KvPool& pool,
                                       std::span<const Work> works) {
  // A libtorch failure anywhere in the step (building the inputs, attention over the pool, the
  // forward) ends the step's sessions, not the process.
  try {
    // Works of one adapter run as consecutive tokens (base first), so that each adapter's
    // update runs once over its rows; the logits go back in the works' order.
    std::vector<size_t> order(works.size());
    for (size_t i = 0; i < works.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&works](size_t a, size_t b) {
      return std::less<const model::Adapter*>()(works[a].adapter, works[b].adapter);
    });
    std::vector<int64_t> tokens, positions, rows, sample_index;
    std::vector<model::AttentionSegment> segments;
    std::vector<model::AdapterSpan> adapters;
    std::vector<int64_t> sample_of_work(works.size(), -1);
    int64_t samples = 0;
    for (size_t i = 0; i < works.size(); ++i) {
      if (works[i].sample && !works[i].tokens.empty()) sample_of_work[i] = samples++;
    }
    for (size_t i : order) {
      const Work& work = works[i];
      if (work.tokens.empty()) continue;
      const auto begin = static_cast<int64_t>(tokens.size());
      const auto length = static_cast<int64_t>(work.tokens.size());
      tokens.insert(tokens.end(), work.tokens.begin(), work.tokens.end());
      positions.insert(positions.end(), work.positions.begin(), work.positions.end());
      segments.push_back({begin, length, work.context, work.slots, work.noncausal});
      if (work.sample) {
        rows.push_back(begin + length - 1);
        sample_index.push_back(sample_of_work[i]);
      }
      if (work.adapter != nullptr) {
        if (!adapters.empty() && adapters.back().adapter == work.adapter) {
          adapters.back().count += length;
        } else {
          adapters.push_back({work.adapter, begin, length});
        }
      }
    }
    if (tokens.empty()) return torch::empty({0, model.config().vocab_size}, torch::kFloat32);
    model::PagedAttention attention(pool, segments);
    auto logits =
        model.Forward(torch::tensor(tokens, torch::kInt64), torch::tensor(positions, torch::kInt64),
                      torch::tensor(rows, torch::kInt64), attention, adapters);
    if (!logits.ok() || adapters.empty()) return logits;
    // Row r of the step's logits is sample sample_index[r]: put each back in its place.
    std::vector<int64_t> inverse(sample_index.size());
    for (size_t r = 0; r < sample_index.size(); ++r) {
      inverse[sample_index[r]] = static_cast<int64_t>(r);
    }
    return logits->index_select(0, torch::tensor(inverse, torch::kInt64));
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
