// tokenizer_bench: single-thread encode throughput of gpeserve's tokenizer.
//
//   tokenizer_bench --model DIR --input FILE [--repeat N] [--ids-out FILE]
//
// FILE is UTF-8 text. Two workloads are timed: each line encoded on its own (as a server does
// with sentences), and the whole file as one string. Prints one JSON object with bytes, tokens,
// seconds and throughput for both; scripts/bench-tokenizer compares it with Hugging Face.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using gpeserve::tokenizer::Tokenizer;

// Best-of-`repeat` seconds of `fn`, each run starting with an empty word cache (text the
// tokenizer has not seen, as in serving).
template <typename Fn>
double BestSeconds(const Tokenizer& tok, int repeat, Fn fn) {
  double best = 1e30;
  for (int i = 0; i < repeat; ++i) {
    tok.ClearCache();
    const auto start = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, input, ids_out;
  int repeat = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--model")
      model = value();
    else if (arg == "--input")
      input = value();
    else if (arg == "--repeat")
      repeat = std::max(1, std::stoi(value()));
    else if (arg == "--ids-out")
      ids_out = value();
    else {
      std::cerr << "usage: tokenizer_bench --model DIR --input FILE [--repeat N] "
                   "[--ids-out FILE]\n";
      return arg == "--help" ? 0 : 2;
    }
  }
  if (model.empty() || input.empty()) {
    std::cerr << "tokenizer_bench: --model and --input are required (see --help)\n";
    return 2;
  }
  auto tok = Tokenizer::Load(model);
  if (!tok.ok()) {
    std::cerr << "tokenizer_bench: " << tok.status() << "\n";
    return 1;
  }
  std::ifstream in(input, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::vector<std::string> lines;
  std::istringstream lines_in(text);
  for (std::string line; std::getline(lines_in, line);) {
    if (!line.empty()) lines.push_back(line);
  }

  size_t line_tokens = 0, line_bytes = 0;
  std::vector<std::vector<int32_t>> line_ids(lines.size());
  const double line_seconds = BestSeconds(**tok, repeat, [&] {
    line_tokens = line_bytes = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      line_ids[i] = *(*tok)->Encode(lines[i]);
      line_tokens += line_ids[i].size();
      line_bytes += lines[i].size();
    }
  });
  size_t doc_tokens = 0;
  const double doc_seconds =
      BestSeconds(**tok, repeat, [&] { doc_tokens = (*tok)->Encode(text)->size(); });

  if (!ids_out.empty()) {
    std::ofstream out(ids_out);
    for (const auto& ids : line_ids) out << nlohmann::json(ids).dump() << "\n";
  }
  const nlohmann::json result = {{"lines", lines.size()},
                                 {"line_bytes", line_bytes},
                                 {"line_tokens", line_tokens},
                                 {"line_seconds", line_seconds},
                                 {"line_mb_per_s", line_bytes / 1e6 / line_seconds},
                                 {"line_tokens_per_s", line_tokens / line_seconds},
                                 {"doc_bytes", text.size()},
                                 {"doc_tokens", doc_tokens},
                                 {"doc_seconds", doc_seconds},
                                 {"doc_mb_per_s", text.size() / 1e6 / doc_seconds},
                                 {"doc_tokens_per_s", doc_tokens / doc_seconds}};
  std::cout << result.dump() << "\n";
  return 0;
}
