// The "waiting for source" signal (SessionConfig::report_waiting; what the SimulEval agent reads
// by): fed one word at a time, a session sends kWaiting only after every token it can produce
// with the words so far, exactly once per push, with the units read; the tokens come out as
// when the whole source arrives at once; none after the end, none without asking.
#include <algorithm>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/test_models.h"

namespace gpeserve::engine {
namespace {

using Kind = SessionEvent::Kind;

SessionConfig Config(int wait_k, bool report_waiting) {
  SessionConfig c;
  c.options.profile = *policy::LoadProfile("qwen2.5");
  c.options.policy.wait_k = wait_k;
  c.options.policy.max_new_tokens = 16;
  c.report_waiting = report_waiting;
  return c;
}

std::shared_ptr<Engine> MakeEngine(std::shared_ptr<const model::Model> m) {
  EngineConfig config;
  config.block_size = 4;
  config.kv_blocks = 512;
  auto engine = Engine::Create(std::move(m), config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return *engine;
}

int64_t Count(const std::vector<SessionEvent>& events, Kind kind) {
  return std::count_if(events.begin(), events.end(),
                       [kind](const SessionEvent& e) { return e.kind == kind; });
}

bool Final(const std::vector<SessionEvent>& events) {
  return Count(events, Kind::kDone) + Count(events, Kind::kError) > 0;
}

// Output tokens of the token events, each with the units read when it was produced.
std::vector<std::pair<int32_t, int64_t>> Tokens(const std::vector<SessionEvent>& events) {
  std::vector<std::pair<int32_t, int64_t>> out;
  for (const SessionEvent& e : events) {
    if (e.kind != Kind::kTokens) continue;
    for (int32_t id : e.ids) out.emplace_back(id, e.units_read);
  }
  return out;
}

TEST(WaitingTest, OnePerPushAfterEveryTokenTheWordsAllow) {
  auto m = testing::TinyChatModel(5);
  ASSERT_NE(m, nullptr);
  auto engine = MakeEngine(m);
  const std::vector<std::string> words = {"the", "cat", "sat", "on", "a", "mat", "and", "ran"};
  for (int wait_k : {1, 3}) {
    SCOPED_TRACE(::testing::Message() << "wait_k " << wait_k);
    // The reference: every word at once, no signal asked for (and none sent).
    Collector all_at_once;
    {
      auto handle = engine->Open(Config(wait_k, false), all_at_once.Callback());
      ASSERT_TRUE(handle.ok()) << handle.status();
      (*handle)->Push(words);
      (*handle)->EndSource();
    }
    const SessionEvent reference = all_at_once.Wait();
    ASSERT_EQ(reference.kind, Kind::kDone) << reference.status;
    EXPECT_EQ(Count(all_at_once.events(), Kind::kWaiting), 0);
    const auto reference_tokens = Tokens(all_at_once.events());

    // One word at a time, each pushed only once the session says it waits.
    Collector live;
    auto handle = engine->Open(Config(wait_k, true), live.Callback());
    ASSERT_TRUE(handle.ok()) << handle.status();
    size_t pushed = 0;
    bool ended_early = false;
    for (;; ++pushed) {
      // Waiting number `pushed` (the first: the prompt read, nothing pushed), or the end.
      ASSERT_TRUE(live.WaitUntil([&](const std::vector<SessionEvent>& events) {
        return Count(events, Kind::kWaiting) > static_cast<int64_t>(pushed) || Final(events);
      }));
      const std::vector<SessionEvent> events = live.events();
      if ((ended_early = Final(events))) break;  // the target ended before the source
      const SessionEvent& waiting = events.back();
      ASSERT_EQ(waiting.kind, Kind::kWaiting) << "nothing may follow the signal before a push";
      EXPECT_EQ(waiting.units_read, static_cast<int64_t>(pushed));
      EXPECT_EQ(waiting.segment, 0);
      // Every token the session produces with `pushed` words has come.
      const auto so_far = Tokens(events);
      const auto allowed =
          std::count_if(reference_tokens.begin(), reference_tokens.end(),
                        [&](const auto& t) { return t.second <= static_cast<int64_t>(pushed); });
      EXPECT_EQ(static_cast<int64_t>(so_far.size()), allowed) << "after " << pushed << " words";
      if (pushed == words.size()) break;
      (*handle)->Push({words[pushed]});
    }
    (*handle)->EndSource();
    const SessionEvent done = live.Wait();
    ASSERT_EQ(done.kind, Kind::kDone) << done.status;
    EXPECT_EQ(done.output, reference.output);
    EXPECT_EQ(done.delays, reference.delays);
    EXPECT_EQ(Tokens(live.events()), reference_tokens);
    // One signal per push (and the first), none once the source (or the target) ended.
    EXPECT_EQ(Count(live.events(), Kind::kWaiting),
              static_cast<int64_t>(pushed) + (ended_early ? 0 : 1));
  }
}

// Long-form: the signal names the running segment; a segment cut by its mark finishes (its
// SegmentDone) before the signal that waits for the next segment's first word.
TEST(WaitingTest, LongFormWaitsInTheRunningSegment) {
  auto m = testing::TinyChatModel(7);
  ASSERT_NE(m, nullptr);
  auto engine = MakeEngine(m);
  SessionConfig config = Config(2, true);
  config.long_form.enabled = true;
  const std::vector<std::string> words = {"a", "dog", "sat.", "the", "cat", "ran?", "and"};
  Collector live;
  auto handle = engine->Open(config, live.Callback());
  ASSERT_TRUE(handle.ok()) << handle.status();
  int64_t segment = 0, in_segment = 0;
  for (size_t pushed = 0;; ++pushed) {
    ASSERT_TRUE(live.WaitUntil([&](const std::vector<SessionEvent>& events) {
      return Count(events, Kind::kWaiting) > static_cast<int64_t>(pushed) || Final(events);
    }));
    const std::vector<SessionEvent> events = live.events();
    ASSERT_FALSE(Final(events)) << events.back().status;
    const SessionEvent& waiting = events.back();
    ASSERT_EQ(waiting.kind, Kind::kWaiting);
    EXPECT_EQ(Count(events, Kind::kSegment), segment) << "after " << pushed << " words";
    EXPECT_EQ(waiting.segment, segment);
    // The segment's words are read, unless its target ended first (then they are dropped).
    EXPECT_LE(waiting.units_read, in_segment);
    if (pushed == words.size()) break;
    (*handle)->Push({words[pushed]});
    ++in_segment;
    if (words[pushed].back() == '.' || words[pushed].back() == '?') {
      ++segment;
      in_segment = 0;
    }
  }
  (*handle)->EndSource();
  const SessionEvent done = live.Wait();
  ASSERT_EQ(done.kind, Kind::kDone) << done.status;
  EXPECT_EQ(done.segments, 3);
  EXPECT_EQ(Count(live.events(), Kind::kWaiting), static_cast<int64_t>(words.size()) + 1);
}

}  // namespace
}  // namespace gpeserve::engine
