#include "engine/eval/report.h"

#include <string>

#include "engine/eval/latency.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpeserve::eval {
namespace {

SentenceResult Sentence(std::string output, std::vector<int64_t> delays, double source_units) {
  return {.source = "a b c",
          .reference = "x y z",
          .output = std::move(output),
          .output_ids = {1, 2, 3},
          .delays = std::move(delays),
          .source_units = source_units,
          .source_tokens = 10,
          .forward_tokens = 20,
          .reason = "end_of_sequence"};
}

// The report's means are the per-sentence AL and LAAL of latency.h with |Y| = the output's
// words as SplitWords counts them (tabs and newlines separate words too).
TEST(ReportTest, MeansArePerSentenceLatencyWithSplitWords) {
  Report report;
  const SentenceResult a = Sentence("Ein\tHund bellt.", {2, 3, 4}, 4);
  const SentenceResult b = Sentence("Ja", {5}, 6);
  report.Add(a);
  report.Add(b);
  const double al = (AverageLagging({2, 3, 4}, 4, 3) + AverageLagging({5}, 6, 1)) / 2;
  const double laal =
      (LengthAdaptiveAverageLagging({2, 3, 4}, 4, 3) + LengthAdaptiveAverageLagging({5}, 6, 1)) / 2;
  EXPECT_DOUBLE_EQ(report.MeanAl(), al);
  EXPECT_DOUBLE_EQ(report.MeanLaal(), laal);
  EXPECT_FALSE(report.MeanComputationAwareAl().has_value());
  EXPECT_EQ(report.sentences(), 2u);
  EXPECT_DOUBLE_EQ(report.Bleu().score, CorpusBleu({a.output, b.output}, {"x y z", "x y z"}).score);
}

// Worked by hand: 3 target words over 4 source units arriving every 100 ms, gamma = 3/4.
TEST(ReportTest, ComputationAwareLaggingByHand) {
  // t=0: 150 - 0; t=1: 300 - 133.33; t=2: 420 - 266.67 -> 470 / 3.
  EXPECT_NEAR(ComputationAwareLagging({150, 300, 420}, 4, 3, 100), 470.0 / 3, 1e-9);
  EXPECT_DOUBLE_EQ(ComputationAwareLagging({150, 300, 420}, 4, 3, 0), 290.0);
  EXPECT_EQ(ComputationAwareLagging({}, 4, 3, 100), 0.0);
  Report live(100);
  SentenceResult timed = Sentence("eins zwei drei", {1, 2, 3}, 4);
  timed.delays_ms = std::vector<double>{150, 300, 420};
  live.Add(timed);
  live.Add(Sentence("vier", {2}, 4));  // no timing: counts as 0 in the mean, as before
  EXPECT_TRUE(Report(0).MeanComputationAwareAl().has_value());  // live, even with no sentence
  EXPECT_FALSE(Report().MeanComputationAwareAl().has_value());  // offline
  ASSERT_TRUE(live.MeanComputationAwareAl().has_value());
  EXPECT_NEAR(*live.MeanComputationAwareAl(), 470.0 / 6, 1e-9);
}

TEST(ReportTest, ResultLineIsOneSortedJsonObject) {
  SentenceResult r = Sentence("Hund \xff", {1, 2}, 3);
  std::string line = ResultLine(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const nlohmann::json parsed = nlohmann::json::parse(line);
  EXPECT_EQ(parsed["output"], "Hund \xef\xbf\xbd");  // invalid UTF-8 replaced
  EXPECT_EQ(parsed["delays"], nlohmann::json({1, 2}));
  EXPECT_EQ(parsed["forward_tokens"], 20);
  EXPECT_FALSE(parsed.contains("delays_ms"));
  EXPECT_LT(line.find("\"delays\""), line.find("\"forward_tokens\""));
  r.delays_ms = std::vector<double>{1.5};
  EXPECT_EQ(nlohmann::json::parse(ResultLine(r))["delays_ms"], nlohmann::json({1.5}));
}

TEST(ReportTest, SummaryPrintsWhatItIsAskedFor) {
  Report report;
  report.Add(Sentence("x y z", {1, 2, 3}, 4));
  const std::string offline = report.Summary(
      {.setting = "gpe, k=3, concurrency 1", .seconds = 2, .wall_per_sentence = true});
  EXPECT_EQ(offline.rfind(report.Bleu().ToString() + "\nsignature: ", 0), 0u) << offline;
  EXPECT_NE(offline.find("(source units; 1 sentences, gpe, k=3, concurrency 1)\n"),
            std::string::npos)
      << offline;
  EXPECT_NE(offline.find("per sentence: 10.0 source tokens, 3.0 target tokens, 20.0 forward "
                         "tokens, 2000.0 ms of wall time\n"),
            std::string::npos)
      << offline;
  EXPECT_EQ(offline.find("throughput"), std::string::npos);
  EXPECT_EQ(offline.find("computation-aware"), std::string::npos);
  const std::string live = report.Summary({.setting = "gpe", .seconds = 2, .throughput = true});
  EXPECT_NE(live.find("throughput: 1.5 target tokens/s, 0.50 sentences/s (2.0 s)\n"),
            std::string::npos)
      << live;
}

}  // namespace
}  // namespace gpeserve::eval
