// What `gpe score --latency` reads (eval::ScoreLatencyInput): delay lists and gpe-client step
// logs scored as the latency functions score them by hand; bad lines refused with their number,
// among them the fuzzer's finding (an integer field holding 3e115 was converted out of range).
#include "engine/eval/latency_input.h"

#include <string>

#include "engine/eval/latency.h"
#include "engine/eval/report.h"
#include "gtest/gtest.h"

namespace gpeserve::eval {
namespace {

TEST(LatencyInputTest, DelayLists) {
  const auto scored = ScoreLatencyInput(
      "{\"delays\": [1, 2, 4], \"source_length\": 5, \"target_length\": 3}\n\n"
      "{\"delays\": [3, 3], \"source_length\": 3, \"target_length\": 4}\r\n",
      "d.jsonl");
  ASSERT_TRUE(scored.ok()) << scored.status();
  EXPECT_FALSE(scored->step_log);
  ASSERT_EQ(scored->scores.size(), 2u);
  EXPECT_DOUBLE_EQ(scored->scores[0].al, AverageLagging({1, 2, 4}, 5, 3));
  EXPECT_DOUBLE_EQ(scored->scores[1].laal, LengthAdaptiveAverageLagging({3, 3}, 3, 4));
  EXPECT_FALSE(scored->scores[0].al_ms.has_value());
}

TEST(LatencyInputTest, StepLog) {
  // Two words at 10 words/s; the first target word completes at 120 ms, the second (completed
  // by the end of the target) with the done line at 150 ms.
  const std::string log =
      "{\"kind\":\"start\",\"session\":0,\"source_words\":2,\"words_per_second\":10,"
      "\"split\":\"word\"}\n"
      "{\"kind\":\"delta\",\"session\":0,\"segment\":0,\"text\":\"Hallo\",\"word_complete\":false,"
      "\"client_elapsed_ms\":100}\n"
      "{\"kind\":\"delta\",\"session\":0,\"segment\":0,\"text\":\" Welt\",\"word_complete\":true,"
      "\"client_elapsed_ms\":120}\n"
      "{\"kind\":\"waiting\",\"session\":0,\"client_elapsed_ms\":121}\n"
      "{\"kind\":\"done\",\"session\":0,\"text\":\"Hallo Welt.\",\"delays\":[2,3],"
      "\"segments\":0,\"client_elapsed_ms\":150}\n";
  const auto scored = ScoreLatencyInput(log, "steps.jsonl");
  ASSERT_TRUE(scored.ok()) << scored.status();
  EXPECT_TRUE(scored->step_log);
  ASSERT_EQ(scored->scores.size(), 1u);
  EXPECT_DOUBLE_EQ(scored->scores[0].al, AverageLagging({2, 3}, 3, 2));
  EXPECT_DOUBLE_EQ(*scored->scores[0].al_ms, ComputationAwareLagging({120, 150}, 3, 2, 100));
}

TEST(LatencyInputTest, BadLinesNamed) {
  struct Case {
    std::string text, want;
  };
  for (const Case& c : std::vector<Case>{
           {"{\"delays\": [1, \"x\"], \"source_length\": 5, \"target_length\": 3}",
            "in.jsonl:1: delays must be numbers"},
           {"\n{\"delays\": 1}", "in.jsonl:2: expected {\"delays\""},
           {"{\"kind\":\"delta\",\"session\":0}", "in.jsonl:1: session 0 has no \"start\""},
           {"{\"kind\":\"start\",\"session\":\"a\"}", "in.jsonl:1: a log line needs an integer"},
           // The fuzzer's finding: an integer field out of range is refused, not converted.
           {"{\"kind\":\"start\",\"session\":0,\"source_words\":3e115}",
            "in.jsonl:1: \"source_words\" must be an integer"},
           {"{\"kind\":\"start\",\"session\":0}\n{\"kind\":\"done\",\"session\":0,\"segments\":1."
            "5}",
            "in.jsonl:2: \"segments\" must be an integer"},
       }) {
    const auto scored = ScoreLatencyInput(c.text, "in.jsonl");
    ASSERT_FALSE(scored.ok()) << c.text;
    EXPECT_EQ(std::string(scored.status().message()).rfind(c.want, 0), 0u)
        << scored.status().message();
  }
}

}  // namespace
}  // namespace gpeserve::eval
