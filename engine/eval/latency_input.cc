#include "engine/eval/latency_input.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "engine/eval/latency.h"
#include "engine/eval/report.h"
#include "engine/eval/words.h"
#include "nlohmann/json.hpp"

namespace gpeserve::eval {
namespace {

// The lines of `text` (a trailing CR dropped), with their numbers from 1; blank ones left out.
std::vector<std::pair<size_t, std::string_view>> Lines(std::string_view text) {
  std::vector<std::pair<size_t, std::string_view>> lines;
  for (size_t number = 1; !text.empty(); ++number) {
    const size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") != std::string_view::npos) lines.emplace_back(number, line);
  }
  return lines;
}

// `line`[key] as an integer (0 when absent): a number that is not one (3e115, 1.5) is an error,
// never a conversion out of range.
int64_t Integer(const nlohmann::json& line, const char* key) {
  const auto it = line.find(key);
  if (it == line.end()) return 0;
  if (!it->is_number_integer()) {
    throw std::invalid_argument(absl::StrCat("\"", key, "\" must be an integer"));
  }
  return it->get<int64_t>();
}

// A gpe-client --log: per sentence session, and per segment of a long-form one, ideal AL/LAAL
// from the server's delays and computation-aware AL/LAAL from the client's receipt of each
// completed word against the source as the client sent it (one word every
// 1000 / words_per_second ms from the session's start; all at once: at 0).
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
      s.words = Integer(line, "source_words");
      const double wps = line.value("words_per_second", 0.0);
      s.unit_ms = wps > 0 ? 1000.0 / wps : 0.0;
      s.token_split = line.value("split", std::string("word")) == "token";
      return std::nullopt;
    }
    if (!s.started) return "session " + std::to_string(id) + " has no \"start\" line before it";
    const double at = line.value("client_elapsed_ms", 0.0);
    if (kind == "delta") {
      if (line.value("word_complete", false)) {
        s.word_ms[Integer(line, "segment")].push_back(at);
      }
    } else if (kind == "segment") {
      const int64_t index = Integer(line, "segment");
      const double offset = static_cast<double>(Integer(line, "first_word")) * s.unit_ms;
      Score(id, index, line, static_cast<double>(Integer(line, "source_units")), s.word_ms[index],
            at, offset, s.unit_ms);
      s.word_ms.erase(index);
    } else if (kind == "done") {
      if (Integer(line, "segments") == 0) {  // a sentence session
        const double x = s.token_split ? static_cast<double>(Integer(line, "source_units"))
                                       : static_cast<double>(s.words) + 1;
        Score(id, std::nullopt, line, x, s.word_ms[0], at, 0, s.unit_ms);
      }
    }
    return std::nullopt;  // waiting, error and unknown kinds carry no delays
  }
  std::vector<LatencyScore>& scored() { return scored_; }

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
    const double y = static_cast<double>(SplitWords(line.value("text", std::string())).size());
    // A word the end of the target completed has no word_complete delta: it ends with the line.
    std::vector<double> delays_ms;
    for (size_t t = 0; t < delays.size(); ++t) {
      delays_ms.push_back((t < word_ms.size() ? word_ms[t] : end_ms) - offset_ms);
    }
    const double y_laal = std::max(y, static_cast<double>(delays.size()));
    scored_.push_back({.session = id,
                       .segment = segment,
                       .al = AverageLagging(delays, x, y),
                       .laal = LengthAdaptiveAverageLagging(delays, x, y),
                       .al_ms = ComputationAwareLagging(delays_ms, x, y, unit_ms),
                       .laal_ms = ComputationAwareLagging(delays_ms, x, y_laal, unit_ms)});
  }

  std::map<int64_t, Session> sessions_;
  std::vector<LatencyScore> scored_;
};

}  // namespace

absl::StatusOr<LatencyScores> ScoreLatencyInput(std::string_view text, const std::string& name) {
  const auto lines = Lines(text);
  LatencyScores out;
  if (!lines.empty()) {
    const nlohmann::json first = nlohmann::json::parse(lines[0].second, nullptr, false);
    out.step_log = first.is_object() && first.contains("kind");
  }
  const auto error = [&name](size_t number, std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(name, ":", number, ": ", std::string(what)));
  };
  if (out.step_log) {
    StepLogScorer scorer;
    for (const auto& [number, line] : lines) {
      const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      std::optional<std::string> problem;
      if (!row.is_object() || !row.contains("kind") || !row["kind"].is_string()) {
        problem = "expected a JSON object with a \"kind\" (a gpe-client --log line)";
      } else {
        try {
          problem = scorer.Add(row);
        } catch (const nlohmann::json::exception& e) {
          problem = std::string("a field has the wrong type: ") + e.what();
        } catch (const std::invalid_argument& e) {
          problem = e.what();
        }
      }
      if (problem) return error(number, *problem);
    }
    out.scores = std::move(scorer.scored());
    return out;
  }
  for (const auto& [number, line] : lines) {
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!row.is_object() || !row.contains("delays") || !row["delays"].is_array() ||
        !row.contains("source_length") || !row["source_length"].is_number() ||
        !row.contains("target_length") || !row["target_length"].is_number()) {
      return error(number,
                   "expected {\"delays\": [numbers], \"source_length\": number, "
                   "\"target_length\": number}");
    }
    std::vector<double> delays;
    for (const auto& d : row["delays"]) {
      if (!d.is_number()) return error(number, "delays must be numbers");
      delays.push_back(d.get<double>());
    }
    const double x = row["source_length"].get<double>();
    const double y = row["target_length"].get<double>();
    out.scores.push_back({.session = static_cast<int64_t>(out.scores.size()),
                          .al = AverageLagging(delays, x, y),
                          .laal = LengthAdaptiveAverageLagging(delays, x, y)});
  }
  return out;
}

}  // namespace gpeserve::eval
