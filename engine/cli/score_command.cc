// gpe score: corpus BLEU of a hypothesis file against a reference file, as sacreBLEU prints it;
// or, with --latency, AL and LAAL of delay lists (docs/GPE.md section 6).
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "engine/cli/commands.h"
#include "engine/eval/bleu.h"
#include "engine/eval/latency.h"
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

// One JSON object per line: {"delays": [...], "source_length": X, "target_length": Y}. Prints
// {"AL": .., "LAAL": ..} per line, then the means over the lines.
int ScoreLatency(const std::string& path, bool json) {
  std::vector<std::string> lines;
  if (!ReadLines(path, &lines)) {
    std::cerr << "gpe: " << path << ": cannot open file\n";
    return 1;
  }
  double al_sum = 0, laal_sum = 0;
  int64_t count = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find_first_not_of(" \t") == std::string::npos) continue;
    const auto where = [&] { return path + ":" + std::to_string(i + 1) + ": "; };
    nlohmann::json row = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    if (!row.is_object() || !row.contains("delays") || !row["delays"].is_array() ||
        !row.contains("source_length") || !row["source_length"].is_number() ||
        !row.contains("target_length") || !row["target_length"].is_number()) {
      std::cerr << "gpe: " << where()
                << "expected {\"delays\": [numbers], \"source_length\": number, "
                   "\"target_length\": number}\n";
      return 1;
    }
    std::vector<double> delays;
    for (const auto& d : row["delays"]) {
      if (!d.is_number()) {
        std::cerr << "gpe: " << where() << "delays must be numbers\n";
        return 1;
      }
      delays.push_back(d.get<double>());
    }
    const double x = row["source_length"].get<double>();
    const double y = row["target_length"].get<double>();
    const double al = eval::AverageLagging(delays, x, y);
    const double laal = eval::LengthAdaptiveAverageLagging(delays, x, y);
    al_sum += al;
    laal_sum += laal;
    ++count;
    if (json) std::cout << nlohmann::json{{"AL", al}, {"LAAL", laal}}.dump() << "\n";
  }
  const double n = count > 0 ? static_cast<double>(count) : 1.0;
  if (json) {
    std::cout << nlohmann::json{{"mean_AL", al_sum / n},
                                {"mean_LAAL", laal_sum / n},
                                {"sentences", count}}
                     .dump()
              << "\n";
  } else {
    std::cout << "AL = " << al_sum / n << "  LAAL = " << laal_sum / n << "  (" << count
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
      "words). --json prints each sentence's scores and then the means.");
  std::optional<std::string> hyp_path, ref_path, latency_path;
  bool json = false;
  flags.Add("hyp", "FILE", "system output, one segment per line", &hyp_path);
  flags.Add("ref", "FILE", "reference, one segment per line", &ref_path);
  flags.Add("latency", "FILE", "score delays instead of BLEU (JSON lines, see above)",
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
