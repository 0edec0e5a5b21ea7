#include "engine/eval/report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "engine/eval/latency.h"
#include "engine/eval/words.h"
#include "nlohmann/json.hpp"

namespace gpeserve::eval {

std::string ResultLine(const SentenceResult& result) {
  nlohmann::json line{{"source", result.source}, {"reference", result.reference},
                      {"output", result.output}, {"output_ids", result.output_ids},
                      {"delays", result.delays}, {"forward_tokens", result.forward_tokens},
                      {"reason", result.reason}};
  if (result.delays_ms) line["delays_ms"] = *result.delays_ms;
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

double ComputationAwareLagging(const std::vector<double>& delays_ms, double source_units,
                               double target_words, double unit_ms) {
  if (delays_ms.empty()) return 0;
  const double gamma = std::max(1.0, target_words) / source_units;
  double sum = 0;
  for (size_t t = 0; t < delays_ms.size(); ++t) sum += delays_ms[t] - t / gamma * unit_ms;
  return sum / static_cast<double>(delays_ms.size());
}

void Report::Add(const SentenceResult& result) {
  const std::vector<double> delays(result.delays.begin(), result.delays.end());
  const double y = static_cast<double>(SplitWords(result.output).size());
  al_ += AverageLagging(delays, result.source_units, y);
  laal_ += LengthAdaptiveAverageLagging(delays, result.source_units, y);
  if (unit_ms_ && result.delays_ms) {
    al_ms_ += ComputationAwareLagging(*result.delays_ms, result.source_units, y, *unit_ms_);
  }
  source_tokens_ += result.source_tokens;
  target_tokens_ += static_cast<int64_t>(result.output_ids.size());
  forward_tokens_ += result.forward_tokens;
  hyps_.push_back(result.output);
  refs_.push_back(result.reference);
}

BleuScore Report::Bleu() const { return CorpusBleu(hyps_, refs_); }

std::optional<double> Report::MeanComputationAwareAl() const {
  if (!unit_ms_) return std::nullopt;
  return al_ms_ / Count();
}

std::string Report::Summary(const SummaryOptions& options) const {
  const double n = Count();
  std::string out = absl::StrFormat(
      "%s\nsignature: %s\nAL = %.3f  LAAL = %.3f  (source units; %d sentences, %s)\n",
      Bleu().ToString(), BleuScore::Signature(), MeanAl(), MeanLaal(), hyps_.size(),
      options.setting);
  if (auto ms = MeanComputationAwareAl()) {
    absl::StrAppendFormat(&out, "computation-aware AL = %.1f ms\n", *ms);
  }
  absl::StrAppendFormat(&out,
                        "per sentence: %.1f source tokens, %.1f target tokens, %.1f forward tokens",
                        source_tokens_ / n, target_tokens_ / n, forward_tokens_ / n);
  if (options.wall_per_sentence) {
    absl::StrAppendFormat(&out, ", %.1f ms of wall time", 1e3 * options.seconds / n);
  }
  out += "\n";
  if (options.throughput) {
    absl::StrAppendFormat(&out, "throughput: %.1f target tokens/s, %.2f sentences/s (%.1f s)\n",
                          target_tokens_ / options.seconds, hyps_.size() / options.seconds,
                          options.seconds);
  }
  return out;
}

Progress::Progress(std::string program, size_t total)
    : program_(std::move(program)), total_(total), tty_(::isatty(STDERR_FILENO)) {}

double Progress::Seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::Update(size_t finished) {
  std::lock_guard<std::mutex> lock(mu_);
  if (tty_) {
    std::fprintf(stderr, "\r[%zu/%zu] %.1f s", finished, total_, Seconds());
  } else if (finished % 10 == 0 || finished == total_) {
    std::fprintf(stderr, "%s: %zu/%zu sentences, %.1f s\n", program_.c_str(), finished, total_,
                 Seconds());
  }
}

double Progress::Finish() {
  const double seconds = Seconds();
  if (tty_) std::fprintf(stderr, "\n");
  return seconds;
}

}  // namespace gpeserve::eval
