#include "engine/policy/wait_k_policy.h"

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
  return action;
}

void WaitKPolicy::OnRead() {
  ++read_;
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

bool WaitKPolicy::IsTerminatingPunctuation(int32_t token) const {
  const std::string text =
      tokenizer_.Decode(std::span<const int32_t>(&token, 1), {.skip_special_tokens = true});
  const std::string_view t = Trim(text);
  return t.size() == 1 && std::string_view(".,:;?!").find(t[0]) != std::string_view::npos;
}

bool WaitKPolicy::StartsNewWord() const {
  const std::string text = tokenizer_.Decode(write_tokens_, {.skip_special_tokens = true});
  if (text.empty()) return false;
  const size_t first = tokenizer::Utf8SequenceLength(static_cast<unsigned char>(text[0]));
  return text.find(' ', first) != std::string::npos;
}

void WaitKPolicy::EndWrite(bool word_complete) {
  if (word_complete) delays_.push_back(units_read());
  write_tokens_.clear();
  // With the whole source read there is nothing to wait for: writing simply goes on.
  writing_ = source_complete();
}

WaitKPolicy::TokenOutcome WaitKPolicy::OnToken(int32_t token) {
  TokenOutcome outcome;
  started_ = true;
  writing_ = true;
  if (IsEos(token)) {
    // The last target word, if unfinished, completes here.
    if (!write_tokens_.empty()) delays_.push_back(units_read());
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
    delays_.push_back(units_read());
    write_tokens_ = {token};
  }
  output_.push_back(token);
  outcome.emitted = true;
  pending_ = {token};
  if (IsTerminatingPunctuation(token)) {
    outcome.word_complete = true;
    EndWrite(/*word_complete=*/true);  // stop rule b: the punctuation stays pending
  } else if (static_cast<int>(write_tokens_.size()) >= config_.max_write_tokens) {
    EndWrite(/*word_complete=*/false);  // stop rule d
  }
  if (static_cast<int>(output_.size()) >= config_.max_new_tokens) {
    done_ = DoneReason::kMaxNewTokens;
  } else if (final_phase &&
             static_cast<int64_t>(delays_.size()) > available_ + config_.max_lag_words) {
    done_ = DoneReason::kMaxLag;
  }
  return outcome;
}

}  // namespace gpeserve::policy
