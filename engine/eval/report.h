// The evaluation report that `gpe eval` (in-process) and `gpe-client eval` (live, over gRPC)
// share, so that offline and live numbers are computed the same way: per sentence AL and LAAL
// (|Y| = the output's words as SplitWords counts them), the computation-aware AL of live runs,
// corpus BLEU, per-sentence means, the JSON-lines results file, and the progress line.
//
//   Report report;
//   for (...) { SentenceResult r = ...; report.Add(r); if (out) out << ResultLine(r) << "\n"; }
//   std::cout << report.Summary({.setting = "gpe, k=3, concurrency 1", ...});
//
// Thread-safety: Report and ResultLine are not thread-safe (fill from one thread); Progress is.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/eval/bleu.h"

namespace gpeserve::eval {

// What one sentence produced.
struct SentenceResult {
  std::string source;
  std::string reference;
  std::string output;
  std::vector<int32_t> output_ids;
  std::vector<int64_t> delays;  // source units read when each target word was complete
  // Live runs: milliseconds from the session's start to each target word.
  std::optional<std::vector<double>> delays_ms;
  double source_units = 0;  // |X|: source units, the end segment included
  int64_t source_tokens = 0;
  int64_t forward_tokens = 0;
  std::string reason;  // why the session ended (end_of_sequence, ...)
};

// One JSON object on one line (no newline): source, reference, output, output_ids, delays,
// delays_ms (live runs), forward_tokens, reason; keys sorted; invalid UTF-8 replaced.
std::string ResultLine(const SentenceResult& result);

// Computation-aware AL of one sentence in milliseconds: `delays_ms` against a source of
// `source_units` units arriving one every `unit_ms` (0: all at once, at time 0), with
// AL's rate |Y| / |X|; 0 for no delays.
double ComputationAwareLagging(const std::vector<double>& delays_ms, double source_units,
                               double target_words, double unit_ms);

// What the summary prints besides BLEU, AL and LAAL.
struct SummaryOptions {
  std::string setting;             // after "N sentences, " on the AL line, e.g. "gpe, k=3, ..."
  double seconds = 0;              // wall time of the whole run
  bool wall_per_sentence = false;  // "..., X ms of wall time" on the per-sentence line
  bool throughput = false;         // a throughput line (target tokens/s, sentences/s)
};

class Report {
 public:
  // `unit_ms`: live runs, the source pace for the computation-aware AL (0: all source at
  // once); unset: offline, no computation-aware AL.
  explicit Report(std::optional<double> unit_ms = std::nullopt) : unit_ms_(unit_ms) {}

  void Add(const SentenceResult& result);

  size_t sentences() const { return hyps_.size(); }
  BleuScore Bleu() const;
  double MeanAl() const { return al_ / Count(); }
  double MeanLaal() const { return laal_ / Count(); }
  // Live runs: the mean over all sentences (those without delays_ms count 0); offline: nullopt.
  std::optional<double> MeanComputationAwareAl() const;

  // BLEU and its signature, AL and LAAL, the computation-aware AL (when measured), tokens per
  // sentence, and what `options` asks for; one item per line.
  std::string Summary(const SummaryOptions& options) const;

 private:
  double Count() const { return std::max<double>(1, static_cast<double>(hyps_.size())); }

  std::optional<double> unit_ms_;
  std::vector<std::string> hyps_, refs_;
  double al_ = 0, laal_ = 0, al_ms_ = 0;
  int64_t source_tokens_ = 0, target_tokens_ = 0, forward_tokens_ = 0;
};

// Progress on stderr as sentences finish: one updating line on a terminal, otherwise a line
// every 10 sentences and at the end ("<program>: 10/200 sentences, 1.2 s").
class Progress {
 public:
  Progress(std::string program, size_t total);
  // `finished` sentences are done; from any thread.
  void Update(size_t finished);
  // Ends the terminal's updating line; the seconds since construction.
  double Finish();
  double Seconds() const;

 private:
  const std::string program_;
  const size_t total_;
  const bool tty_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mutex mu_;
};

}  // namespace gpeserve::eval
