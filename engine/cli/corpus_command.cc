// gpe make-corpus: the project's English-to-German corpus (engine/train/corpus.h) as a data
// set in the reference evaluation's format.
#include <fstream>
#include <iostream>

#include "absl/strings/numbers.h"
#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/train/corpus.h"
#include "nlohmann/json.hpp"

namespace gpeserve::cli {

int MakeCorpusCommand(int argc, char** argv, int first) {
  Args args("gpe make-corpus --seed N --count N --out FILE.json",
            "Writes a parallel English-German corpus drawn from the project's grammar (cases,\n"
            "genders, adjective endings, numbers, negation, questions, verb-final subordinate\n"
            "clauses, separable verbs) as a JSON array of {\"en\": ..., \"de\": ...}. The same\n"
            "seed gives the same corpus; use different seeds for train, dev and test.");
  args.AddString("seed", "N", "random seed", "1");
  args.AddString("count", "N", "sentences", "1000");
  args.AddString("out", "FILE", "output file ('-': stdout)", "-");
  if (auto code = args.ParseOrExit(argc, argv, first)) return *code;
  uint64_t seed = 0;
  int count = 0;
  if (!absl::SimpleAtoi(*args.Get("seed"), &seed) ||
      !absl::SimpleAtoi(*args.Get("count"), &count) || count < 1) {
    std::cerr << "gpe: --seed takes a whole number, --count a positive whole number\n";
    return 2;
  }
  nlohmann::json data = nlohmann::json::array();
  for (const train::Translation& t : train::GenerateCorpus(seed, count)) {
    data.push_back({{"en", t.en}, {"de", t.de}});
  }
  const std::string text = data.dump(1) + "\n";
  if (*args.Get("out") == "-") {
    std::cout << text;
    return 0;
  }
  std::ofstream out(*args.Get("out"));
  if (!out || !(out << text)) {
    std::cerr << "gpe: " << *args.Get("out") << ": cannot write file\n";
    return 1;
  }
  return 0;
}

}  // namespace gpeserve::cli
