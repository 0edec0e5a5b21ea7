#include "engine/scheduler/scheduler.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "engine/kv/blocks.h"
#include "gtest/gtest.h"

namespace gpeserve::scheduler {
namespace {

using kv::BlocksFor;

Candidate Write(int64_t id, int64_t order, int64_t last_served = -1) {
  return {.id = id,
          .admitted = true,
          .write = true,
          .remaining = 1,
          .admit_order = order,
          .last_served = last_served,
          .blocks_held = 2,
          .free_slots = 5};
}
Candidate Read(int64_t id, int64_t order, int64_t tokens, int64_t free_slots = 0) {
  return {.id = id,
          .admitted = true,
          .write = false,
          .remaining = tokens,
          .admit_order = order,
          .last_served = -1,
          .blocks_held = 1,
          .free_slots = free_slots};
}

std::map<int64_t, int64_t> Tokens(const Plan& plan) {
  std::map<int64_t, int64_t> m;
  for (const Piece& p : plan.pieces) m[p.id] = p.tokens;
  return m;
}

TEST(SchedulerTest, BlocksFor) {
  EXPECT_EQ(BlocksFor(0, 0, 16), 0);
  EXPECT_EQ(BlocksFor(3, 3, 16), 0);
  EXPECT_EQ(BlocksFor(4, 3, 16), 1);
  EXPECT_EQ(BlocksFor(35, 3, 16), 2);
  EXPECT_EQ(BlocksFor(36, 3, 16), 3);
}

// Writes come first, then reads; a read larger than what is left of the budget is cut
// (chunked prefill), and a read after it gets nothing this step.
TEST(SchedulerTest, WritesFirstThenChunkedReads) {
  const Plan plan =
      Schedule({.max_batch_tokens = 100, .max_sessions_per_step = 8},
               {Read(1, 0, 200), Write(2, 1), Read(3, 2, 50), Write(4, 3)}, {1000, 16});
  ASSERT_EQ(plan.pieces.size(), 3u);
  EXPECT_EQ(plan.pieces[0].id, 2);
  EXPECT_EQ(plan.pieces[1].id, 4);
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{2, 1}, {4, 1}, {1, 98}}));
  EXPECT_TRUE(plan.preempted.empty());
  EXPECT_EQ(plan.long_reads, 0);
}

// A long read (more than long_read_tokens left) comes after every other read and after the
// admission of new sessions, so a long prompt never keeps others out; paced, it takes at most
// the long-read budget for a step that has other work (none: it sits the step out), and its
// budget alone (at least one token) when nobody else has any.
TEST(SchedulerTest, LongReadsComeLastAndCanBeDeferred) {
  Candidate newcomer = Read(5, 9, 30);
  newcomer.admitted = false;
  newcomer.blocks_held = 0;
  const SchedulerConfig config{
      .max_batch_tokens = 100, .max_sessions_per_step = 8, .long_read_tokens = 256};
  const std::vector<Candidate> all = {Read(1, 0, 8000), Write(2, 1), Read(3, 2, 50), newcomer};
  Plan plan = Schedule(config, all, {1000, 16});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{2, 1}, {3, 50}, {5, 30}, {1, 19}}));
  EXPECT_EQ(plan.pieces.back().id, 1);
  EXPECT_EQ(plan.long_reads, 1);
  EXPECT_EQ(plan.long_read_tokens, 19);
  plan = Schedule(config, all, {1000, 16}, {.with_others = 0});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{2, 1}, {3, 50}, {5, 30}}));
  EXPECT_EQ(plan.long_reads, 0);
  plan = Schedule(config, all, {1000, 16}, {.with_others = 7, .alone = 3});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{2, 1}, {3, 50}, {5, 30}, {1, 7}}));
  // Two long reads share the budget.
  plan = Schedule(config, {Write(2, 1), Read(1, 0, 8000), Read(6, 3, 900)}, {1000, 16},
                  {.with_others = 10});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{2, 1}, {1, 10}}));
  EXPECT_EQ(plan.long_read_tokens, 10);
  plan = Schedule(config, {Read(1, 0, 8000)}, {1000, 16}, {.with_others = 0});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{1, 100}}));
  EXPECT_EQ(plan.long_reads, 1);
  plan = Schedule(config, {Read(1, 0, 8000), Read(6, 3, 900)}, {1000, 16},
                  {.with_others = 0, .alone = 40});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{1, 40}}));
  plan = Schedule(config, {Read(1, 0, 8000)}, {1000, 16}, {.with_others = 0, .alone = 0});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{1, 1}}));
  EXPECT_TRUE(IsLongRead(config, Read(1, 0, 257)));
  EXPECT_FALSE(IsLongRead(config, Read(1, 0, 256)));
  EXPECT_FALSE(IsLongRead(config, Write(1, 0)));
}

// A piece that must run whole (the reference code's non-causal header block) is never cut:
// it waits for a step with room, and runs alone over the budget when larger than all of it.
TEST(SchedulerTest, PiecesAreNotCutBelowTheirMinimum) {
  Candidate header = Write(5, 4, /*last_served=*/3);
  header.remaining = header.min_tokens = 6;
  const SchedulerConfig config{.max_batch_tokens = 6, .max_sessions_per_step = 8};
  Plan plan = Schedule(config, {Write(2, 1, 0), header, Read(3, 2, 50)}, {1000, 16});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{2, 1}, {3, 5}}));
  header.last_served = -1;  // next step it is the oldest write and fits
  plan = Schedule(config, {Write(2, 1, 0), header, Read(3, 2, 45)}, {1000, 16});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{5, 6}}));

  const SchedulerConfig small{.max_batch_tokens = 4, .max_sessions_per_step = 8};
  plan = Schedule(small, {header, Write(2, 1, 0)}, {1000, 16});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{5, 6}}));
  plan = Schedule(small, {Write(2, 1, -2), header}, {1000, 16});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{2, 1}}));
  // Short of blocks for the whole piece: not a smaller piece, nothing.
  plan = Schedule(config, {header}, {0, 16});
  EXPECT_TRUE(plan.pieces.empty());
}

// Random candidate sets: the budget and the session cap always hold, no session appears
// twice, and the blocks the pieces need never exceed the free ones plus what preemption freed.
TEST(SchedulerTest, LimitsHoldOnRandomInputs) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 2000; ++trial) {
    SchedulerConfig config{.max_batch_tokens = 1 + static_cast<int64_t>(rng() % 64),
                           .max_sessions_per_step = 1 + static_cast<int>(rng() % 6)};
    std::vector<Candidate> cs;
    const int n = static_cast<int>(rng() % 10);
    for (int i = 0; i < n; ++i) {
      Candidate c;
      c.id = i;
      c.runnable = rng() % 5 != 0;
      c.admitted = rng() % 4 != 0;
      c.write = rng() % 2 == 0;
      c.remaining = c.write ? 1 + rng() % 2 : rng() % 40;
      c.admit_order = rng() % 100;
      c.last_served = static_cast<int64_t>(rng() % 10) - 1;
      c.blocks_held = c.admitted ? rng() % 5 : 0;
      c.free_slots = rng() % 4;
      c.min_tokens = rng() % 4 == 0 ? 1 + static_cast<int64_t>(rng() % 80) : 1;
      cs.push_back(c);
    }
    config.long_read_tokens = 1 + static_cast<int64_t>(rng() % 40);
    const int64_t free = rng() % 6;
    const int64_t long_budget = static_cast<int64_t>(rng() % 12) - 1;
    const Plan plan =
        Schedule(config, cs, {free, 4}, {long_budget, static_cast<int64_t>(rng() % 12) - 1});
    int64_t tokens = 0, blocks = 0, freed = 0;
    std::set<int64_t> seen;
    for (int64_t id : plan.preempted) {
      EXPECT_TRUE(cs[id].admitted);
      freed += cs[id].blocks_held;
      EXPECT_TRUE(seen.insert(id).second);
    }
    int long_reads = 0;
    int64_t long_tokens = 0;
    for (const Piece& p : plan.pieces) {
      EXPECT_TRUE(seen.insert(p.id).second) << "session planned twice or preempted and run";
      EXPECT_TRUE(cs[p.id].runnable);
      EXPECT_LE(p.tokens, cs[p.id].remaining);
      EXPECT_GE(p.tokens, std::min(cs[p.id].remaining, cs[p.id].min_tokens)) << "cut too small";
      tokens += p.tokens;
      blocks += BlocksFor(p.tokens, cs[p.id].free_slots, 4);
      if (IsLongRead(config, cs[p.id])) {
        ++long_reads;
        long_tokens += p.tokens;
      }
    }
    EXPECT_EQ(plan.long_reads, long_reads);
    EXPECT_EQ(plan.long_read_tokens, long_tokens);
    // Paced long reads stay within their budget when the step has other pieces.
    if (long_budget >= 0 && plan.pieces.size() > static_cast<size_t>(long_reads) &&
        long_reads > 0 && !IsLongRead(config, cs[plan.pieces[0].id])) {
      EXPECT_LE(long_tokens, long_budget);
    }
    // Over the budget only as a single piece that may not be cut smaller.
    if (tokens > config.max_batch_tokens) {
      std::vector<Piece> nonempty;
      for (const Piece& p : plan.pieces) {
        if (p.tokens > 0) nonempty.push_back(p);
      }
      ASSERT_EQ(nonempty.size(), 1u);
      const Candidate& c = cs[nonempty[0].id];
      EXPECT_EQ(nonempty[0].tokens, std::min(c.remaining, c.min_tokens));
    }
    EXPECT_LE(static_cast<int>(plan.pieces.size()), config.max_sessions_per_step);
    EXPECT_LE(blocks, free + freed);
  }
}

// Aging: with more runnable sessions than fit in one step, each is served within
// ceil(n / per_step) steps, whatever their admission order.
TEST(SchedulerTest, EverySessionServedWithinBoundedSteps) {
  const int n = 11, per_step = 3;
  std::vector<int64_t> last(n, -1);
  for (int step = 0; step < 40; ++step) {
    std::vector<Candidate> cs;
    for (int i = 0; i < n; ++i) cs.push_back(Write(i, n - i, last[i]));
    const Plan plan =
        Schedule({.max_batch_tokens = 512, .max_sessions_per_step = per_step}, cs, {100, 16});
    ASSERT_EQ(plan.pieces.size(), static_cast<size_t>(per_step));
    for (const Piece& p : plan.pieces) last[p.id] = step;
    if (step >= (n + per_step - 1) / per_step) {
      for (int i = 0; i < n; ++i) {
        EXPECT_GT(last[i], step - (n + per_step - 1) / per_step) << "session " << i;
      }
    }
  }
}

// Out of blocks: the most recently admitted running session not planned is preempted; a
// session that is itself the latest preempts itself; waiting sessions are not admitted.
TEST(SchedulerTest, PreemptsTheMostRecentlyAdmitted) {
  Candidate a = Write(1, 0), b = Write(2, 1), c = Write(3, 2);
  a.free_slots = b.free_slots = c.free_slots = 0;  // each needs a new block
  c.blocks_held = 4;
  Plan plan = Schedule({}, {a, b, c}, {1, 16});
  // a takes the free block; b needs one: c (admitted last) is preempted and frees 4.
  EXPECT_EQ(plan.preempted, std::vector<int64_t>{3});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{1, 1}, {2, 1}}));

  plan = Schedule({}, {a, b}, {1, 16});
  EXPECT_EQ(plan.preempted, std::vector<int64_t>{2});  // b is the latest: itself
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{1, 1}}));

  Candidate waiting = Read(9, 5, 40);
  waiting.admitted = false;
  plan = Schedule({}, {a, waiting}, {2, 16});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{1, 1}}));  // 40 tokens need 3 blocks
  EXPECT_TRUE(plan.preempted.empty());
  plan = Schedule({}, {a, waiting}, {4, 16});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{1, 1}, {9, 40}}));

  // An idle running session (waiting for source) can be the victim.
  Candidate idle = Write(4, 9);
  idle.runnable = false;
  idle.blocks_held = 3;
  plan = Schedule({}, {a, b, idle}, {1, 16});
  EXPECT_EQ(plan.preempted, std::vector<int64_t>{4});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{1, 1}, {2, 1}}));
}

// A victim that holds every block in use (its own and the free ones make the whole cache) can
// never fit: the plan ends it instead of preempting it; with other holders it is preempted.
TEST(SchedulerTest, ASessionAloneInTheCacheAndStillShortNeverFits) {
  Candidate big = Read(1, 0, 60);  // 60 tokens: 4 blocks
  big.blocks_held = 6;
  Plan plan = Schedule({}, {big}, {.free_blocks = 2, .block_size = 16, .total_blocks = 8});
  EXPECT_EQ(plan.never_fit, std::vector<int64_t>{1});
  EXPECT_TRUE(plan.preempted.empty());
  EXPECT_TRUE(plan.pieces.empty());
  // Another session holds a block: preempted by recompute, it may fit later.
  plan = Schedule({}, {big}, {.free_blocks = 2, .block_size = 16, .total_blocks = 9});
  EXPECT_TRUE(plan.never_fit.empty());
  EXPECT_EQ(plan.preempted, std::vector<int64_t>{1});
  // Blocks an earlier victim of the step frees count from the next step only (they may be
  // shared prefix blocks that stay held): both are preempted now.
  Candidate other = Write(2, 5);
  other.runnable = false;
  other.blocks_held = 1;
  plan = Schedule({}, {big, other}, {.free_blocks = 2, .block_size = 16, .total_blocks = 9});
  EXPECT_EQ(plan.preempted, (std::vector<int64_t>{2, 1}));
  EXPECT_TRUE(plan.never_fit.empty());
  // The next step, with the other's block free: alone.
  plan = Schedule({}, {big}, {.free_blocks = 3, .block_size = 16, .total_blocks = 9});
  EXPECT_EQ(plan.never_fit, std::vector<int64_t>{1});
  // Another session shares its blocks (a prompt prefix both hold: blocks_held counts them in
  // each) and runs first: the victim's blocks and the free ones make the whole cache, yet it is
  // not alone, and is preempted, not ended.
  Candidate sharer = Write(2, 0, /*last_served=*/-2);
  sharer.blocks_held = 6;
  plan = Schedule({}, {big, sharer}, {.free_blocks = 2, .block_size = 16, .total_blocks = 8});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{2, 1}}));
  EXPECT_EQ(plan.preempted, std::vector<int64_t>{1});
  EXPECT_TRUE(plan.never_fit.empty());
  // A waiting session's piece larger than the whole cache is cut to the cache, so that it can be
  // admitted at all; a piece that cannot be cut (a block that runs whole) never fits.
  Candidate waiting = Read(3, 7, 100);
  waiting.admitted = false;
  waiting.blocks_held = 0;
  plan = Schedule({}, {waiting}, {.free_blocks = 4, .block_size = 16, .total_blocks = 4});
  EXPECT_EQ(Tokens(plan), (std::map<int64_t, int64_t>{{3, 64}}));
  EXPECT_TRUE(plan.never_fit.empty());
  waiting.min_tokens = 80;
  plan = Schedule({}, {waiting}, {.free_blocks = 4, .block_size = 16, .total_blocks = 4});
  EXPECT_TRUE(plan.pieces.empty());
  EXPECT_EQ(plan.never_fit, std::vector<int64_t>{3});
  // Without the cache's size nothing is judged never to fit.
  plan = Schedule({}, {big}, {.free_blocks = 2, .block_size = 16});
  EXPECT_TRUE(plan.never_fit.empty());
}

}  // namespace
}  // namespace gpeserve::scheduler
