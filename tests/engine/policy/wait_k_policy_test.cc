#include "engine/policy/wait_k_policy.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
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
  // Source units read (1 word + the end segment) + 2, then one more ends it.
  EXPECT_EQ(lagging.delays().size(), 5u);
}

// The default limit of 100 words beyond the source units: a 3-word source (4 units with the
// end) ends after 105 completed words, not one earlier.
TEST_F(PolicyTest, LagLimitCountsTheEndSegment) {
  WaitKPolicy p = Make({.wait_k = 1});
  Drive(p, std::vector<int32_t>(300, Id("\u0120D")), 3);
  EXPECT_EQ(p.done_reason(), DoneReason::kMaxLag);
  EXPECT_EQ(p.units_read(), 4);
  EXPECT_EQ(p.delays().size(), 105u);
  EXPECT_EQ(p.output().size(), 106u);  // the first token after the last read starts no word
}

// An end-of-sequence id that does not end the turn (not the profile's end string, e.g.
// <|endoftext|> or a plain token a config lists) ends the target without a delay; one that
// ends the turn completes the unfinished word.
TEST_F(PolicyTest, OnlyAnEndOfTurnTokenRecordsADelay) {
  const int32_t plain_eos = 'x';
  for (const bool turn_end : {true, false}) {
    WaitKPolicy p(PolicyConfig{.wait_k = 1}, *tokenizer_, kHeader, {kEos, plain_eos},
                  "<|im_end|>\n");
    p.AddSourceUnit();
    p.AddSourceUnit();
    p.OnRead();
    p.OnRead();
    EXPECT_TRUE(p.OnToken(Id("A")).emitted);
    p.OnToken(turn_end ? kEos : plain_eos);
    EXPECT_EQ(p.done_reason(), DoneReason::kEndOfSequence);
    EXPECT_EQ(p.output(), std::vector<int32_t>{Id("A")});
    EXPECT_EQ(p.delays(), turn_end ? std::vector<int64_t>{1} : std::vector<int64_t>{})
        << "turn end " << turn_end;
  }
}

// ---- Compat reference (docs/GPE.md 8): each rule against the method, worked by hand ----

PolicyConfig Reference(PolicyConfig config) {
  config.compat = Compat::kReference;
  return config;
}

// Rule 2: after a write that ended on punctuation, rule a looks at the punctuation and the
// next token together (", B" has a space after its first character): " B" is discarded, ","
// rolled back, one more unit read, and " B" written again. The method writes " B" at once.
TEST_F(PolicyTest, ReferenceDiscardsTheWordAfterPunctuation) {
  const std::vector<int32_t> target = {Id("A"), ',', Id("\u0120B")};
  WaitKPolicy method = Make({.wait_k = 1});
  EXPECT_EQ(Drive(method, target, 3), "R0 R1 W3 W1 R2 W1 W1");
  EXPECT_EQ(method.delays(), (std::vector<int64_t>{1, 2}));

  WaitKPolicy p = Make(Reference({.wait_k = 1}));
  // W3 header -> A; W1 A -> "," (rule b, delay 1); R2; W1 "," -> " B" (rule a over "A, B":
  // discarded, delay 2, "," rolled back); R3; W1 "," -> " B" (kept: the list restarted);
  // W1 " B" -> end of turn, no delay: the reference code looks for its end string untrimmed,
  // "<|im_end|>\n", which the token's text "<|im_end|>" does not contain.
  EXPECT_EQ(Drive(p, target, 3), "R0 R1 W3 W1 R2 W1 R3 W1 W1");
  EXPECT_EQ(p.output(), target);
  EXPECT_EQ(p.delays(), (std::vector<int64_t>{1, 2}));
}

// Rule 2, the other half: a single token with a space inside stops the write (a delay) but is
// kept, since there is no token before it in the list to roll back to.
TEST_F(PolicyTest, ReferenceKeepsALoneTokenThatStartsAWord) {
  auto tok = tokenizer::testing::Build(tokenizer::testing::ByteLevelJson(
      {"A", "\u0120B\u0120C"}, {},
      nlohmann::json::array({tokenizer::testing::Added(kEos, "<|im_end|>", true)})));
  WaitKPolicy p(Reference({.wait_k = 1}), *tok, kHeader, {kEos}, "<|im_end|>\n");
  p.AddSourceUnit();
  p.AddSourceUnit();
  p.OnRead();
  p.OnRead();
  const auto outcome = p.OnToken(*tok->TokenToId("\u0120B\u0120C"));
  EXPECT_TRUE(outcome.emitted);
  EXPECT_TRUE(outcome.word_complete);
  EXPECT_FALSE(outcome.kv_rollback);
  EXPECT_EQ(p.delays(), std::vector<int64_t>{1});
  EXPECT_EQ(p.Next().step, Step::kRead);
}

// The end of turn in the reference code: a delay when the token's text contains the profile's
// end string exactly as given. With "<|im_end|>\n" (ChatML, as the profiles hold it) no token
// does, so it records none there; with "<|im_end|>" it does. The method trims the end string
// and records one for the unfinished word either way.
TEST_F(PolicyTest, ReferenceEndOfTurnTestsTheEndStringUntrimmed) {
  for (const std::string end : {"<|im_end|>\n", "<|im_end|>"}) {
    for (const Compat compat : {Compat::kNone, Compat::kReference}) {
      WaitKPolicy p(PolicyConfig{.wait_k = 1, .compat = compat}, *tokenizer_, kHeader, {kEos}, end);
      p.AddSourceUnit();
      p.EndSource();
      for (int i = 0; i < 3; ++i) p.OnRead();  // prefix, the word, the end
      p.OnToken(Id("A"));
      p.OnToken(kEos);
      const bool delay = compat == Compat::kNone || end == "<|im_end|>";
      EXPECT_EQ(p.delays(), delay ? std::vector<int64_t>{2} : std::vector<int64_t>{})
          << "end " << absl::CEscape(end) << " compat " << static_cast<int>(compat);
    }
  }
}

// Rule 3: "He works." at k = 5: the counter starts at 5 although the source has 3 units, so
// every delay is 5 (the method records 3). Rule 2 makes " B" a discard and a re-write here too.
TEST_F(PolicyTest, ReferenceCounterStartsAtKOnAShortSource) {
  const std::vector<int32_t> target = {Id("A"), Id("\u0120B"), '.'};
  WaitKPolicy p = Make(Reference({.wait_k = 5}));
  // W3 -> A; W1 A -> " B" (discarded, delay 5); W1 A -> " B"; W1 -> "." (delay 5); W1 "." ->
  // end of turn (no delay: the end string untrimmed is in no token).
  EXPECT_EQ(Drive(p, target, 2), "R0 R1 R2 R3 W3 W1 W1 W1 W1");
  EXPECT_EQ(p.output(), target);
  EXPECT_EQ(p.delays(), (std::vector<int64_t>{5, 5}));
  EXPECT_EQ(p.units_read(), 3);
}

// Rule 4: the cap counts tokens since the last read, so once the source is complete every
// token after the cap stops the write and records a delay. The method's cap counts tokens of
// the write and records nothing.
TEST_F(PolicyTest, ReferenceCapCountsSinceTheLastRead) {
  const std::vector<int32_t> target = {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'};
  WaitKPolicy method = Make({.wait_k = 1, .max_write_tokens = 3});
  EXPECT_EQ(Drive(method, target, 1), "R0 R1 W3 W1 W1 R2 W1 W1 W1 W1 W1 W1");
  EXPECT_EQ(method.delays(), std::vector<int64_t>{2});

  WaitKPolicy p = Make(Reference({.wait_k = 1, .max_write_tokens = 3}));
  // a, b, c (3rd since the read: delay 1), R2; d, e, f (delay 2), then g, h and the end of
  // turn each past the cap (delay 2 each).
  EXPECT_EQ(Drive(p, target, 1), "R0 R1 W3 W1 W1 R2 W1 W1 W1 W1 W1 W1");
  EXPECT_EQ(p.output(), target);
  EXPECT_EQ(p.delays(), (std::vector<int64_t>{1, 2, 2, 2, 2}));
}

// In the reference code an end-of-sequence token is a stop like any other: past the cap it
// records a delay even when it does not end the turn (the method records none for it).
TEST_F(PolicyTest, ReferenceEndOfSequencePastTheCapRecordsADelay) {
  const int32_t plain_eos = 'x';
  for (const Compat compat : {Compat::kNone, Compat::kReference}) {
    WaitKPolicy p(PolicyConfig{.wait_k = 1, .max_write_tokens = 2, .compat = compat}, *tokenizer_,
                  kHeader, {kEos, plain_eos}, "<|im_end|>\n");
    p.AddSourceUnit();
    p.EndSource();
    for (int i = 0; i < 3; ++i) p.OnRead();  // prefix, the word, the end
    p.OnToken('a');
    p.OnToken('b');  // the cap: a delay in the reference code
    p.OnToken(plain_eos);
    EXPECT_EQ(p.done_reason(), DoneReason::kEndOfSequence);
    EXPECT_EQ(p.delays(),
              compat == Compat::kReference ? (std::vector<int64_t>{2, 2}) : std::vector<int64_t>{});
  }
}

// Rule 5: with max_lag_words = 1 and one word (2 units), the limit is checked at every stop
// against the units read after that stop's read; the stop that crosses it is a discard, and
// the discarded token stays in the output.
TEST_F(PolicyTest, ReferenceLagLimitKeepsTheDiscardedToken) {
  WaitKPolicy p = Make(Reference({.wait_k = 1, .max_lag_words = 1}));
  // W3 -> " D"; W1 -> " D" (discarded, delay 1, 1 - 2 units); R2; then three rounds of
  // (re-write " D", next " D" discarded): delays 2, 2, 2 -> 4 - 2 > 1 ends it on the third.
  EXPECT_EQ(Drive(p, std::vector<int32_t>(40, Id("\u0120D")), 1),
            "R0 R1 W3 W1 R2 W1 W1 W1 W1 W1 W1");
  EXPECT_EQ(p.done_reason(), DoneReason::kMaxLag);
  EXPECT_EQ(p.delays(), (std::vector<int64_t>{1, 2, 2, 2}));
  EXPECT_EQ(p.output().size(), 5u);
}

TEST_F(PolicyTest, ReferenceMarksTheHeaderWrite) {
  WaitKPolicy p = Make(Reference({.wait_k = 1}));
  p.AddSourceUnit();
  p.OnRead();
  p.OnRead();
  const auto first = p.Next();
  EXPECT_TRUE(first.header);
  EXPECT_EQ(first.feed, kHeader);
  p.OnToken(Id("A"));
  EXPECT_FALSE(p.Next().header);
  EXPECT_EQ(ParseCompat("reference"), Compat::kReference);
  EXPECT_EQ(ParseCompat("none"), Compat::kNone);
  EXPECT_FALSE(ParseCompat("exact").has_value());
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
                              .max_write_tokens = 1 + static_cast<int>(rng() % 5),
                              .compat = trial % 2 == 0 ? Compat::kNone : Compat::kReference};
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
