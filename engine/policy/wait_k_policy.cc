#include "engine/policy/wait_k_policy.h"

#include <algorithm>
#include <utility>

#include "engine/tokenizer/unicode.h"

namespace gpeserve::policy {

const char* DoneReasonName(DoneReason reason) {
  switch (reason) {
    case DoneReason::kEndOfSequence:
      return "end_of_sequence";
    case DoneReason::kMaxNewTokens:
      return "max_new_tokens";
    case DoneReason::kMaxLag:
      return "max_lag";
    case DoneReason::kNone:
      break;
  }
  return "none";
}

std::optional<Compat> ParseCompat(std::string_view name) {
  if (name == "none") return Compat::kNone;
  if (name == "reference") return Compat::kReference;
  return std::nullopt;
}

const char* CompatName(Compat compat) {
  return compat == Compat::kReference ? "reference" : "none";
}

namespace {

std::string_view Trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t\n\r");
  if (begin == std::string_view::npos) return {};
  const size_t end = s.find_last_not_of(" \t\n\r");
  return s.substr(begin, end - begin + 1);
}

}  // namespace

WaitKPolicy::WaitKPolicy(const PolicyConfig& config, const tokenizer::Tokenizer& tokenizer,
                         std::vector<int32_t> header, std::set<int32_t> eos_ids,
                         std::string end_text)
    : config_(config),
      tokenizer_(tokenizer),
      eos_ids_(std::move(eos_ids)),
      end_text_(std::move(end_text)),
      pending_(std::move(header)) {}

void WaitKPolicy::AddSourceUnit() {
  if (!ended_) ++available_;
}

void WaitKPolicy::EndSource() { ended_ = true; }

WaitKPolicy::Action WaitKPolicy::Next() const {
  Action action;
  if (done()) {
    action.step = Step::kDone;
    return action;
  }
  // Segment read_ is the next to read: 0 the prefix, 1..available_ units, available_+1 end.
  const bool next_available = read_ <= available_ || (ended_ && read_ == available_ + 1);
  const bool all_read = source_complete();
  bool want_read;
  if (read_ == 0) {
    want_read = true;  // the prompt prefix always comes first
  } else if (!started_) {
    want_read = units_read() < config_.wait_k && !all_read;
  } else {
    want_read = !writing_ && !all_read;
  }
  if (want_read) {
    action.step = next_available ? Step::kRead : Step::kWait;
    action.unit = next_available ? read_ : -1;
    return action;
  }
  action.step = Step::kWrite;
  action.feed = pending_;
  action.header = !started_;
  return action;
}

void WaitKPolicy::OnRead() {
  ++read_;
  since_read_ = 0;
  if (started_) writing_ = true;  // after a read, the pending token is fed again
}

bool WaitKPolicy::IsEos(int32_t token) const {
  if (config_.ignore_eos) return false;
  if (eos_ids_.contains(token)) return true;
  if (end_text_.empty()) return false;
  const std::string text =
      tokenizer_.Decode(std::span<const int32_t>(&token, 1), {.skip_special_tokens = false});
  return !Trim(text).empty() && Trim(text) == Trim(end_text_);
}

bool WaitKPolicy::EndsTurn(int32_t token, bool exact) const {
  const std::string_view end = exact ? std::string_view(end_text_) : Trim(end_text_);
  if (end.empty()) return false;
  const std::string text =
      tokenizer_.Decode(std::span<const int32_t>(&token, 1), {.skip_special_tokens = false});
  return text.find(end) != std::string::npos;
}

bool WaitKPolicy::IsTerminatingPunctuation(int32_t token, bool exact) const {
  const std::string text =
      tokenizer_.Decode(std::span<const int32_t>(&token, 1), {.skip_special_tokens = !exact});
  const std::string_view t = exact ? std::string_view(text) : Trim(text);
  return t.size() == 1 && std::string_view(".,:;?!").find(t[0]) != std::string_view::npos;
}

bool WaitKPolicy::StartsNewWord() const {
  // The reference code decodes special tokens too; the method leaves them out.
  const std::string text = tokenizer_.Decode(
      write_tokens_, {.skip_special_tokens = config_.compat != Compat::kReference});
  if (text.empty()) return false;
  const size_t first = tokenizer::Utf8SequenceLength(static_cast<unsigned char>(text[0]));
  return text.find(' ', first) != std::string::npos;
}

int64_t WaitKPolicy::Delay() const {
  // The reference code's read counter starts at k even when the source has fewer units
  // (docs/GPE.md 8, rule 3); otherwise it is the number of units read.
  if (config_.compat == Compat::kReference) return std::max<int64_t>(units_read(), config_.wait_k);
  return units_read();
}

void WaitKPolicy::EndWrite(bool word_complete) {
  if (word_complete) delays_.push_back(Delay());
  write_tokens_.clear();
  // With the whole source read there is nothing to wait for: writing simply goes on.
  writing_ = source_complete();
}

WaitKPolicy::TokenOutcome WaitKPolicy::OnToken(int32_t token) {
  started_ = true;
  writing_ = true;
  ++since_read_;
  return config_.compat == Compat::kReference ? OnTokenReference(token) : OnTokenMethod(token);
}

WaitKPolicy::TokenOutcome WaitKPolicy::OnTokenMethod(int32_t token) {
  TokenOutcome outcome;
  if (IsEos(token)) {
    // The last target word, if unfinished, completes here when the token ends the turn; any
    // other end-of-sequence id records nothing (docs/GPE.md 4, step 3).
    if (!write_tokens_.empty() && EndsTurn(token, /*exact=*/false)) delays_.push_back(Delay());
    write_tokens_.clear();
    pending_.clear();
    done_ = DoneReason::kEndOfSequence;
    return outcome;
  }
  const bool final_phase = source_complete();
  write_tokens_.push_back(token);
  if (StartsNewWord()) {
    outcome.word_complete = true;
    if (!final_phase) {
      // Stop rule a: discard the token; the token before it is fed again after the next read.
      write_tokens_.pop_back();
      outcome.kv_rollback = true;
      pending_ = {pending_.back()};
      EndWrite(/*word_complete=*/true);
      return outcome;
    }
    // Source complete: only record the delay; the token starts the next word.
    delays_.push_back(Delay());
    write_tokens_ = {token};
  }
  output_.push_back(token);
  outcome.emitted = true;
  pending_ = {token};
  if (IsTerminatingPunctuation(token, /*exact=*/false)) {
    outcome.word_complete = true;
    EndWrite(/*word_complete=*/true);  // stop rule b: the punctuation stays pending
  } else if (static_cast<int>(write_tokens_.size()) >= config_.max_write_tokens) {
    EndWrite(/*word_complete=*/false);  // stop rule d
  }
  if (static_cast<int>(output_.size()) >= config_.max_new_tokens) {
    done_ = DoneReason::kMaxNewTokens;
  } else if (final_phase && static_cast<int64_t>(delays_.size()) >
                                units_read() + static_cast<int64_t>(config_.max_lag_words)) {
    done_ = DoneReason::kMaxLag;
  }
  return outcome;
}

// The reference code's write (docs/GPE.md 8): every stop (rules a, b, d, and an end-of-sequence
// token that ends the turn) records a delay and is followed by one read while source remains;
// rule a looks at every token since the last discard and discards only when there are two or
// more; rule d counts tokens since the last read; the 100-word limit is checked at each stop.
WaitKPolicy::TokenOutcome WaitKPolicy::OnTokenReference(int32_t token) {
  TokenOutcome outcome;
  write_tokens_.push_back(token);
  if (IsEos(token)) {
    // It ends the target; it is a stop too (a delay) when it ends the turn, or when rule a or
    // the cap would stop here anyway.
    if (EndsTurn(token, /*exact=*/true) || StartsNewWord() ||
        since_read_ >= config_.max_write_tokens) {
      delays_.push_back(Delay());
    }
    pending_.clear();
    done_ = DoneReason::kEndOfSequence;
    return outcome;
  }
  const bool new_word = StartsNewWord();
  const bool discard = new_word && write_tokens_.size() >= 2;
  const bool stop = new_word || IsTerminatingPunctuation(token, /*exact=*/true) ||
                    since_read_ >= config_.max_write_tokens;
  if (!discard) {
    output_.push_back(token);
    outcome.emitted = true;
    pending_ = {token};
  }
  if (stop) {
    outcome.word_complete = true;
    delays_.push_back(Delay());
    writing_ = source_complete();
    if (discard) {
      write_tokens_.clear();
      outcome.kv_rollback = true;
      pending_ = {pending_.back()};
    }
    // The limit compares with the units read once this stop's read is done.
    const int64_t read_after = source_complete() ? Delay() : units_read() + 1;
    if (static_cast<int64_t>(delays_.size()) - read_after > config_.max_lag_words) {
      done_ = DoneReason::kMaxLag;
      if (discard) {  // the reference code returns the token it would have discarded
        output_.push_back(token);
        outcome.emitted = true;
        outcome.kv_rollback = false;
      }
    }
  }
  if (!done() && static_cast<int>(output_.size()) >= config_.max_new_tokens) {
    done_ = DoneReason::kMaxNewTokens;
  }
  return outcome;
}

}  // namespace gpeserve::policy
