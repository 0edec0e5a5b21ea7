// The wait-k read/write policy of group-streaming (docs/GPE.md section 4) for one session, as a
// state machine the scheduler drives: Next() says what the session needs (read a source unit,
// write with these pending tokens, wait for input, or nothing more), and OnRead() / OnToken()
// consume the results. It never blocks, owns no model and no cache: a roll-back is returned
// to the caller, who truncates the target group's KV.
//
// Source units are opaque here: segment 0 (the prompt prefix), then the words (or tokens, in
// split mode "token") as the client sends them, then the end segment. The caller tokenizes
// them and tells the policy when each becomes available.
//
// Thread-safety: not thread-safe; one instance per session, used by the engine thread.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace gpeserve::policy {

enum class SplitMode { kWord, kToken };

// Which stop and delay rules a session follows: the method as docs/GPE.md sections 3-4 state it,
// or the reference evaluation code's own behaviour, exactly (docs/GPE.md section 8), for users
// who compare served outputs, AL and LAAL with the numbers that code printed.
enum class Compat { kNone, kReference };
// "none" or "reference".
std::optional<Compat> ParseCompat(std::string_view name);
const char* CompatName(Compat compat);

struct PolicyConfig {
  int wait_k = 3;                      // source units read before the first write
  SplitMode split = SplitMode::kWord;  // what a source unit is (the caller splits accordingly)
  int max_write_tokens = 50;           // stop rule d: tokens generated in one write (compat
                                       // reference: since the last read)
  int max_new_tokens = 1024;           // target tokens in all
  int max_lag_words = 100;             // completed target words allowed beyond the source
                                       // units read (the end segment counted)
  bool ignore_eos = false;             // never stop at end-of-sequence (benchmarks)
  Compat compat = Compat::kNone;       // the reference code's rules (docs/GPE.md 8)
};

// Why a session ended.
enum class DoneReason { kNone, kEndOfSequence, kMaxNewTokens, kMaxLag };
// "end_of_sequence", "max_new_tokens", "max_lag" or "none" (the names events and files use).
const char* DoneReasonName(DoneReason reason);

class WaitKPolicy {
 public:
  // `header`: the target's segment 0 (the assistant header tokens), fed by the first write.
  // `eos_ids`: the model's end-of-sequence ids; `end_text`: the profile's end string (a token
  // that decodes to it also ends the target). The tokenizer must outlive the policy.
  WaitKPolicy(const PolicyConfig& config, const tokenizer::Tokenizer& tokenizer,
              std::vector<int32_t> header, std::set<int32_t> eos_ids, std::string end_text);

  // ---- Source availability (from the client) ----
  // One more source unit (word or token) has arrived.
  void AddSourceUnit();
  // The client ended the source: the end segment is available after the units so far.
  void EndSource();

  // ---- What to do next ----
  enum class Step {
    kRead,   // run the source unit `unit` (0 = prompt prefix, 1..n = units, n+1 = end)
    kWrite,  // feed `feed` (target tokens), then call OnToken with the next token
    kWait,   // nothing to do until more source arrives
    kDone,   // the session is over (done_reason())
  };
  struct Action {
    Step step = Step::kWait;
    int64_t unit = -1;          // kRead
    std::vector<int32_t> feed;  // kWrite
    bool header = false;        // kWrite: `feed` is the target's header (the first write)
  };
  Action Next() const;

  // The unit of the last kRead action has been read (its KV is cached).
  void OnRead();

  // What the caller must do after OnToken.
  struct TokenOutcome {
    bool kv_rollback = false;    // drop the last target KV entry (it is fed again later)
    bool word_complete = false;  // a target word ended (a delay was recorded)
    bool emitted = false;        // `token` joined the output
  };
  // The token chosen from the logits of the last fed token of a kWrite action.
  TokenOutcome OnToken(int32_t token);

  // ---- Results ----
  const std::vector<int32_t>& output() const { return output_; }  // generated tokens kept
  // Per target word (compat reference: per stop of a write, as that code records them).
  const std::vector<int64_t>& delays() const { return delays_; }
  DoneReason done_reason() const { return done_; }
  bool done() const { return done_ != DoneReason::kNone; }
  // Source units read (words or tokens, plus 1 once the end segment is read; the prompt prefix
  // does not count).
  int64_t units_read() const { return read_ > 0 ? read_ - 1 : 0; }
  bool source_complete() const { return ended_ && read_ == available_ + 2; }
  const PolicyConfig& config() const { return config_; }

 private:
  // OnToken under the method's rules (docs/GPE.md 4) and under the reference code's (8).
  TokenOutcome OnTokenMethod(int32_t token);
  TokenOutcome OnTokenReference(int32_t token);
  bool IsEos(int32_t token) const;
  // The token's text contains the profile's end string: an end-of-sequence token that records
  // a delay. `exact` (the reference code's `end in token_text`): the end string as the profile
  // gives it, so ChatML's "<|im_end|>\n" is in no single token's text; else without its leading
  // and trailing whitespace.
  bool EndsTurn(int32_t token, bool exact) const;
  // Stop rule b. `exact`: the token's text is the mark itself (the reference code), else the
  // mark with whitespace around it.
  bool IsTerminatingPunctuation(int32_t token, bool exact) const;
  // Stop rule a: the text of write_tokens_ has a space after its first character.
  bool StartsNewWord() const;
  void EndWrite(bool word_complete);
  // The delay a word completed now records: units read (compat reference: at least wait_k).
  int64_t Delay() const;

  // ---- Constant after construction ----
  PolicyConfig config_;
  const tokenizer::Tokenizer& tokenizer_;
  std::set<int32_t> eos_ids_;
  std::string end_text_;

  // ---- State ----
  int64_t available_ = 0;              // source units (words or tokens) that have arrived
  bool ended_ = false;                 // the end segment has arrived
  int64_t read_ = 0;                   // segments read: prompt prefix, units, end
  bool writing_ = false;               // a write is in progress (else the next step is a read)
  bool started_ = false;               // the first write has begun
  std::vector<int32_t> pending_;       // tokens the next write feeds
  std::vector<int32_t> write_tokens_;  // tokens generated in the current write (compat
                                       // reference: since the last discard by rule a)
  int64_t since_read_ = 0;             // tokens generated since the last read
  std::vector<int32_t> output_;
  std::vector<int64_t> delays_;
  DoneReason done_ = DoneReason::kNone;
};

}  // namespace gpeserve::policy
