// gpe score: corpus BLEU of a hypothesis file against a reference file, as sacreBLEU prints it;
// or, with --latency, AL and LAAL of delay lists (docs/GPE.md section 6).
#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/cli/commands.h"
#include "engine/eval/bleu.h"
#include "engine/eval/latency.h"
#include "engine/eval/report.h"
#include "engine/eval/words.h"
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

// A gpe-client --log file (lines with a "kind"; docs/server.md): per sentence session, and per
// segment of a long-form one, ideal AL/LAAL from the server's delays (source units) and
// computation-aware AL/LAAL in milliseconds from the client's receipt of each completed word
// against the source as the client sent it (one word every 1000 / words_per_second ms from the
// session's start; all at once: at 0).
struct Scored {
  int64_t session = 0;
  std::optional<int64_t> segment;
  double al = 0, laal = 0, al_ms = 0, laal_ms = 0;
};

class StepLogScorer {
 public:
  // One line of the log; an error names what is wrong.
  std::optional<std::string> Add(const nlohmann::json& line) {
    if (!line.contains("session") || !line["session"].is_number_integer()) {
      return "a log line needs an integer \"session\"";
    }
    const int64_t id = line["session"].get<int64_t>();
    const std::string kind = line["kind"].get<std::string>();
    Session& s = sessions_[id];
    if (kind == "start") {
      s.started = true;
      s.words = line.value("source_words", int64_t{0});
      const double wps = line.value("words_per_second", 0.0);
      s.unit_ms = wps > 0 ? 1000.0 / wps : 0.0;
      s.token_split = line.value("split", std::string("word")) == "token";
      return std::nullopt;
    }
    if (!s.started) return "session " + std::to_string(id) + " has no \"start\" line before it";
    const double at = line.value("client_elapsed_ms", 0.0);
    if (kind == "delta") {
      if (line.value("word_complete", false)) {
        s.word_ms[line.value("segment", int64_t{0})].push_back(at);
      }
    } else if (kind == "segment") {
      const int64_t index = line.value("segment", int64_t{0});
      const double offset = static_cast<double>(line.value("first_word", int64_t{0})) * s.unit_ms;
      Score(id, index, line, static_cast<double>(line.value("source_units", int64_t{0})),
            s.word_ms[index], at, offset, s.unit_ms);
      s.word_ms.erase(index);
    } else if (kind == "done") {
      if (line.value("segments", int64_t{0}) == 0) {  // a sentence session
        const double x = s.token_split ? static_cast<double>(line.value("source_units", int64_t{0}))
                                       : static_cast<double>(s.words + 1);
        Score(id, std::nullopt, line, x, s.word_ms[0], at, 0, s.unit_ms);
      }
    }
    return std::nullopt;  // waiting, error and unknown kinds carry no delays
  }
  const std::vector<Scored>& scored() const { return scored_; }

 private:
  struct Session {
    bool started = false;
    int64_t words = 0;
    double unit_ms = 0;
    bool token_split = false;
    std::map<int64_t, std::vector<double>> word_ms;  // per segment: receipt of completed words
  };

  void Score(int64_t id, std::optional<int64_t> segment, const nlohmann::json& line, double x,
             const std::vector<double>& word_ms, double end_ms, double offset_ms, double unit_ms) {
    std::vector<double> delays;
    for (const auto& d : line.value("delays", nlohmann::json::array())) {
      delays.push_back(d.get<double>());
    }
    const double y =
        static_cast<double>(eval::SplitWords(line.value("text", std::string())).size());
    // A word the end of the target completed has no word_complete delta: it ends with the line.
    std::vector<double> delays_ms;
    for (size_t t = 0; t < delays.size(); ++t) {
      delays_ms.push_back((t < word_ms.size() ? word_ms[t] : end_ms) - offset_ms);
    }
    const double y_laal = std::max(y, static_cast<double>(delays.size()));
    scored_.push_back({.session = id,
                       .segment = segment,
                       .al = eval::AverageLagging(delays, x, y),
                       .laal = eval::LengthAdaptiveAverageLagging(delays, x, y),
                       .al_ms = eval::ComputationAwareLagging(delays_ms, x, y, unit_ms),
                       .laal_ms = eval::ComputationAwareLagging(delays_ms, x, y_laal, unit_ms)});
  }

  std::map<int64_t, Session> sessions_;
  std::vector<Scored> scored_;
};

int ScoreStepLog(const std::string& path, const std::vector<std::string>& lines, bool json) {
  StepLogScorer scorer;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find_first_not_of(" \t") == std::string::npos) continue;
    nlohmann::json row = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    std::optional<std::string> error;
    if (!row.is_object() || !row.contains("kind") || !row["kind"].is_string()) {
      error = "expected a JSON object with a \"kind\" (a gpe-client --log line)";
    } else {
      try {
        error = scorer.Add(row);
      } catch (const nlohmann::json::exception& e) {
        error = std::string("a field has the wrong type: ") + e.what();
      }
    }
    if (error) {
      std::cerr << "gpe: " << path << ":" << i + 1 << ": " << *error << "\n";
      return 1;
    }
  }
  Scored mean;
  for (const Scored& s : scorer.scored()) {
    mean.al += s.al;
    mean.laal += s.laal;
    mean.al_ms += s.al_ms;
    mean.laal_ms += s.laal_ms;
    if (json) {
      nlohmann::json j = {{"session", s.session},
                          {"AL", s.al},
                          {"LAAL", s.laal},
                          {"AL_ms", s.al_ms},
                          {"LAAL_ms", s.laal_ms}};
      if (s.segment) j["segment"] = *s.segment;
      std::cout << j.dump() << "\n";
    }
  }
  const size_t count = scorer.scored().size();
  const double n = count > 0 ? static_cast<double>(count) : 1.0;
  if (json) {
    std::cout << nlohmann::json{{"mean_AL", mean.al / n},
                                {"mean_LAAL", mean.laal / n},
                                {"mean_AL_ms", mean.al_ms / n},
                                {"mean_LAAL_ms", mean.laal_ms / n},
                                {"scored", count}}
                     .dump()
              << "\n";
  } else {
    std::cout << "AL = " << mean.al / n << "  LAAL = " << mean.laal / n
              << "  (source units, ideal)\n"
              << "AL = " << mean.al_ms / n << " ms  LAAL = " << mean.laal_ms / n
              << " ms  (computation-aware, the client's clock)\n"
              << "(" << count << " sentences or segments)\n";
  }
  return 0;
}

// One JSON object per line: {"delays": [...], "source_length": X, "target_length": Y}. Prints
// {"AL": .., "LAAL": ..} per line, then the means over the lines.
int ScoreLatency(const std::string& path, bool json) {
  std::vector<std::string> lines;
  if (!ReadLines(path, &lines)) {
    std::cerr << "gpe: " << path << ": cannot open file\n";
    return 1;
  }
  // A gpe-client --log file: its lines have a "kind".
  for (const std::string& line : lines) {
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const nlohmann::json first = nlohmann::json::parse(line, nullptr, false);
    if (first.is_object() && first.contains("kind")) return ScoreStepLog(path, lines, json);
    break;
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
