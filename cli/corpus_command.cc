// gpe make-corpus: the project's English-to-German corpus (engine/train/corpus.h) as a data
// set in the reference evaluation's format.
#include <cstdint>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "cli/commands.h"
#include "engine/eval/dataset.h"
#include "engine/train/corpus.h"
#include "flags/flags.h"
#include "nlohmann/json.hpp"

namespace gpeserve::cli {

int MakeCorpusCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe make-corpus --seed N --count N --out FILE.json",
      "Writes a parallel English-German corpus drawn from the project's grammar (cases,\n"
      "genders, adjective endings, numbers, negation, questions, verb-final subordinate\n"
      "clauses, separable verbs) as a JSON array of {\"en\": ..., \"de\": ...}. The same\n"
      "seed gives the same corpus; use different seeds for train, dev and test, and\n"
      "--exclude train.json for a held-out split: its sentences are then distinct and\n"
      "none of them is in the training file (short sentences recur across seeds).");
  uint64_t seed = 1;
  int count = 1000;
  std::optional<std::string> exclude;
  std::string out_path = "-";
  flags.Add("seed", "N", "random seed", &seed);
  flags.Add("count", "N", "sentences", &count, {.min = 1});
  flags.Add("exclude", "FILE.json", "leave out sentences whose English is in this data set",
            &exclude);
  flags.Add("out", "FILE", "output file ('-': stdout)", &out_path);
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  std::vector<train::Translation> corpus;
  if (exclude) {
    const std::string& path = *exclude;
    auto excluded = eval::LoadDataset(path, "en", "de");
    if (!excluded.ok()) {
      std::cerr << "gpe: " << excluded.status().message() << "\n";
      return 1;
    }
    absl::flat_hash_set<std::string> seen;
    for (const eval::Example& item : *excluded) seen.insert(item.source);
    // The corpus of a seed is one random sequence: a longer draw extends a shorter one, so the
    // result depends on the seed and the excluded set only.
    for (int64_t drawn = 2 * static_cast<int64_t>(count);
         corpus.size() < static_cast<size_t>(count); drawn *= 2) {
      if (drawn > (int64_t{1} << 24)) {
        std::cerr << "gpe: cannot draw " << count << " sentences outside " << path << "\n";
        return 1;
      }
      corpus.clear();
      absl::flat_hash_set<std::string> taken = seen;
      for (train::Translation& t : train::GenerateCorpus(seed, static_cast<int>(drawn))) {
        if (corpus.size() < static_cast<size_t>(count) && taken.insert(t.en).second) {
          corpus.push_back(std::move(t));
        }
      }
    }
  } else {
    corpus = train::GenerateCorpus(seed, count);
  }
  nlohmann::json data = nlohmann::json::array();
  for (const train::Translation& t : corpus) data.push_back({{"en", t.en}, {"de", t.de}});
  const std::string text = data.dump(1) + "\n";
  if (out_path == "-") {
    std::cout << text;
    return 0;
  }
  std::ofstream out(out_path);
  if (!out || !(out << text)) {
    std::cerr << "gpe: " << out_path << ": cannot write file\n";
    return 1;
  }
  return 0;
}

}  // namespace gpeserve::cli
