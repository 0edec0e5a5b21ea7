#include "engine/session/stream_session.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/eval/words.h"

namespace gpeserve::session {

absl::StatusOr<Paradigm> ParseParadigm(std::string_view name) {
  if (name == "gpe") return Paradigm::kGpe;
  if (name == "reencode") return Paradigm::kReencode;
  if (name == "interleaved") return Paradigm::kInterleaved;
  if (name == "batch") return Paradigm::kBatch;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown paradigm '", std::string(name), "' (available: gpe, reencode, interleaved, batch)"));
}

std::string_view ParadigmName(Paradigm paradigm) {
  switch (paradigm) {
    case Paradigm::kGpe:
      return "gpe";
    case Paradigm::kReencode:
      return "reencode";
    case Paradigm::kInterleaved:
      return "interleaved";
    case Paradigm::kBatch:
      return "batch";
  }
  return "gpe";
}

absl::StatusOr<std::unique_ptr<StreamSession>> StreamSession::Create(
    std::shared_ptr<const tokenizer::Tokenizer> tokenizer, std::span<const int64_t> eos_ids,
    const SessionOptions& options) {
  if (tokenizer == nullptr) return absl::FailedPreconditionError("the model has no tokenizer");
  if (options.policy.wait_k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("wait_k must be at least 1, got ", options.policy.wait_k));
  }
  std::unique_ptr<StreamSession> s(new StreamSession());
  s->tokenizer_ = std::move(tokenizer);
  s->options_ = options;
  const tokenizer::Tokenizer& tok = *s->tokenizer_;
  const policy::Profile& profile = options.profile;
  auto prefix = tok.Encode(profile.Prefix(), {.add_special_tokens = false});
  if (!prefix.ok()) return prefix.status();
  s->prefix_size_ = prefix->size();
  s->segments_.push_back(*std::move(prefix));
  auto header = tok.Encode(profile.assistant, {.add_special_tokens = false});
  if (!header.ok()) return header.status();
  if (header->empty()) return absl::InvalidArgumentError("the profile's assistant header is empty");
  if (options.policy.compat == policy::Compat::kReference && options.paradigm != Paradigm::kGpe) {
    return absl::InvalidArgumentError(
        absl::StrCat("compat 'reference' reproduces the reference code's group-streaming "
                     "(gpe) sessions; it does not apply to the ",
                     std::string(ParadigmName(options.paradigm)), " paradigm"));
  }
  s->header_ = *header;
  auto end = tok.Encode(profile.end, {.add_special_tokens = false});
  if (!end.ok()) return end.status();
  s->end_tokens_ = *std::move(end);
  s->source_length_ = static_cast<int64_t>(s->segments_[0].size() + s->end_tokens_.size());
  if (absl::Status limit = s->CheckSourceLength(); !limit.ok()) return limit;
  const int64_t target_tokens =
      static_cast<int64_t>(header->size()) + options.policy.max_new_tokens;
  if (options.max_positions > 0 && options.paradigm == Paradigm::kGpe &&
      profile.phi + target_tokens > options.max_positions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "phi is ", profile.phi, ": the target's positions from phi to phi + ", header->size(),
        " (header) + ", options.policy.max_new_tokens, " (max_new_tokens) exceed the model's ",
        options.max_positions, " positions (max_position_embeddings); phi may be at most ",
        std::max<int64_t>(0, options.max_positions - target_tokens),
        options.max_positions < target_tokens ? ", and max_new_tokens must be smaller" : ""));
  }

  std::set<int32_t> eos;
  for (int64_t id : eos_ids) eos.insert(static_cast<int32_t>(id));
  if (auto id = tok.eos_id()) eos.insert(*id);
  policy::PolicyConfig config = options.policy;
  if (options.paradigm == Paradigm::kBatch) config.wait_k = 1 << 30;  // the whole source first
  s->policy_ = std::make_unique<policy::WaitKPolicy>(config, tok, *std::move(header),
                                                     std::move(eos), profile.end);
  return s;
}

absl::Status StreamSession::AddWords(std::span<const std::string> words) {
  if (ended_) return absl::FailedPreconditionError("source words after the end of the source");
  for (const std::string& word : words) {
    if (word.empty()) return absl::InvalidArgumentError("empty source word");
  }
  for (const std::string& word : words) {
    auto ids = tokenizer_->Encode(words_ > 0 && options_.profile.add_space ? " " + word : word,
                                  {.add_special_tokens = false});
    if (!ids.ok()) return ids.status();
    source_length_ += static_cast<int64_t>(ids->size());
    if (absl::Status limit = CheckSourceLength(); !limit.ok()) return limit;
    ++words_;
    if (options_.policy.split == policy::SplitMode::kToken) {
      for (int32_t id : *ids) AddUnit({id});
    } else {
      AddUnit(*std::move(ids));
    }
  }
  return absl::OkStatus();
}

absl::Status StreamSession::CheckSourceLength() const {
  if (options_.max_source_tokens > 0 && source_length_ > options_.max_source_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt and source are longer than ", options_.max_source_tokens,
                     " tokens, the server's limit (max_source_tokens; the prompt alone has ",
                     segments_[0].size() + end_tokens_.size(), "); start a new session"));
  }
  if (options_.max_positions > 0 && source_length_ > options_.max_positions) {
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt and source are longer than the model's ", options_.max_positions,
                     " positions (max_position_embeddings); start a new session"));
  }
  return absl::OkStatus();
}

void StreamSession::AddUnit(std::vector<int32_t> tokens) {
  segments_.push_back(std::move(tokens));
  policy_->AddSourceUnit();
}

absl::Status StreamSession::SetContext(std::span<const int32_t> tokens) {
  const int64_t before = source_length_;
  const int64_t old_context = static_cast<int64_t>(segments_[0].size() - prefix_size_);
  source_length_ += static_cast<int64_t>(tokens.size()) - old_context;
  if (absl::Status limit = CheckSourceLength(); !limit.ok()) {
    source_length_ = before;
    return limit;
  }
  segments_[0].resize(prefix_size_);
  segments_[0].insert(segments_[0].end(), tokens.begin(), tokens.end());
  return absl::OkStatus();
}

void StreamSession::EndSource() {
  if (ended_) return;
  ended_ = true;
  segments_.push_back(end_tokens_);
  policy_->EndSource();
}

StreamSession::Feed StreamSession::NextFeed() const {
  Feed feed;
  const policy::WaitKPolicy::Action action = policy_->Next();
  if (action.step == policy::WaitKPolicy::Step::kRead) {
    feed.active = true;
    feed.unit = action.unit;
    feed.tokens = segments_[action.unit];
  } else if (action.step == policy::WaitKPolicy::Step::kWrite) {
    feed.active = true;
    feed.write = true;
    feed.to_target = !interleaved();
    const bool stale = options_.paradigm == Paradigm::kReencode && !target_tokens_.empty() &&
                       encoded_with_source_ != source_.num_tokens();
    if (stale) {
      feed.reencode = true;
      feed.tokens = target_tokens_;  // header and target so far, at the new positions
    }
    feed.tokens.insert(feed.tokens.end(), action.feed.begin(), action.feed.end());
    if (action.header && options_.policy.compat == policy::Compat::kReference) {
      feed.block = feed.tokens.size();  // the reference code feeds its header without a mask
    }
  }
  return feed;
}

StreamSession::State StreamSession::state() const {
  if (!replay_.empty() || feed_.active) return State::kRunnable;
  if (NextFeed().active) return State::kRunnable;
  return policy_->done() ? State::kDone : State::kWaiting;
}

const StreamSession::Feed* StreamSession::CurrentFeed() const {
  if (!replay_.empty()) return &replay_.front();
  return feed_.active ? &feed_ : nullptr;
}

StreamSession::PieceNeeds StreamSession::NextPieceNeeds(int block_size) const {
  const Feed* current = CurrentFeed();
  const Feed next = current == nullptr ? NextFeed() : Feed{};
  const Feed& feed = current != nullptr ? *current : next;
  PieceNeeds needs;
  needs.remaining = static_cast<int64_t>(feed.tokens.size() - feed.offset);
  needs.samples = feed.write;
  needs.min_tokens = feed.offset < feed.block ? static_cast<int64_t>(feed.block - feed.offset)
                                              : std::min<int64_t>(1, needs.remaining);
  const kv::BlockTable& table = feed.to_target ? target_ : source_;
  needs.free_slots = table.FreeSlots(block_size);
  return needs;
}

int64_t StreamSession::blocks_held() const {
  return static_cast<int64_t>(source_.blocks().size() + target_.blocks().size());
}

std::vector<int32_t> StreamSession::PrefixBlocks() const {
  std::vector<int32_t> blocks;
  if (!options_.share_prefix || prefix_block_size_ == 0) return blocks;
  for (size_t b = 0; b < prefix_hashes_.size(); ++b) {
    if (static_cast<int64_t>((b + 1) * prefix_block_size_) > source_.num_tokens()) break;
    blocks.push_back(source_.blocks()[b]);
  }
  return blocks;
}

std::vector<int32_t> StreamSession::RetainPrefixBlocks(kv::BlockAllocator& allocator) const {
  std::vector<int32_t> blocks;
  if (!options_.share_prefix) return blocks;
  for (size_t b = 0; b < prefix_hashes_.size(); ++b) {
    const std::optional<int32_t> block =
        allocator.RetainPrefix(prefix_hashes_[b], prefix_block_tokens_[b]);
    if (!block) break;
    blocks.push_back(*block);
  }
  return blocks;
}

void StreamSession::SharePrefix(Feed& feed, kv::BlockAllocator& allocator) {
  const int bs = allocator.block_size();
  const std::span<const int32_t> prefix(segments_[0].data(), prefix_size_);
  if (!options_.share_prefix || source_.num_tokens() != 0 || feed.offset != 0 ||
      feed.tokens.size() < prefix.size() ||
      !std::equal(prefix.begin(), prefix.end(), feed.tokens.begin())) {
    return;
  }
  if (prefix_hashes_.empty()) {
    prefix_block_size_ = bs;
    // The adapter changes every cached key and value: it is part of each block's identity (its
    // address seeds the hash chain and ends each block's tokens, so that even a collision of
    // hashes cannot share blocks across adapters).
    const auto adapter = static_cast<int64_t>(reinterpret_cast<uintptr_t>(options_.adapter));
    uint64_t hash = static_cast<uint64_t>(adapter);
    for (size_t b = 0; (b + 1) * bs <= prefix.size(); ++b) {
      std::vector<int64_t> tokens(prefix.begin() + b * bs, prefix.begin() + (b + 1) * bs);
      if (adapter != 0) tokens.push_back(-1 - adapter);
      hash = kv::BlockAllocator::PrefixHash(hash, tokens);
      prefix_hashes_.push_back(hash);
      prefix_block_tokens_.push_back(std::move(tokens));
    }
  }
  for (size_t b = 0; b < prefix_hashes_.size(); ++b) {
    const std::optional<int32_t> block =
        allocator.LookupPrefix(prefix_hashes_[b], prefix_block_tokens_[b]);
    if (!block) break;
    source_.AppendSharedBlock(*block, bs);
    source_tokens_.insert(source_tokens_.end(), feed.tokens.begin() + feed.offset,
                          feed.tokens.begin() + feed.offset + bs);
    feed.offset += bs;
    counters_.shared_tokens += bs;
  }
}

void StreamSession::RegisterPrefix(kv::BlockAllocator& allocator) {
  if (!options_.share_prefix) return;
  const int bs = allocator.block_size();
  for (size_t b = 0; b < prefix_hashes_.size(); ++b) {
    if (static_cast<int64_t>((b + 1) * bs) > source_.num_tokens()) break;
    allocator.RegisterPrefix(prefix_hashes_[b], prefix_block_tokens_[b], source_.blocks()[b]);
  }
}

absl::StatusOr<Work> StreamSession::Prepare(int64_t max_tokens, kv::BlockAllocator& allocator) {
  if (max_tokens < 1) return absl::InvalidArgumentError("a piece of work needs a token budget");
  Feed* feed = replay_.empty() ? &feed_ : &replay_.front();
  if (!feed->active) {
    *feed = NextFeed();
    if (!feed->active) return absl::FailedPreconditionError("the session has no work now");
  }
  const int bs = allocator.block_size();
  if (!feed->to_target) SharePrefix(*feed, allocator);
  kv::BlockTable& table = feed->to_target ? target_ : source_;
  const size_t n = std::min<size_t>(max_tokens, feed->tokens.size() - feed->offset);
  // A re-encode starts from an empty target group; its blocks come back first.
  const bool restart = feed->reencode && feed->offset == 0;
  size_t take = n;
  // A replay of the target runs in groups that saw the same source.
  if (!feed->seen.empty()) {
    while (take > 1 && feed->seen[feed->offset + take - 1] != feed->seen[feed->offset]) --take;
  }
  // A non-causal block goes in one piece, whatever the budget.
  if (feed->offset < feed->block) take = std::max(take, feed->block - feed->offset);
  const int64_t needed = (restart ? kv::BlockTable() : table).BlocksNeeded(take, bs);
  if (needed >
      allocator.free_blocks() + (restart ? static_cast<int64_t>(target_.blocks().size()) : 0)) {
    return absl::ResourceExhaustedError("not enough free KV blocks");
  }
  if (restart) {
    target_.Release(allocator);
    target_tokens_.clear();
    target_seen_.clear();
  }
  if (feed->write && feed->offset == 0 && options_.paradigm != Paradigm::kGpe) {
    encoded_with_source_ = source_.num_tokens();
  }

  Work work;
  const int64_t before = table.num_tokens();
  work.tokens.assign(feed->tokens.begin() + feed->offset,
                     feed->tokens.begin() + feed->offset + take);
  int64_t base = before;  // reads and the interleaved sequence: position = index
  if (feed->to_target) {
    base += options_.paradigm == Paradigm::kGpe ? options_.profile.phi : encoded_with_source_;
  }
  for (size_t i = 0; i < take; ++i) work.positions.push_back(base + static_cast<int64_t>(i));
  const int64_t seen = feed->seen.empty() ? source_.num_tokens() : feed->seen[feed->offset];
  work.context = source_.Slots(0, feed->to_target ? seen : source_.num_tokens(), bs);
  if (feed->to_target) {
    const auto target_slots = target_.Slots(0, target_.num_tokens(), bs);
    work.context.insert(work.context.end(), target_slots.begin(), target_slots.end());
  }
  if (absl::Status s = table.Append(static_cast<int64_t>(take), allocator); !s.ok()) return s;
  work.slots = table.Slots(before, before + static_cast<int64_t>(take), bs);
  counters_.kv_blocks_high_water = std::max(counters_.kv_blocks_high_water, blocks_held());
  work.noncausal =
      feed->offset < feed->block ? static_cast<int64_t>(feed->block - feed->offset) : 0;
  work.sample = feed->write && feed->offset + take == feed->tokens.size();
  work.adapter = options_.adapter;
  feed->chunk = take;
  feed->chunk_seen = seen;
  return work;
}

StepResult StreamSession::Complete(std::optional<int32_t> token, kv::BlockAllocator& allocator) {
  StepResult result;
  Feed* feed = replay_.empty() ? &feed_ : &replay_.front();
  const auto begin = feed->tokens.begin() + feed->offset;
  const auto end = begin + feed->chunk;
  if (feed->to_target) {
    target_tokens_.insert(target_tokens_.end(), begin, end);
    target_seen_.insert(target_seen_.end(), feed->chunk, feed->chunk_seen);
  } else {
    source_tokens_.insert(source_tokens_.end(), begin, end);
  }
  counters_.forward_tokens += static_cast<int64_t>(feed->chunk);
  feed->offset += feed->chunk;
  feed->chunk = 0;
  if (!feed->to_target) RegisterPrefix(allocator);
  if (feed->offset < feed->tokens.size()) return result;  // more pieces to come

  if (feed->replay) {
    replay_.pop_front();
    return result;
  }
  const bool write = feed->write;
  const int64_t unit = feed->unit;
  feed_ = Feed{};
  if (!write) {
    counters_.source_tokens += static_cast<int64_t>(segments_[unit].size());
    policy_->OnRead();
    result.unit_read = true;
  } else {
    const policy::WaitKPolicy::TokenOutcome outcome = policy_->OnToken(token.value_or(-1));
    if (outcome.kv_rollback) {
      write_table().Truncate(1, allocator);
      if (interleaved()) {
        source_tokens_.pop_back();
      } else {
        target_tokens_.pop_back();
        target_seen_.pop_back();
      }
    }
    if (outcome.emitted) result.emitted = token;
    result.word_complete = outcome.word_complete;
  }
  result.done = policy_->done();
  return result;
}

bool StreamSession::MayCompleteBeforeRun() const {
  const Feed* feed = CurrentFeed();
  if (feed == nullptr || feed->chunk == 0) return false;  // nothing prepared
  if (feed->write && feed->offset + feed->chunk == feed->tokens.size()) return false;  // samples
  if (feed->to_target || !options_.share_prefix || prefix_block_size_ == 0) return true;
  // Prompt-prefix blocks full before and after the piece (RegisterPrefix's rule).
  const auto full = [this](int64_t tokens) {
    return std::min<int64_t>(static_cast<int64_t>(prefix_hashes_.size()),
                             tokens / prefix_block_size_);
  };
  const int64_t after = source_.num_tokens();
  return full(after) == full(after - static_cast<int64_t>(feed->chunk));
}

void StreamSession::Preempt(kv::BlockAllocator& allocator) {
  source_.Release(allocator);
  target_.Release(allocator);
  // A replay cut short: what it had not restored yet is still to be restored.
  for (Feed& feed : replay_) {
    const auto rest = feed.tokens.begin() + static_cast<std::ptrdiff_t>(feed.offset);
    if (feed.to_target) {
      target_tokens_.insert(target_tokens_.end(), rest, feed.tokens.end());
      target_seen_.insert(target_seen_.end(), feed.seen.begin() + feed.offset, feed.seen.end());
    } else {
      source_tokens_.insert(source_tokens_.end(), rest, feed.tokens.end());
    }
  }
  replay_.clear();
  feed_.chunk = 0;
  ++counters_.preemptions;
  if (!source_tokens_.empty()) {
    Feed source;
    source.active = source.replay = true;
    source.tokens = std::move(source_tokens_);
    replay_.push_back(std::move(source));
  }
  if (!target_tokens_.empty()) {
    Feed target;
    target.active = target.replay = target.to_target = true;
    target.tokens = std::move(target_tokens_);
    target.seen = std::move(target_seen_);
    // The target group starts with the header; the reference code's is one non-causal block.
    if (options_.policy.compat == policy::Compat::kReference) target.block = header_.size();
    replay_.push_back(std::move(target));
  }
  source_tokens_.clear();
  target_tokens_.clear();
  target_seen_.clear();
}

std::string StreamSession::FinalText() const {
  if (options_.policy.compat != policy::Compat::kReference) {
    return tokenizer_->Decode(output(), {.skip_special_tokens = true});
  }
  std::vector<int32_t> tokens = header_;
  tokens.insert(tokens.end(), output().begin(), output().end());
  return tokenizer_->Decode(tokens, {.skip_special_tokens = true});
}

std::vector<int64_t> StreamSession::FinalDelays() const {
  std::vector<int64_t> delays = policy_->delays();
  if (options_.policy.compat == policy::Compat::kReference) {
    const size_t words = eval::SplitWords(FinalText()).size();
    if (delays.size() > words) delays.resize(words);
  }
  return delays;
}

void StreamSession::Release(kv::BlockAllocator& allocator) {
  source_.Release(allocator);
  target_.Release(allocator);
  replay_.clear();
  feed_ = Feed{};
  source_tokens_.clear();
  target_tokens_.clear();
  target_seen_.clear();
}

}  // namespace gpeserve::session
