#include "engine/policy/segmenter.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace gpeserve::policy {
namespace {

// Closing quotes and brackets that may follow a sentence mark: ASCII, and the UTF-8 of ’ ” » ）.
constexpr std::array<std::string_view, 9> kClosers = {
    "\"", "'", ")", "]", "}", "\xE2\x80\x99", "\xE2\x80\x9D", "\xC2\xBB", "\xEF\xBC\x89"};

}  // namespace

const char* CutReasonName(CutReason reason) {
  switch (reason) {
    case CutReason::kSentenceMark:
      return "sentence_mark";
    case CutReason::kBoundary:
      return "boundary";
    case CutReason::kMaxWords:
      return "max_words";
    case CutReason::kEndOfSource:
      return "end_of_source";
  }
  return "unknown";
}

absl::StatusOr<Segmenter> Segmenter::Create(SegmenterConfig config) {
  if (config.max_segment_words < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_segment_words is ",
                                                   config.max_segment_words,
                                                   "; a segment needs room for at least 1 word"));
  }
  for (const std::string& mark : config.sentence_marks) {
    if (mark.empty() || mark.find_first_of(" \t\r\n") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("sentence mark '", mark, "': marks are non-empty and without whitespace"));
    }
  }
  return Segmenter(std::move(config));
}

bool Segmenter::EndsSentence(std::string_view word) const {
  bool stripped = true;
  while (stripped && !word.empty()) {
    stripped = false;
    for (std::string_view closer : kClosers) {
      if (word.size() > closer.size() && word.ends_with(closer)) {
        word.remove_suffix(closer.size());
        stripped = true;
        break;
      }
    }
  }
  for (const std::string& mark : config_.sentence_marks) {
    if (word.ends_with(mark)) return true;
  }
  return false;
}

CutReason Segmenter::Cut(CutReason reason) {
  open_words_ = 0;
  ++segments_;
  return reason;
}

std::optional<CutReason> Segmenter::AddWord(std::string_view word) {
  ++open_words_;
  ++since_boundary_;
  if (EndsSentence(word)) return Cut(CutReason::kSentenceMark);
  if (open_words_ >= config_.max_segment_words) return Cut(CutReason::kMaxWords);
  return std::nullopt;
}

absl::StatusOr<std::optional<CutReason>> Segmenter::Boundary() {
  if (since_boundary_ == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a segment boundary with no words since the ",
                     boundaries_ == 0 ? "start of the source" : "last boundary",
                     " (an empty segment: send the boundary with the words it ends)"));
  }
  since_boundary_ = 0;
  ++boundaries_;
  if (open_words_ == 0) return std::nullopt;  // a sentence mark (or max words) cut there already
  return Cut(CutReason::kBoundary);
}

}  // namespace gpeserve::policy
