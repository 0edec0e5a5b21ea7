// One streaming session over the paged KV cache: the source and target token groups of
// docs/GPE.md section 2, the wait-k policy, and the positions and attention context of each
// read and write under the session's paradigm. The session computes nothing itself: the
// caller (the engine loop, or RunToCompletion for one session alone) asks it for the next
// piece of work with Prepare(), runs the model on the pieces of many sessions at once, and
// hands each session back its sampled token with Complete(). Plain C++: no libtorch here.
//
// Paradigms (docs/GPE.md sections 3 and 5):
//   gpe          source token i at position i, target token j at phi + j; source never sees
//                the target; nothing is ever recomputed (except the roll-back of GPE.md 4).
//   reencode     target token j at S + j (S = source tokens read); after each read the target
//                group is dropped and re-encoded with the new positions.
//   interleaved  one sequence in arrival order, positions 0, 1, 2, ...; plain causal attention,
//                so a source token sees the target written before it.
//   batch        the whole source first, then generation at S + j (offline).
//
// Pieces of work may be cut to a token budget (chunked prefill): a read or a multi-token feed
// runs over several steps and only its last piece samples a token.
//
// Prompt-prefix sharing: the full blocks of source segment 0 (identical for every session of a
// profile and instruction) are looked up by content hash and shared, ref-counted, instead of
// being computed again; blocks this session computes are registered for others.
//
// Preemption by recompute: Preempt() frees every block; the session then replays what it had
// (source read so far, then the target tokens, each seeing exactly the source it saw before)
// before it continues, so its output is unchanged.
//
// Thread-safety: not thread-safe; one instance per session, used by one thread at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/block_allocator.h"
#include "engine/kv/block_table.h"
#include "engine/policy/profile.h"
#include "engine/policy/wait_k_policy.h"
#include "engine/tokenizer/tokenizer.h"

namespace gpeserve::model {
struct Adapter;
}

namespace gpeserve::session {

enum class Paradigm { kGpe, kReencode, kInterleaved, kBatch };
// "gpe", "reencode", "interleaved", "batch".
absl::StatusOr<Paradigm> ParseParadigm(std::string_view name);
std::string_view ParadigmName(Paradigm paradigm);

struct SessionOptions {
  policy::Profile profile;
  policy::PolicyConfig policy;
  Paradigm paradigm = Paradigm::kGpe;
  bool share_prefix = true;       // share the prompt prefix's full blocks with other sessions
  int64_t max_source_tokens = 0;  // tokens of the prompt and the source words in all (the
                                  // server's limit); 0: no limit
  int64_t max_positions = 0;      // position ids the model supports (max_position_embeddings):
                                  // the source's and the target's (phi + header + max_new_tokens)
                                  // must stay below it; 0: no limit
  // The LoRA adapter the session's tokens run with (null: the base model). The caller keeps it
  // alive; shared prompt-prefix blocks are shared only between sessions of one adapter.
  const model::Adapter* adapter = nullptr;
};

// One piece of model work: new tokens at their position ids; every token attends to the cached
// `context` slots and causally to the tokens before it in `tokens`, except that the first
// `noncausal` tokens all see each other (the reference code's header block, docs/GPE.md 8);
// their K/V go to `slots`.
struct Work {
  std::vector<int32_t> tokens;
  std::vector<int64_t> positions;
  std::vector<int64_t> context;
  std::vector<int64_t> slots;
  int64_t noncausal = 0;
  bool sample = false;  // the last token's logits choose the session's next token
  const model::Adapter* adapter = nullptr;  // the session's (null: the base model)
};

// What a completed piece of work changed, for the caller's events.
struct StepResult {
  bool unit_read = false;          // a source unit (or the prefix, or the end) finished
  std::optional<int32_t> emitted;  // the token joined the output
  bool word_complete = false;      // a target word ended (a delay was recorded)
  bool done = false;               // the session is over
};

// Counters of one session.
struct SessionCounters {
  int64_t source_tokens = 0;   // tokens of the source segments read, prompt prefix included
  int64_t forward_tokens = 0;  // tokens the model computed (re-fed and replayed ones again)
  int64_t shared_tokens = 0;   // prompt-prefix tokens taken from shared blocks, not computed
  int64_t preemptions = 0;
  int64_t kv_blocks_high_water = 0;  // the most KV blocks it held at once
};

class StreamSession {
 public:
  // A session with no source yet. `eos_ids`: the model's end-of-sequence ids (the tokenizer's
  // eos is added). Errors: the profile's strings do not tokenize, or its header is empty.
  static absl::StatusOr<std::unique_ptr<StreamSession>> Create(
      std::shared_ptr<const tokenizer::Tokenizer> tokenizer, std::span<const int64_t> eos_ids,
      const SessionOptions& options);

  // ---- Source (from the client) ----
  // More source words, in order. In split mode "token" each token is a unit. Words after the
  // very first get a leading space when the profile says add_space. Error once EndSource ran.
  absl::Status AddWords(std::span<const std::string> words);
  // The source is complete: the end segment follows the words so far.
  void EndSource();
  // Context read with the prompt prefix, after it (a long-form session's earlier segments,
  // ContextTokens; docs/GPE.md 9): source segment 0 becomes the prefix and `tokens`, at the
  // positions after the prefix (only the prefix's own blocks are shared with other sessions).
  // InvalidArgument when the source would outgrow the limits with it (the session is then
  // unchanged). REQUIRES: nothing prepared yet.
  absl::Status SetContext(std::span<const int32_t> tokens);

  // ---- Work ----
  enum class State {
    kRunnable,  // Prepare has work
    kWaiting,   // needs more source
    kDone,      // over: see result accessors
  };
  State state() const;
  // What the current (or next) piece of work needs, for the scheduler. Meaningful when
  // runnable.
  struct PieceNeeds {
    int64_t remaining = 0;   // tokens it still has to compute, whole (0: an empty read)
    bool samples = false;    // it samples a token at its end
    int64_t min_tokens = 1;  // the fewest tokens it may be cut to (a non-causal block is never
                             // cut: Prepare takes at least this many whatever its budget)
    int64_t free_slots = 0;  // token slots left in the last block of the group it writes into
  };
  PieceNeeds NextPieceNeeds(int block_size) const;
  // The next piece of work, at most `max_tokens` tokens (>= 1), with its blocks reserved.
  // ResourceExhausted when the allocator is short (the session is unchanged). REQUIRES:
  // runnable, and the previous piece completed.
  absl::StatusOr<Work> Prepare(int64_t max_tokens, kv::BlockAllocator& allocator);
  // The prepared piece ran. `token`: the sampled token when the piece's `sample` was set.
  StepResult Complete(std::optional<int32_t> token, kv::BlockAllocator& allocator);
  // Whether the prepared piece may be completed (Complete with no token) before the forward
  // pass that runs it, so that the session's next piece (the write its read allows) can be
  // prepared into the same forward pass: its context then names the slots of the piece before
  // it, whose K/V are written before any row attends (model::PagedAttention), so it computes
  // exactly what it would one step later. True for a prepared piece that samples nothing and
  // makes nothing shareable: not one that fills a block of the prompt prefix, which Complete
  // registers for other sessions (they must not find it before its K/V are written).
  bool MayCompleteBeforeRun() const;
  // Frees every block and forgets prepared work; the session replays its state on the next
  // Prepare calls. Not for a done session.
  void Preempt(kv::BlockAllocator& allocator);
  // Frees every block (the session is finished or abandoned).
  void Release(kv::BlockAllocator& allocator);
  int64_t blocks_held() const;
  // The full blocks of the prompt prefix it holds that are in the shared prefix cache (none
  // without share_prefix, or before its prefix was read).
  std::vector<int32_t> PrefixBlocks() const;
  // One more reference to each full block of its prompt prefix as the prefix cache holds it
  // (the blocks other sessions will share, which may be another session's copy), for a holder
  // that keeps them; as many as the cache has, in order.
  std::vector<int32_t> RetainPrefixBlocks(kv::BlockAllocator& allocator) const;

  // ---- Results ----
  const std::vector<int32_t>& output() const { return policy_->output(); }
  // Delays as recorded, one per completed target word (compat reference: per stop).
  const std::vector<int64_t>& delays() const { return policy_->delays(); }
  // The session's text: the output decoded with special tokens skipped (compat reference: the
  // header and the output decoded together, as that code printed it, docs/GPE.md 8 rule 6).
  std::string FinalText() const;
  // The delays that go with FinalText for AL and LAAL: delays() (compat reference: the first
  // |Y| of them, |Y| the number of whitespace-separated words of FinalText, as that code did).
  std::vector<int64_t> FinalDelays() const;
  policy::DoneReason done_reason() const { return policy_->done_reason(); }
  int64_t units_read() const { return policy_->units_read(); }
  // Every source segment, the end included, has been read.
  bool source_complete() const { return policy_->source_complete(); }
  // |X|: source units plus the end segment, once the source is complete.
  int64_t source_units() const { return static_cast<int64_t>(segments_.size()) - 1; }
  const SessionCounters& counters() const { return counters_; }
  // Source segments as tokens so far: prompt prefix, units, end segment (once ended).
  const std::vector<std::vector<int32_t>>& segments() const { return segments_; }
  const SessionOptions& options() const { return options_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  // A feed in progress: tokens to run, from `offset` on, into the source group (reads, the
  // interleaved sequence, replays of the source) or the target group.
  struct Feed {
    bool active = false;
    bool write = false;      // samples a token at its end
    bool to_target = false;  // into the target group
    bool reencode = false;   // re-encodes the target group from scratch
    bool replay = false;     // restores state after a preemption
    size_t block = 0;        // leading tokens that see each other (one piece, never cut)
    int64_t unit = -1;       // the segment a read runs
    std::vector<int32_t> tokens;
    std::vector<int64_t> seen;  // replay of the target: source tokens each token saw
    size_t offset = 0;          // tokens done
    size_t chunk = 0;           // tokens of the prepared piece
    int64_t chunk_seen = 0;     // source tokens the prepared piece sees
  };

  StreamSession() = default;
  bool interleaved() const { return options_.paradigm == Paradigm::kInterleaved; }
  kv::BlockTable& write_table() { return interleaved() ? source_ : target_; }
  // The feed Prepare would start now (not active when there is nothing to do).
  Feed NextFeed() const;
  // The replay or feed in progress, if any.
  const Feed* CurrentFeed() const;
  // Takes shared prompt-prefix blocks when `feed` starts filling an empty source group.
  void SharePrefix(Feed& feed, kv::BlockAllocator& allocator);
  // Makes this session's full prompt-prefix blocks findable by other sessions.
  void RegisterPrefix(kv::BlockAllocator& allocator);
  void AddUnit(std::vector<int32_t> tokens);
  // InvalidArgument once the source segments (prompt, words, end) outgrow the limits.
  absl::Status CheckSourceLength() const;

  // ---- Constant after Create ----
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  SessionOptions options_;
  std::vector<int32_t> end_tokens_;
  std::vector<int32_t> header_;  // the target's segment 0

  // ---- State ----
  std::vector<uint64_t> prefix_hashes_;  // chained hash of each full block of segment 0
  std::vector<std::vector<int64_t>> prefix_block_tokens_;
  size_t prefix_size_ = 0;     // tokens of the prompt prefix in segment 0 (the rest: context)
  int prefix_block_size_ = 0;  // the block size prefix_hashes_ were computed for
  std::vector<std::vector<int32_t>> segments_;  // source: prefix, units..., end
  int64_t words_ = 0;                           // words added
  int64_t source_length_ = 0;  // tokens of the source segments so far, the end segment
                               // counted from the start
  bool ended_ = false;
  std::unique_ptr<policy::WaitKPolicy> policy_;
  kv::BlockTable source_, target_;      // interleaved: one sequence in source_
  std::vector<int32_t> source_tokens_;  // tokens whose K/V are in source_
  std::vector<int32_t> target_tokens_;  // tokens whose K/V are in target_
  std::vector<int64_t> target_seen_;    // source tokens each of them saw
  int64_t encoded_with_source_ = 0;     // reencode, batch: S when the target was encoded
  std::deque<Feed> replay_;
  Feed feed_;
  SessionCounters counters_;
};

}  // namespace gpeserve::session
