// gpe: offline tools on the gpeserve engine, without a server.
#include <cstdio>
#include <cstring>
#include <string_view>

#include "engine/cli/commands.h"

namespace {

constexpr char kUsage[] =
    "usage: gpe COMMAND [options]   (gpe COMMAND --help for a command's options)\n"
    "\n"
    "commands:\n"
    "  tokenize     JSON strings in (one per line), {\"ids\":[...]} out\n"
    "  detokenize   JSON id lists in (one per line), {\"text\":\"...\"} out\n"
    "  train-tokenizer  learn a byte-level BPE vocabulary from a corpus\n"
    "  make-model   write a random-weight Hugging Face model folder\n"
    "  default-model  write the built-in English-German model as a model folder\n"
    "  make-corpus  write the project's English-German parallel corpus (JSON)\n"
    "  train        fine-tune a model folder on a parallel corpus\n"
    "  logits       dump a model's logits for given tokens and positions (.npy)\n"
    "  bench-forward  time decode and prefill against the memory roofline\n"
    "  bench-stream   cost per read as the source grows: gpe vs reencode\n"
    "  bench          engine throughput and latency as concurrent sessions grow\n"
    "  score        corpus BLEU of a hypothesis file (sacreBLEU defaults)\n"
    "  eval         run a data set through streaming sessions: BLEU, AL, LAAL\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string_view command = argv[1];
  if (command == "tokenize") return gpeserve::cli::TokenizeCommand(argc, argv, 2);
  if (command == "detokenize") return gpeserve::cli::DetokenizeCommand(argc, argv, 2);
  if (command == "train-tokenizer") return gpeserve::cli::TrainTokenizerCommand(argc, argv, 2);
  if (command == "make-model") return gpeserve::cli::MakeModelCommand(argc, argv, 2);
  if (command == "default-model") return gpeserve::cli::DefaultModelCommand(argc, argv, 2);
  if (command == "make-corpus") return gpeserve::cli::MakeCorpusCommand(argc, argv, 2);
  if (command == "train") return gpeserve::cli::TrainCommand(argc, argv, 2);
  if (command == "logits") return gpeserve::cli::LogitsCommand(argc, argv, 2);
  if (command == "bench-forward") return gpeserve::cli::BenchForwardCommand(argc, argv, 2);
  if (command == "bench-stream") return gpeserve::cli::BenchStreamCommand(argc, argv, 2);
  if (command == "bench") return gpeserve::cli::BenchCommand(argc, argv, 2);
  if (command == "score") return gpeserve::cli::ScoreCommand(argc, argv, 2);
  if (command == "eval") return gpeserve::cli::EvalCommand(argc, argv, 2);
  std::fprintf(stderr, "gpe: unknown command '%s'\n\n%s", argv[1], kUsage);
  return 2;
}
