// Step planning for the engine loop: which sessions run in the next forward pass and how many
// tokens each. A pure function of the sessions' needs and the free KV blocks, unit-tested
// with no model.
//
// Rules, in order:
//   1. Writes (pieces that sample a token, usually one token) before reads (source prefill,
//      replays after preemption, multi-token feeds that sample nothing), so that no session's
//      writes stall behind another's long read; among each kind, the least recently served
//      first, then the earliest admitted (FCFS with aging: every runnable session is served
//      within ceil(runnable / max_sessions_per_step) steps while blocks suffice).
//   2. Within `max_batch_tokens` and `max_sessions_per_step`; a piece larger than what is left
//      of the budget is cut (chunked prefill); a write is cut only if it is a multi-token feed,
//      and no piece below its `min_tokens` (a block that must run whole waits for a step with
//      room, or runs alone over the budget when it is larger than the whole budget).
//   3. Admission: sessions not yet admitted (or preempted) come after every running write and
//      read, earliest first, and only when their piece fits in the free blocks (a piece larger
//      than the whole cache is cut to it; one that cannot be cut that far never fits).
//   3b. Long reads (a read with more than `long_read_tokens` tokens left, e.g. a prompt of
//      thousands of tokens) come last, after admissions, so that a long prefill never keeps
//      other sessions out; together they take at most `LongReadBudget::with_others` tokens in
//      a step that has other pieces (0: they sit the step out) and `LongReadBudget::alone` in
//      one that has not (the engine's pacing, see EngineConfig).
//   4. Blocks: a running session whose piece needs blocks that are not free preempts by
//      recompute the most recently admitted running session not planned in this step (itself,
//      when it is that one): the victim's blocks are freed and it waits for re-admission. A
//      victim that holds every block in use (its blocks and the blocks free at the start of the
//      step are the whole cache) can never fit: it is listed to be ended instead.
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <vector>

namespace gpeserve::scheduler {

struct SchedulerConfig {
  int64_t max_batch_tokens = 512;  // tokens in one forward pass
  // Sessions in one forward pass. As many as the engine's default max_sessions: below the live
  // sessions, a session waits steps for its turn, and each of its words takes that many more
  // steps (gpe bench --pace: 192 speakers of the built-in model had p99 word lag 1.66 s with 64,
  // 0.86 s with 256).
  int max_sessions_per_step = 256;
  int64_t long_read_tokens = 256;  // a read with more tokens left than this is a long read
};

// A session with work to do.
struct Candidate {
  int64_t id = 0;
  bool runnable = true;      // has work now (else: a running session idle until more source
                             // arrives, listed only as a possible preemption victim)
  bool admitted = false;     // running (else waiting for admission)
  bool write = false;        // its piece samples a token
  int64_t remaining = 0;     // tokens its piece still has (0: an empty read, no budget)
  int64_t min_tokens = 1;    // its piece is not cut below this many tokens
  int64_t admit_order = 0;   // order of admission (waiting: of arrival); smaller is older
  int64_t last_served = -1;  // step it last ran in (-1: never)
  int64_t blocks_held = 0;   // freed if it is preempted
  int64_t free_slots = 0;    // token slots left in the last block its piece writes into
};

struct Piece {
  int64_t id = 0;
  int64_t tokens = 0;
};

// The KV cache as the plan sees it.
struct KvRoom {
  int64_t free_blocks = 0;
  int block_size = 16;
  int64_t total_blocks = 0;  // 0: not given (no session is judged never to fit)
};

struct Plan {
  std::vector<int64_t> preempted;  // free these sessions' blocks first, in this order
  std::vector<int64_t> never_fit;  // end these: alone in the cache, still short of blocks
  std::vector<Piece> pieces;       // then run these
  int long_reads = 0;              // pieces of them that are long reads
  int64_t long_read_tokens = 0;    // and their tokens
};

// Whether `c` is a long read under `config`.
bool IsLongRead(const SchedulerConfig& config, const Candidate& c);

// Tokens the long reads of one step may take together (-1: no limit).
struct LongReadBudget {
  int64_t with_others = -1;  // in a step with other pieces; 0: none
  int64_t alone = -1;        // in a step without (at least 1 when set)
};

Plan Schedule(const SchedulerConfig& config, const std::vector<Candidate>& candidates,
              const KvRoom& kv, LongReadBudget long_read_budget = {});

}  // namespace gpeserve::scheduler
