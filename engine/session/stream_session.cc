#include "engine/session/stream_session.h"

#include "absl/strings/str_cat.h"
#include "engine/model/paged_attention.h"

namespace gpeserve::session {
namespace {

absl::StatusOr<std::vector<int32_t>> Tokenize(const tokenizer::Tokenizer& tok,
                                              const std::string& text) {
  return tok.Encode(text, {.add_special_tokens = false});
}

}  // namespace

absl::StatusOr<std::unique_ptr<StreamSession>> StreamSession::Create(
    std::shared_ptr<const model::Model> model, const SessionOptions& options,
    const std::vector<std::string>& words) {
  if (model->tokenizer() == nullptr) {
    return absl::FailedPreconditionError("the model folder has no tokenizer.json");
  }
  const tokenizer::Tokenizer& tok = *model->tokenizer();
  std::unique_ptr<StreamSession> s(new StreamSession());
  s->model_ = std::move(model);
  s->options_ = options;
  const policy::Profile& profile = options.profile;

  auto prefix = Tokenize(tok, profile.Prefix());
  if (!prefix.ok()) return prefix.status();
  s->segments_.push_back(*std::move(prefix));
  for (size_t i = 0; i < words.size(); ++i) {
    auto ids = Tokenize(tok, (i > 0 && profile.add_space ? " " : "") + words[i]);
    if (!ids.ok()) return ids.status();
    if (options.policy.split == policy::SplitMode::kToken) {
      for (int32_t id : *ids) s->segments_.push_back({id});
    } else if (!ids->empty()) {
      s->segments_.push_back(*std::move(ids));
    }
  }
  auto end = Tokenize(tok, profile.end);
  if (!end.ok()) return end.status();
  s->segments_.push_back(*std::move(end));
  auto header = Tokenize(tok, profile.assistant);
  if (!header.ok()) return header.status();
  if (header->empty()) return absl::InvalidArgumentError("the profile's assistant header is empty");

  std::set<int32_t> eos;
  for (int64_t id : s->model_->config().eos_token_ids) eos.insert(static_cast<int32_t>(id));
  if (auto id = tok.eos_id()) eos.insert(*id);
  policy::PolicyConfig config = options.policy;
  if (options.paradigm == Paradigm::kBatch) config.wait_k = 1 << 30;  // the whole source first
  s->policy_ = std::make_unique<policy::WaitKPolicy>(config, tok, *std::move(header),
                                                     std::move(eos), profile.end);
  for (size_t unit = 1; unit + 1 < s->segments_.size(); ++unit) s->policy_->AddSourceUnit();
  s->policy_->EndSource();
  return s;
}

absl::StatusOr<torch::Tensor> StreamSession::Run(const std::vector<int32_t>& tokens,
                                                 const std::vector<int64_t>& positions,
                                                 std::vector<int64_t> context,
                                                 kv::BlockTable& table, bool want_logits,
                                                 kv::KvPool& pool, kv::BlockAllocator& allocator) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t before = table.num_tokens();
  if (absl::Status s = table.Append(n, allocator); !s.ok()) return s;
  model::AttentionSegment segment{0, n, std::move(context),
                                  table.Slots(before, before + n, allocator.block_size())};
  model::PagedAttention attention(pool, {segment});
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  forward_tokens_ += n;
  return model_->Forward(torch::tensor(ids, torch::kInt64), torch::tensor(positions),
                         want_logits ? torch::tensor({n - 1}) : torch::empty({0}, torch::kInt64),
                         attention);
}

absl::StatusOr<SessionResult> StreamSession::RunToCompletion(kv::KvPool& pool,
                                                             kv::BlockAllocator& allocator) {
  const int bs = allocator.block_size();
  absl::Status status;
  for (int step = 0; status.ok(); ++step) {
    const policy::WaitKPolicy::Action action = policy_->Next();
    if (action.step == policy::WaitKPolicy::Step::kDone) break;
    if (action.step == policy::WaitKPolicy::Step::kWait) {
      status = absl::InternalError("offline session waiting for source it already has");
      break;
    }
    if (action.step == policy::WaitKPolicy::Step::kRead) {
      const std::vector<int32_t>& tokens = segments_[action.unit];
      std::vector<int64_t> positions;
      for (size_t i = 0; i < tokens.size(); ++i) positions.push_back(source_.num_tokens() + i);
      if (!tokens.empty()) {
        auto run = Run(tokens, positions, source_.Slots(0, source_.num_tokens(), bs), source_,
                       false, pool, allocator);
        if (!run.ok()) status = run.status();
      }
      policy_->OnRead();
      continue;
    }
    // A write: the target group sees the source read so far and the target so far.
    const int64_t first =
        options_.paradigm == Paradigm::kGpe ? options_.profile.phi : source_.num_tokens();
    std::vector<int64_t> positions;
    for (size_t i = 0; i < action.feed.size(); ++i) {
      positions.push_back(first + target_.num_tokens() + i);
    }
    std::vector<int64_t> context = source_.Slots(0, source_.num_tokens(), bs);
    const auto target_slots = target_.Slots(0, target_.num_tokens(), bs);
    context.insert(context.end(), target_slots.begin(), target_slots.end());
    auto logits = Run(action.feed, positions, std::move(context), target_, true, pool, allocator);
    if (!logits.ok()) {
      status = logits.status();
      break;
    }
    const auto token = static_cast<int32_t>(logits->argmax(-1).item<int64_t>());
    const auto outcome = policy_->OnToken(token);
    if (outcome.kv_rollback) target_.Truncate(1, allocator);
  }
  source_.Release(allocator);
  target_.Release(allocator);
  if (!status.ok()) return status;
  SessionResult result;
  result.output = policy_->output();
  result.text = model_->tokenizer()->Decode(result.output, {.skip_special_tokens = true});
  result.delays = policy_->delays();
  result.source_units = static_cast<int64_t>(segments_.size()) - 1;
  for (const auto& segment : segments_) result.source_tokens += segment.size();
  result.forward_tokens = forward_tokens_;
  result.reason = policy_->done_reason();
  return result;
}

}  // namespace gpeserve::session
