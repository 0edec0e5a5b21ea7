#include "engine/session/segmented_session.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpeserve::session {

absl::StatusOr<std::unique_ptr<SegmentedSession>> SegmentedSession::Create(
    std::shared_ptr<const tokenizer::Tokenizer> tokenizer, std::span<const int64_t> eos_ids,
    const SessionOptions& options, const LongFormOptions& long_form) {
  std::unique_ptr<SegmentedSession> s(new SegmentedSession());
  s->tokenizer_ = tokenizer;
  s->eos_ids_.assign(eos_ids.begin(), eos_ids.end());
  s->options_ = options;
  s->long_form_ = long_form;
  // The first segment's session checks the options (wait_k, profile strings, positions), for
  // a long-form session too, before any word arrives.
  auto first = StreamSession::Create(std::move(tokenizer), eos_ids, options);
  if (!first.ok()) return first.status();
  if (!long_form.enabled) {
    Segment segment;
    segment.session = *std::move(first);
    s->segments_.push_back(std::move(segment));
    s->next_index_ = 1;
    return s;
  }
  if (options.paradigm == Paradigm::kBatch) {
    return absl::InvalidArgumentError(
        "a long-form session streams: the batch paradigm waits for the whole source, which a "
        "long-form stream never has; use gpe (or reencode, interleaved) for long-form");
  }
  if (long_form.context_segments < 0 || long_form.context_segments > 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "context_segments is ", long_form.context_segments, "; it must be between 0 and 8"));
  }
  auto segmenter = policy::Segmenter::Create(long_form.segmenter);
  if (!segmenter.ok()) return segmenter.status();
  s->segmenter_ = *std::move(segmenter);
  return s;
}

absl::StatusOr<std::vector<int32_t>> ContextTokens(const tokenizer::Tokenizer& tokenizer,
                                                   const policy::Profile& profile,
                                                   std::span<const ContextPair> pairs) {
  std::vector<int32_t> tokens;
  auto append = [&](const std::string& text) -> absl::Status {
    auto ids = tokenizer.Encode(text, {.add_special_tokens = false});
    if (!ids.ok()) return ids.status();
    tokens.insert(tokens.end(), ids->begin(), ids->end());
    return absl::OkStatus();
  };
  for (const ContextPair& pair : pairs) {
    for (size_t i = 0; i < pair.words.size(); ++i) {
      const std::string& w = pair.words[i];
      if (absl::Status s = append(i > 0 && profile.add_space ? " " + w : w); !s.ok()) return s;
    }
    if (absl::Status s = append(profile.end); !s.ok()) return s;
    if (absl::Status s = append(profile.assistant); !s.ok()) return s;
    tokens.insert(tokens.end(), pair.output.begin(), pair.output.end());
    if (absl::Status s = append(profile.end); !s.ok()) return s;
    if (absl::Status s = append(profile.user); !s.ok()) return s;
  }
  return tokens;
}

void SegmentedSession::SetFrontContext() {
  if (context_.empty() || segments_.empty()) return;
  StreamSession& front = *segments_.front().session;
  // The context takes at most half of what the limits leave after the prompt, so that the
  // segment's own words keep the other half.
  int64_t budget = -1;
  for (int64_t limit : {options_.max_source_tokens, options_.max_positions}) {
    if (limit <= 0) continue;
    const int64_t prompt = static_cast<int64_t>(front.segments()[0].size());
    const int64_t half = std::max<int64_t>(0, (limit - prompt) / 2);
    budget = budget < 0 ? half : std::min(budget, half);
  }
  // The most recent pairs that fit.
  for (size_t skip = 0; skip < context_.size(); ++skip) {
    const std::vector<ContextPair> pairs(context_.begin() + skip, context_.end());
    auto tokens = ContextTokens(*tokenizer_, options_.profile, pairs);
    if (!tokens.ok() || (budget >= 0 && static_cast<int64_t>(tokens->size()) > budget)) continue;
    if (front.SetContext(*tokens).ok()) return;
  }
}

absl::StatusOr<SegmentedSession::Segment*> SegmentedSession::OpenSegment() {
  if (!segments_.empty() && !segments_.back().cut) return &segments_.back();
  auto session = StreamSession::Create(tokenizer_, eos_ids_, options_);
  if (!session.ok()) return session.status();
  Segment segment;
  segment.index = next_index_++;
  segment.first_word = words_;
  segment.session = *std::move(session);
  segments_.push_back(std::move(segment));
  if (segments_.size() == 1) SetFrontContext();  // it runs next: its context is known
  return &segments_.back();
}

void SegmentedSession::Stamp(Segment& segment, int64_t before, int64_t stamp) {
  const int64_t after = segment.session->source_units();
  for (int64_t u = before; u < after; ++u) segment.stamps.push_back(stamp);
}

void SegmentedSession::Cut(Segment& segment, policy::CutReason reason, int64_t stamp) {
  segment.cut = reason;
  const int64_t before = segment.session->source_units();
  segment.session->EndSource();
  Stamp(segment, before, stamp);
}

absl::Status SegmentedSession::AddWords(std::span<const std::string> words, int64_t stamp) {
  if (ended_) return absl::FailedPreconditionError("source words after the end of the source");
  for (const std::string& word : words) {
    auto open = OpenSegment();
    if (!open.ok()) return open.status();
    Segment& segment = **open;
    const int64_t before = segment.session->source_units();
    if (absl::Status s = segment.session->AddWords(std::span<const std::string>(&word, 1));
        !s.ok()) {
      if (!long_form() || s.code() != absl::StatusCode::kInvalidArgument || word.empty()) return s;
      return absl::InvalidArgumentError(absl::StrCat(
          "segment ", segment.index, " (from word ", segment.first_word, ", ", segment.words,
          " words so far): ", s.message(),
          "; in a long-form session the limit applies per segment: cut the stream sooner "
          "(sentence marks, boundaries, or a smaller max_segment_words)"));
    }
    Stamp(segment, before, stamp);
    ++segment.words;
    ++words_;
    if (long_form_.context_segments > 0) segment.words_text.push_back(word);
    if (segmenter_) {
      if (const std::optional<policy::CutReason> cut = segmenter_->AddWord(word)) {
        Cut(segment, *cut, stamp);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status SegmentedSession::Boundary(int64_t stamp) {
  if (!long_form()) {
    return absl::InvalidArgumentError(
        "a segment boundary in a sentence session: boundaries are for long-form sessions "
        "(SessionConfig.long_form)");
  }
  if (ended_)
    return absl::FailedPreconditionError("a segment boundary after the end of the source");
  const absl::StatusOr<std::optional<policy::CutReason>> cut = segmenter_->Boundary();
  if (!cut.ok()) return cut.status();
  if (*cut) Cut(segments_.back(), **cut, stamp);  // the segmenter saw words since the last cut
  return absl::OkStatus();
}

void SegmentedSession::EndSource(int64_t stamp) {
  if (ended_) return;
  ended_ = true;
  if (!long_form()) {
    Cut(segments_.front(), policy::CutReason::kEndOfSource, stamp);
    return;
  }
  if (!segments_.empty() && !segments_.back().cut) {
    Cut(segments_.back(), policy::CutReason::kEndOfSource, stamp);
  }
}

SegmentedSession::State SegmentedSession::state() const {
  if (segments_.empty()) return ended_ ? State::kDone : State::kWaiting;
  const Segment& front = segments_.front();
  const State s = front.session->state();
  if (!long_form() || s != State::kDone) return s;
  // A finished target whose segment is not cut yet waits for the cut (Advance retires it).
  return front.cut ? State::kRunnable : State::kWaiting;
}

StreamSession::PieceNeeds SegmentedSession::NextPieceNeeds(int block_size) const {
  return segments_.front().session->NextPieceNeeds(block_size);
}

absl::StatusOr<Work> SegmentedSession::Prepare(int64_t max_tokens, kv::BlockAllocator& allocator) {
  if (segments_.empty()) return absl::FailedPreconditionError("the session has no work now");
  auto work = segments_.front().session->Prepare(max_tokens, allocator);
  if (work.ok()) NoteHighWater();
  return work;
}

StepResult SegmentedSession::Complete(std::optional<int32_t> token, kv::BlockAllocator& allocator) {
  StepResult result = segments_.front().session->Complete(token, allocator);
  // A long-form session is done only when the stream is (Advance decides).
  if (long_form()) result.done = false;
  return result;
}

bool SegmentedSession::MayCompleteBeforeRun() const {
  return !segments_.empty() && segments_.front().session->MayCompleteBeforeRun();
}

void SegmentedSession::NoteHighWater() { high_water_ = std::max(high_water_, blocks_held()); }

int64_t SegmentedSession::blocks_held() const {
  int64_t held = 0;
  std::vector<int32_t> front_prefix;
  if (!segments_.empty()) {
    held = segments_.front().session->blocks_held();
    front_prefix = segments_.front().session->PrefixBlocks();
  }
  for (int32_t pin : pins_) {
    if (std::find(front_prefix.begin(), front_prefix.end(), pin) == front_prefix.end()) ++held;
  }
  return held;
}

void SegmentedSession::ReleasePins(kv::BlockAllocator& allocator) {
  for (int32_t block : pins_) allocator.Release(block);
  pins_.clear();
}

void SegmentedSession::Preempt(kv::BlockAllocator& allocator) {
  ReleasePins(allocator);
  if (segments_.empty()) return;
  Segment& front = segments_.front();
  if (!front.released) front.session->Preempt(allocator);
}

void SegmentedSession::Release(kv::BlockAllocator& allocator) {
  ReleasePins(allocator);
  for (Segment& segment : segments_) segment.session->Release(allocator);
}

std::vector<SegmentRecord> SegmentedSession::Advance(kv::BlockAllocator& allocator) {
  std::vector<SegmentRecord> records;
  if (!long_form()) return records;
  while (!segments_.empty() && segments_.front().session->state() == State::kDone) {
    Segment& front = segments_.front();
    if (!front.released) {
      // The target is done: nothing more runs on this segment's blocks. Keep the prompt
      // prefix for the next segment (the cache's copy, which the next segment will share,
      // not necessarily the one this segment computed), free the rest now (it may wait for
      // its cut a long time).
      if (pins_.empty() && options_.share_prefix) {
        pins_ = front.session->RetainPrefixBlocks(allocator);
      }
      front.session->Release(allocator);
      front.released = true;
    }
    if (!front.cut) break;
    const StreamSession& s = *front.session;
    SegmentRecord record;
    record.index = front.index;
    record.cut = *front.cut;
    record.first_word = front.first_word;
    record.words = front.words;
    record.output = s.output();
    record.text = s.FinalText();
    record.delays = s.FinalDelays();
    record.source_units = s.source_units();
    record.units_unread = s.source_units() - s.units_read();
    record.reason = s.done_reason();
    record.counters = s.counters();
    const SessionCounters& c = s.counters();
    finished_counters_.source_tokens += c.source_tokens;
    finished_counters_.forward_tokens += c.forward_tokens;
    finished_counters_.shared_tokens += c.shared_tokens;
    finished_counters_.preemptions += c.preemptions;
    finished_units_ += s.source_units();
    finished_read_ += s.units_read();
    ++finished_;
    if (long_form_.context_segments > 0) {
      context_.push_back({.words = std::move(front.words_text), .output = record.output});
      while (static_cast<int64_t>(context_.size()) > long_form_.context_segments) {
        context_.pop_front();
      }
    }
    records.push_back(std::move(record));
    segments_.pop_front();
    SetFrontContext();
  }
  return records;
}

std::optional<int64_t> SegmentedSession::LastDelayStamp() const {
  if (segments_.empty()) return std::nullopt;
  const Segment& front = segments_.front();
  const std::vector<int64_t>& delays = front.session->delays();
  if (delays.empty() || front.stamps.empty()) return std::nullopt;
  const int64_t unit = std::clamp<int64_t>(delays.back(), 1, front.stamps.size());
  return front.stamps[unit - 1];
}

int64_t SegmentedSession::delays_recorded() const {
  return segments_.empty() ? 0 : static_cast<int64_t>(segments_.front().session->delays().size());
}

int64_t SegmentedSession::units_read() const {
  return segments_.empty() ? 0 : segments_.front().session->units_read();
}

const std::vector<int32_t>& SegmentedSession::output() const {
  static const std::vector<int32_t> kNone;
  return long_form() || segments_.empty() ? kNone : segments_.front().session->output();
}

std::string SegmentedSession::FinalText() const {
  return long_form() || segments_.empty() ? std::string() : segments_.front().session->FinalText();
}

std::vector<int64_t> SegmentedSession::FinalDelays() const {
  return long_form() || segments_.empty() ? std::vector<int64_t>()
                                          : segments_.front().session->FinalDelays();
}

policy::DoneReason SegmentedSession::done_reason() const {
  if (long_form()) return policy::DoneReason::kNone;
  return segments_.front().session->done_reason();
}

int64_t SegmentedSession::source_units() const {
  int64_t units = finished_units_;
  for (const Segment& segment : segments_) units += segment.session->source_units();
  return units;
}

int64_t SegmentedSession::source_units_read() const {
  int64_t read = finished_read_;
  for (const Segment& segment : segments_) read += segment.session->units_read();
  return read;
}

SessionCounters SegmentedSession::counters() const {
  SessionCounters total = finished_counters_;
  for (const Segment& segment : segments_) {
    const SessionCounters& c = segment.session->counters();
    total.source_tokens += c.source_tokens;
    total.forward_tokens += c.forward_tokens;
    total.shared_tokens += c.shared_tokens;
    total.preemptions += c.preemptions;
  }
  total.kv_blocks_high_water = high_water_;
  return total;
}

}  // namespace gpeserve::session
