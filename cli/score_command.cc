// gpe score: corpus BLEU of a hypothesis file against a reference file, as sacreBLEU prints it;
// or, with --latency, AL and LAAL of delay lists (docs/GPE.md section 6).
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/eval/bleu.h"
#include "engine/eval/latency_input.h"
#include "flags/flags.h"
#include "nlohmann/json.hpp"

namespace gpeserve::cli {
namespace {

bool ReadLines(const std::string& path, std::vector<std::string>* lines) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines->push_back(line);
  }
  return true;
}

// Scores `path` (eval::ScoreLatencyInput) and prints the scores: per line or session (--json)
// and the means.
int ScoreLatency(const std::string& path, bool json) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << "gpe: " << path << ": cannot open file\n";
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  const absl::StatusOr<eval::LatencyScores> scored = eval::ScoreLatencyInput(text.str(), path);
  if (!scored.ok()) {
    std::cerr << "gpe: " << scored.status().message() << "\n";
    return 1;
  }
  eval::LatencyScore mean{.al_ms = 0, .laal_ms = 0};
  for (const eval::LatencyScore& s : scored->scores) {
    mean.al += s.al;
    mean.laal += s.laal;
    *mean.al_ms += s.al_ms.value_or(0);
    *mean.laal_ms += s.laal_ms.value_or(0);
    if (!json) continue;
    nlohmann::json j = {{"AL", s.al}, {"LAAL", s.laal}};
    if (scored->step_log) {
      j["session"] = s.session;
      j["AL_ms"] = s.al_ms.value_or(0);
      j["LAAL_ms"] = s.laal_ms.value_or(0);
      if (s.segment) j["segment"] = *s.segment;
    }
    std::cout << j.dump() << "\n";
  }
  const size_t count = scored->scores.size();
  const double n = count > 0 ? static_cast<double>(count) : 1.0;
  if (scored->step_log && json) {
    std::cout << nlohmann::json{{"mean_AL", mean.al / n},
                                {"mean_LAAL", mean.laal / n},
                                {"mean_AL_ms", *mean.al_ms / n},
                                {"mean_LAAL_ms", *mean.laal_ms / n},
                                {"scored", count}}
                     .dump()
              << "\n";
  } else if (scored->step_log) {
    std::cout << "AL = " << mean.al / n << "  LAAL = " << mean.laal / n
              << "  (source units, ideal)\n"
              << "AL = " << *mean.al_ms / n << " ms  LAAL = " << *mean.laal_ms / n
              << " ms  (computation-aware, the client's clock)\n"
              << "(" << count << " sentences or segments)\n";
  } else if (json) {
    std::cout << nlohmann::json{{"mean_AL", mean.al / n},
                                {"mean_LAAL", mean.laal / n},
                                {"sentences", count}}
                     .dump()
              << "\n";
  } else {
    std::cout << "AL = " << mean.al / n << "  LAAL = " << mean.laal / n << "  (" << count
              << " sentences)\n";
  }
  return 0;
}

}  // namespace

int ScoreCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe score --hyp FILE --ref FILE [--json]\n       gpe score --latency FILE [--json]",
      "Corpus BLEU of plain-text files (one segment per line) with sacreBLEU's defaults:\n"
      "13a tokenization, mixed case, exponential smoothing. Prints the score and the\n"
      "signature of the sacreBLEU version it reproduces.\n"
      "With --latency: Average Lagging and Length-Adaptive Average Lagging (SimulEval's\n"
      "definitions) of a JSON-lines file, one sentence per line:\n"
      "  {\"delays\": [1, 2, 4], \"source_length\": 5, \"target_length\": 3}\n"
      "(delays in source units or milliseconds; lengths: |X| = words + 1, |Y| = reference\n"
      "words). --json prints each sentence's scores and then the means.\n"
      "A gpe-client --log FILE.jsonl (lines with a \"kind\") is scored per sentence\n"
      "session and per long-form segment: ideal AL and LAAL (the server's delays, in\n"
      "source units, |Y| = output words) and computation-aware AL and LAAL in ms (each\n"
      "word's receipt by the client against the source as it was sent).");
  std::optional<std::string> hyp_path, ref_path, latency_path;
  bool json = false;
  flags.Add("hyp", "FILE", "system output, one segment per line", &hyp_path);
  flags.Add("ref", "FILE", "reference, one segment per line", &ref_path);
  flags.Add("latency", "FILE",
            "score delays instead of BLEU (JSON lines, or a gpe-client --log; see above)",
            &latency_path);
  flags.Add("json", "print JSON objects instead of text", &json);
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  if (latency_path) {
    if (hyp_path || ref_path) {
      std::cerr << "gpe: --latency does not combine with --hyp/--ref\n\n" << flags.Help();
      return 2;
    }
    return ScoreLatency(*latency_path, json);
  }
  if (!hyp_path || !ref_path) {
    std::cerr << "gpe: --hyp and --ref are required\n\n" << flags.Help();
    return 2;
  }
  std::vector<std::string> hyps, refs;
  for (const auto& [path, lines] : {std::pair{*hyp_path, &hyps}, std::pair{*ref_path, &refs}}) {
    if (!ReadLines(path, lines)) {
      std::cerr << "gpe: " << path << ": cannot open file\n";
      return 1;
    }
  }
  if (hyps.size() != refs.size()) {
    std::cerr << "gpe: " << *hyp_path << " has " << hyps.size() << " lines but " << *ref_path
              << " has " << refs.size() << "\n";
    return 1;
  }
  const eval::BleuScore bleu = eval::CorpusBleu(hyps, refs);
  if (json) {
    std::cout
        << nlohmann::json{{"score", bleu.score},        {"precisions", bleu.precisions},
                          {"bp", bleu.brevity_penalty}, {"sys_len", bleu.sys_len},
                          {"ref_len", bleu.ref_len},    {"counts", bleu.correct},
                          {"totals", bleu.total},       {"signature", eval::BleuScore::Signature()}}
               .dump()
        << "\n";
  } else {
    std::cout << bleu.ToString() << "\nsignature: " << eval::BleuScore::Signature() << "\n";
  }
  return 0;
}

}  // namespace gpeserve::cli
