#include "engine/tokenizer/incremental_detokenizer.h"

#include "engine/tokenizer/unicode.h"

namespace gpeserve::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               const DecodeOptions& options)
    : tokenizer_(tokenizer),
      skip_special_(options.skip_special_tokens),
      clean_up_(options.clean_up_spaces.value_or(tokenizer.clean_up_spaces())) {}

std::string IncrementalDetokenizer::PushRaw(int32_t id) {
  window_.push_back(id);
  // The text of a run of byte-fallback tokens is final only once the run has ended; a skipped
  // special token adds no text and does not end a run (it never reaches the decoder).
  if (tokenizer_.IsByteFallbackToken(id) || (skip_special_ && tokenizer_.IsSpecial(id))) {
    return std::string();
  }
  std::string text = tokenizer_.DecodeRaw(window_, skip_special_);
  // Hold back while the text does not extend what was emitted, or ends in U+FFFD (a character
  // whose remaining bytes are in tokens still to come).
  if (text.size() <= emitted_text_.size() || text.ends_with(kReplacementUtf8) ||
      !text.starts_with(emitted_text_)) {
    return std::string();
  }
  std::string piece = text.substr(emitted_text_.size());
  window_.erase(window_.begin(), window_.begin() + emitted_in_window_);
  emitted_in_window_ = window_.size();
  emitted_text_ = tokenizer_.DecodeRaw(window_, skip_special_);
  return piece;
}

std::string IncrementalDetokenizer::CleanUp(const std::string& raw, bool final) {
  if (!clean_up_) return raw;
  pending_clean_.append(raw);
  if (final) {
    std::string out = Tokenizer::CleanUpSpaces(pending_clean_);
    pending_clean_.clear();
    return out;
  }
  // Every clean-up rule starts with a space and is at most 4 bytes long, and only removes
  // spaces. So clean-up of a text cut at `cut` equals clean-up of its two parts when none of
  // the 3 bytes before `cut` is a space: no rule can span the cut, before or after the
  // removals on its left.
  const std::string& p = pending_clean_;
  size_t cut = p.size();
  auto spaced = [&](size_t c) {
    for (size_t i = c >= 3 ? c - 3 : 0; i < c; ++i) {
      if (p[i] == ' ') return true;
    }
    return false;
  };
  while (cut > 0 && (spaced(cut) || (static_cast<unsigned char>(p[cut]) & 0xC0) == 0x80)) --cut;
  if (cut == 0) return std::string();
  std::string out = Tokenizer::CleanUpSpaces(std::string_view(p).substr(0, cut));
  pending_clean_.erase(0, cut);
  return out;
}

std::string IncrementalDetokenizer::Push(int32_t id) { return CleanUp(PushRaw(id), false); }

std::string IncrementalDetokenizer::Flush() {
  std::string rest;
  const std::string text = tokenizer_.DecodeRaw(window_, skip_special_);
  if (text.size() > emitted_text_.size() && text.starts_with(emitted_text_)) {
    rest = text.substr(emitted_text_.size());
  }
  window_.clear();
  emitted_in_window_ = 0;
  emitted_text_.clear();
  return CleanUp(rest, true);
}

}  // namespace gpeserve::tokenizer
