#include "engine/policy/wait_k_policy.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/engine/tokenizer/test_tokenizers.h"

namespace gpeserve::policy {
namespace {

using Step = WaitKPolicy::Step;

constexpr int32_t kEos = 300;
const std::vector<int32_t> kHeader = {'<', 'h', '>'};

// A byte-level tokenizer whose extra tokens are whole words ("ĠB" is " B").
class PolicyTest : public ::testing::Test {
 protected:
  PolicyTest() {
    tokenizer_ = tokenizer::testing::Build(tokenizer::testing::ByteLevelJson(
        {"A", "\u0120B", "\u0120C", "\u0120D", "Hel", "lo", "\u0120world"}, {},
        nlohmann::json::array({tokenizer::testing::Added(kEos, "<|im_end|>", true)})));
  }
  int32_t Id(const std::string& token) const { return *tokenizer_->TokenToId(token); }

  WaitKPolicy Make(const PolicyConfig& config) const {
    return WaitKPolicy(config, *tokenizer_, kHeader, {kEos}, "<|im_end|>\n");
  }

  // Drives `policy` with a greedy fake model that continues `target` from the output so far
  // (it knows the answer, so it ignores the source), with all `words` available up front
  // unless `arrivals` says after how many steps each unit arrives (the end segment last).
  // Returns the actions as "R0 W3 ...": R<unit>, W<number of tokens fed>, "~" for a wait.
  std::string Drive(WaitKPolicy& policy, const std::vector<int32_t>& target, int words,
                    std::vector<int> arrivals = {}) {
    if (arrivals.empty()) arrivals.assign(words + 1, 0);
    std::vector<std::string> log;
    size_t arrived = 0;
    for (int step = 0; step < 1000; ++step) {
      while (arrived < arrivals.size() && arrivals[arrived] <= step) {
        if (arrived < static_cast<size_t>(words)) {
          policy.AddSourceUnit();
        } else {
          policy.EndSource();
        }
        ++arrived;
      }
      const WaitKPolicy::Action action = policy.Next();
      if (action.step == Step::kDone) break;
      if (action.step == Step::kWait) {
        if (log.empty() || log.back() != "~") log.push_back("~");
        continue;
      }
      if (action.step == Step::kRead) {
        log.push_back(absl::StrCat("R", action.unit));
        policy.OnRead();
        continue;
      }
      log.push_back(absl::StrCat("W", action.feed.size()));
      const size_t next = policy.output().size();
      policy.OnToken(next < target.size() ? target[next] : kEos);
    }
    return absl::StrJoin(log, " ");
  }

  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
};

// The worked example: source "a b c", k = 2, target "A B C." then end of sequence.
TEST_F(PolicyTest, WaitTwoOnThreeWords) {
  WaitKPolicy p = Make({.wait_k = 2});
  const std::vector<int32_t> target = {Id("A"), Id("\u0120B"), Id("\u0120C"), '.'};
  // R0 prefix, R1 R2 (k = 2), W3 header -> A, W1 A -> " B" (new word: discarded, A rolled
  // back), R3, W1 A again -> " B", W1 -> " C" (rolled back), R4 end, W1 " B" -> " C",
  // W1 -> ".", W1 -> end of sequence.
  EXPECT_EQ(Drive(p, target, 3), "R0 R1 R2 W3 W1 R3 W1 W1 R4 W1 W1 W1");
  EXPECT_EQ(p.output(), target);
  EXPECT_EQ(p.delays(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(p.done_reason(), DoneReason::kEndOfSequence);
}

TEST_F(PolicyTest, RollBackIsReportedOnNewWordOnly) {
  WaitKPolicy p = Make({.wait_k = 1});
  p.AddSourceUnit();
  p.AddSourceUnit();
  for (int i = 0; i < 2; ++i) p.OnRead();  // prefix, word 1
  ASSERT_EQ(p.Next().step, Step::kWrite);
  auto first = p.OnToken(Id("A"));
  EXPECT_TRUE(first.emitted);
  EXPECT_FALSE(first.kv_rollback);
  auto second = p.OnToken(Id("\u0120B"));
  EXPECT_TRUE(second.kv_rollback);
  EXPECT_TRUE(second.word_complete);
  EXPECT_FALSE(second.emitted);
  const auto next = p.Next();
  EXPECT_EQ(next.step, Step::kRead);
  EXPECT_EQ(next.unit, 2);
  p.OnRead();
  EXPECT_EQ(p.Next().feed, std::vector<int32_t>{Id("A")});  // A is fed again
}

TEST_F(PolicyTest, KLargerThanSourceReadsEverythingFirst) {
  WaitKPolicy p = Make({.wait_k = 5});
  const std::vector<int32_t> target = {Id("A"), Id("\u0120B"), '.'};
  EXPECT_EQ(Drive(p, target, 2), "R0 R1 R2 R3 W3 W1 W1 W1");
  EXPECT_EQ(p.output(), target);
  EXPECT_EQ(p.delays(), (std::vector<int64_t>{3, 3}));  // "A", then "B." (source complete)
}

TEST_F(PolicyTest, EmptySourceReadsPrefixAndEnd) {
  WaitKPolicy p = Make({.wait_k = 3});
  EXPECT_EQ(Drive(p, {Id("A")}, 0), "R0 R1 W3 W1");
  EXPECT_EQ(p.output(), std::vector<int32_t>{Id("A")});
  EXPECT_EQ(p.delays(), std::vector<int64_t>{1});  // completed at end of sequence
}

TEST_F(PolicyTest, OneWordSource) {
  WaitKPolicy p = Make({.wait_k = 1});
  EXPECT_EQ(Drive(p, {Id("A"), '!'}, 1), "R0 R1 W3 W1 R2 W1");
  EXPECT_EQ(p.delays(), std::vector<int64_t>{1});
}

TEST_F(PolicyTest, WordOfManyTokensStopsOnlyAtTheNextWord) {
  WaitKPolicy p = Make({.wait_k = 1});
  const std::vector<int32_t> target = {Id("Hel"), Id("lo"), Id("\u0120world")};
  // " world" after "Hello" starts a new word: the write stops, "lo" is fed again after word 2;
  // the target then ends (rule c) although words 3 and the end were never read.
  EXPECT_EQ(Drive(p, target, 3), "R0 R1 W3 W1 W1 R2 W1 W1");
  EXPECT_EQ(p.output(), target);
  EXPECT_EQ(p.delays(), (std::vector<int64_t>{1, 2}));
}

TEST_F(PolicyTest, PunctuationEndsTheWriteAndStaysPending) {
  WaitKPolicy p = Make({.wait_k = 1});
  const std::vector<int32_t> target = {Id("A"), ',', Id("\u0120B")};
  // "," ends the first write and is fed by the next one (no roll-back).
  EXPECT_EQ(Drive(p, target, 3), "R0 R1 W3 W1 R2 W1 W1");
  EXPECT_EQ(p.output(), target);
  EXPECT_EQ(p.delays(), (std::vector<int64_t>{1, 2}));
}

TEST_F(PolicyTest, EndOfSequenceBeforeTheSourceEnds) {
  WaitKPolicy p = Make({.wait_k = 2});
  EXPECT_EQ(Drive(p, {Id("A")}, 5), "R0 R1 R2 W3 W1");
  EXPECT_EQ(p.units_read(), 2);
  EXPECT_TRUE(p.done());
  EXPECT_EQ(p.done_reason(), DoneReason::kEndOfSequence);
}

TEST_F(PolicyTest, WriteCapEndsTheWriteWithoutADelay) {
  WaitKPolicy p = Make({.wait_k = 1, .max_write_tokens = 2});
  const std::vector<int32_t> target = {'a', 'b', 'c', 'd', 'e'};
  EXPECT_EQ(Drive(p, target, 2), "R0 R1 W3 W1 R2 W1 W1 R3 W1 W1");
  EXPECT_EQ(p.output(), target);
  EXPECT_EQ(p.delays(), std::vector<int64_t>{3});  // one word, completed at the end
}

TEST_F(PolicyTest, WaitsForWordsThatHaveNotArrived) {
  WaitKPolicy p = Make({.wait_k = 2});
  const std::vector<int32_t> target = {Id("A"), Id("\u0120B"), Id("\u0120C"), '.'};
  // Word 2 arrives at step 5, word 3 at step 12, the end at step 20.
  EXPECT_EQ(Drive(p, target, 3, {0, 5, 12, 20}), "R0 R1 ~ R2 W3 W1 ~ R3 W1 W1 ~ R4 W1 W1 W1");
  EXPECT_EQ(p.output(), target);
  EXPECT_EQ(p.delays(), (std::vector<int64_t>{2, 3, 4}));
}

TEST_F(PolicyTest, MaxNewTokensAndMaxLag) {
  WaitKPolicy capped = Make({.wait_k = 1, .max_new_tokens = 2});
  Drive(capped, {Id("A"), Id("\u0120B"), Id("\u0120C")}, 0);
  EXPECT_EQ(capped.output().size(), 2u);
  EXPECT_EQ(capped.done_reason(), DoneReason::kMaxNewTokens);

  WaitKPolicy lagging = Make({.wait_k = 1, .max_lag_words = 2});
  std::vector<int32_t> endless(40, Id("\u0120D"));
  Drive(lagging, endless, 1);
  EXPECT_EQ(lagging.done_reason(), DoneReason::kMaxLag);
  EXPECT_EQ(lagging.delays().size(), 4u);  // source words (1) + 2, then one more ends it
}

// Greedy output and delays depend only on the words, never on when they arrived.
TEST_F(PolicyTest, OutputIsIndependentOfArrivalTiming) {
  std::mt19937 rng(21);
  const std::vector<int32_t> pool = {Id("A"),  Id("\u0120B"), Id("\u0120C"), Id("Hel"),
                                     Id("lo"), ',',           '.',           'x'};
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> target;
    for (int i = 0, n = 1 + rng() % 12; i < n; ++i) target.push_back(pool[rng() % pool.size()]);
    const int words = static_cast<int>(rng() % 6);
    const PolicyConfig config{.wait_k = 1 + static_cast<int>(rng() % 4),
                              .max_write_tokens = 1 + static_cast<int>(rng() % 5)};
    WaitKPolicy offline = Make(config);
    Drive(offline, target, words);
    std::vector<int> arrivals;
    int t = 0;
    for (int i = 0; i <= words; ++i) arrivals.push_back(t += rng() % 7);
    WaitKPolicy live = Make(config);
    Drive(live, target, words, arrivals);
    ASSERT_EQ(live.output(), offline.output()) << "trial " << trial;
    ASSERT_EQ(live.delays(), offline.delays()) << "trial " << trial;
    ASSERT_EQ(live.done_reason(), offline.done_reason());
  }
}

}  // namespace
}  // namespace gpeserve::policy
