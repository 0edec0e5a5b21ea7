// gpe score: corpus BLEU of a hypothesis file against a reference file, as sacreBLEU prints it.
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/eval/bleu.h"
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

}  // namespace

int ScoreCommand(int argc, char** argv, int first) {
  Args args("gpe score --hyp FILE --ref FILE [--json]",
            "Corpus BLEU of plain-text files (one segment per line) with sacreBLEU's defaults:\n"
            "13a tokenization, mixed case, exponential smoothing. Prints the score and the\n"
            "signature of the sacreBLEU version it reproduces.");
  args.AddString("hyp", "FILE", "system output, one segment per line");
  args.AddString("ref", "FILE", "reference, one segment per line");
  args.AddBool("json", "print one JSON object instead of text");
  bool help = false;
  if (absl::Status s = args.Parse(argc, argv, first, &help); !s.ok()) {
    std::cerr << "gpe: " << s.message() << "\n\n" << args.Help();
    return 2;
  }
  if (help) {
    std::cout << args.Help();
    return 0;
  }
  if (!args.Get("hyp") || !args.Get("ref")) {
    std::cerr << "gpe: --hyp and --ref are required\n\n" << args.Help();
    return 2;
  }
  std::vector<std::string> hyps, refs;
  for (const auto& [path, lines] :
       {std::pair{*args.Get("hyp"), &hyps}, std::pair{*args.Get("ref"), &refs}}) {
    if (!ReadLines(path, lines)) {
      std::cerr << "gpe: " << path << ": cannot open file\n";
      return 1;
    }
  }
  if (hyps.size() != refs.size()) {
    std::cerr << "gpe: " << *args.Get("hyp") << " has " << hyps.size() << " lines but "
              << *args.Get("ref") << " has " << refs.size() << "\n";
    return 1;
  }
  const eval::BleuScore bleu = eval::CorpusBleu(hyps, refs);
  if (args.GetBool("json")) {
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
