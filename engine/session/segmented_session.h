// What the engine drives for one client session: a sentence session (one StreamSession, the
// first wave's behaviour) or a long-form one (issue 20; docs/GPE.md section 9), whose unbounded
// source word stream is cut into segments (policy::Segmenter: sentence marks, the client's
// boundaries, max_segment_words) that each run as a one-sentence StreamSession: its words, then
// the profile's end once the segment is cut; the target is the header, the translation and the
// end-of-sequence. Then the session moves on to the next segment without closing.
//
// Segments run one after another. A segment's StreamSession is created with its first word (so
// its per-segment limits apply as the words arrive, even while an earlier segment still runs);
// only the running one (the front) holds KV blocks. A segment is finished when its target is
// done and its source was cut: if the model ended the target first, the segment's later words
// are counted as never read (SegmentRecord::units_unread), not lost silently.
//
// Memory: a finished segment's blocks are released; the session keeps one reference to the
// full blocks of the shared prompt prefix as the prefix cache holds them (so every segment
// shares them instead of recomputing them), and nothing else. With context_segments = 0 each
// segment computes exactly what a separate session with its words would, and the KV a session
// holds is bounded by the prompt plus one segment, whatever the stream's length; with c > 0
// each segment reads the last c segments' words and outputs again after the prompt
// (ContextTokens, recomputed at their new positions): the prompt plus c + 1 segments.
//
// Stamps: the caller passes an opaque time (e.g. microseconds of a steady clock) with each
// word, boundary and end; LastDelayStamp gives back the stamp of the source unit whose read
// completed the last target word, for computation-aware delays. Plain C++: no libtorch, no
// clock.
//
// Thread-safety: not thread-safe; one instance per session, used by one thread at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/block_allocator.h"
#include "engine/policy/segmenter.h"
#include "engine/session/stream_session.h"

namespace gpeserve::session {

struct LongFormOptions {
  bool enabled = false;
  policy::SegmenterConfig segmenter;
  // Earlier source/target pairs each segment reads as context after the prompt prefix
  // (ContextTokens), recomputed at their new positions; 0: each segment alone. At most 8.
  // The context takes at most half of what the limits (max_source_tokens, the model's
  // positions) leave after the prompt: pairs beyond it are dropped, oldest first.
  int64_t context_segments = 0;
};

// An earlier segment as context: its words and its output tokens.
struct ContextPair {
  std::vector<std::string> words;
  std::vector<int32_t> output;
};

// The tokens a segment reads after the prompt prefix for `pairs` (oldest first), as a chat
// transcript goes on: per pair, its words (each tokenized as StreamSession does: after the
// first, a leading space when the profile says add_space), the profile's end, its header
// (assistant), the output, the end, and the user turn's start (profile.user).
absl::StatusOr<std::vector<int32_t>> ContextTokens(const tokenizer::Tokenizer& tokenizer,
                                                   const policy::Profile& profile,
                                                   std::span<const ContextPair> pairs);

// A finished segment of a long-form session.
struct SegmentRecord {
  int64_t index = 0;  // from 0
  policy::CutReason cut = policy::CutReason::kEndOfSource;
  int64_t first_word = 0;  // the stream's index of its first word (from 0)
  int64_t words = 0;
  std::vector<int32_t> output;
  std::string text;             // StreamSession::FinalText
  std::vector<int64_t> delays;  // StreamSession::FinalDelays: source units within the segment
  int64_t source_units = 0;     // its words (or tokens) + 1 for the end segment
  int64_t units_unread = 0;     // of those, never read: the target ended first
  policy::DoneReason reason = policy::DoneReason::kNone;
  SessionCounters counters;
};

class SegmentedSession {
 public:
  // Errors: those of StreamSession::Create; for long-form, the segmenter's (bad marks or
  // max_segment_words), the batch paradigm (it has no stream to cut), context_segments > 0.
  static absl::StatusOr<std::unique_ptr<SegmentedSession>> Create(
      std::shared_ptr<const tokenizer::Tokenizer> tokenizer, std::span<const int64_t> eos_ids,
      const SessionOptions& options, const LongFormOptions& long_form = {});

  bool long_form() const { return long_form_.enabled; }

  // ---- Source (from the client) ----
  // More source words, each stamped `stamp`. Errors: after EndSource; an empty word; a segment
  // (or the sentence) over the per-segment limits (StreamSession's). On error the words before
  // the bad one were taken.
  absl::Status AddWords(std::span<const std::string> words, int64_t stamp);
  // The client's segment boundary after the words so far (long-form only; nothing when a
  // sentence mark cut there already). InvalidArgument when no word arrived since the last
  // boundary, or for a sentence session.
  absl::Status Boundary(int64_t stamp);
  // The source is complete (cuts the open segment). Idempotent.
  void EndSource(int64_t stamp);

  // ---- Work: as StreamSession's, for the running segment ----
  using State = StreamSession::State;
  // kDone: a sentence session's target is done; a long-form session's source ended and every
  // segment finished. A long-form segment whose target is done before its source was cut waits.
  State state() const;
  StreamSession::PieceNeeds NextPieceNeeds(int block_size) const;
  absl::StatusOr<Work> Prepare(int64_t max_tokens, kv::BlockAllocator& allocator);
  StepResult Complete(std::optional<int32_t> token, kv::BlockAllocator& allocator);
  bool MayCompleteBeforeRun() const;
  void Preempt(kv::BlockAllocator& allocator);
  void Release(kv::BlockAllocator& allocator);
  // Distinct blocks referenced (the running segment's and the kept prompt prefix).
  int64_t blocks_held() const;
  // Long-form: retires the running segment once it is finished (its blocks freed, the prompt
  // prefix kept) and returns it; the next segment becomes the running one. Call before
  // scheduling each step. A sentence session returns nothing.
  std::vector<SegmentRecord> Advance(kv::BlockAllocator& allocator);

  // ---- The running segment ----
  // Its index (0 for a sentence session).
  int64_t segment() const { return segments_.empty() ? next_index_ : segments_.front().index; }
  // The stamp of the source unit whose read completed the last target word of the running
  // segment (the end segment: the stamp of its cut); nullopt before the first word.
  std::optional<int64_t> LastDelayStamp() const;
  // Source units read in the running segment.
  int64_t units_read() const;
  // Delays recorded in the running segment so far (a word completed by the end of its target
  // records one without StepResult::word_complete).
  int64_t delays_recorded() const;

  // ---- Results of a sentence session (a long-form one: empty; see SegmentRecord) ----
  const std::vector<int32_t>& output() const;
  std::string FinalText() const;
  std::vector<int64_t> FinalDelays() const;
  policy::DoneReason done_reason() const;

  // ---- Totals over the stream ----
  int64_t source_units() const;       // received: words (or tokens) + end segments
  int64_t source_units_read() const;  // of them, read
  int64_t segments_finished() const { return finished_; }
  SessionCounters counters() const;  // summed over segments; kv_blocks_high_water the max

 private:
  struct Segment {
    int64_t index = 0;
    int64_t first_word = 0;
    int64_t words = 0;
    std::optional<policy::CutReason> cut;
    std::unique_ptr<StreamSession> session;
    std::vector<int64_t> stamps;          // per source unit, the end segment's once cut
    bool released = false;                // its target is done and its blocks were freed
    std::vector<std::string> words_text;  // with context_segments > 0: its words
  };

  SegmentedSession() = default;
  // The segment taking words: the last one unless it was cut (then a new one).
  absl::StatusOr<Segment*> OpenSegment();
  void Cut(Segment& segment, policy::CutReason reason, int64_t stamp);
  // Stamps for the units `segment`'s session gained since `before`.
  void Stamp(Segment& segment, int64_t before, int64_t stamp);
  void ReleasePins(kv::BlockAllocator& allocator);
  // The running segment reads the last context_segments finished ones (as many as fit).
  void SetFrontContext();
  void NoteHighWater();

  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::vector<int64_t> eos_ids_;
  SessionOptions options_;
  LongFormOptions long_form_;
  std::optional<policy::Segmenter> segmenter_;
  std::deque<Segment> segments_;  // unfinished, in order; the front runs
  int64_t next_index_ = 0;        // index the next new segment gets
  int64_t words_ = 0;             // words received
  bool ended_ = false;
  std::vector<int32_t> pins_;  // the prompt prefix's full blocks this session keeps
  int64_t finished_ = 0;       // segments retired
  SessionCounters finished_counters_;
  int64_t finished_units_ = 0;
  int64_t finished_read_ = 0;
  int64_t high_water_ = 0;
  std::deque<ContextPair> context_;  // the last context_segments finished segments
};

}  // namespace gpeserve::session
