// gpe: offline tools on the gpeserve engine, without a server.
//
// This binary links no libtorch, so that the commands that need no model (tokenize, score, ...)
// start in milliseconds; the model commands live in gpe-engine, installed next to it, which
// `gpe` runs in its own place (exec) with the same arguments.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include "cli/commands.h"

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
    "  quantize     write an int8 copy of a model folder (a quarter of fp32's bytes)\n"
    "  make-adapter   write a random-weight PEFT LoRA adapter folder for a model\n"
    "  merge-adapter  fold a LoRA adapter into its base model (a Hugging Face folder)\n"
    "  make-corpus  write the project's English-German parallel corpus (JSON)\n"
    "  train        fine-tune a model folder on a parallel corpus\n"
    "  logits       dump a model's logits for given tokens and positions (.npy)\n"
    "  bench-forward  time decode and prefill against the memory roofline\n"
    "  bench-stream   cost per read as the source grows: gpe vs reencode\n"
    "  bench-long     long-form sessions over a long stream: step time and memory stay flat\n"
    "  bench          engine throughput and latency as concurrent sessions grow\n"
    "  score        corpus BLEU of a hypothesis file (sacreBLEU defaults)\n"
    "  eval         run a data set through streaming sessions: BLEU, AL, LAAL\n";

// Runs gpe-engine (next to this binary) with the same arguments; returns only on failure.
int RunEngineCommand(char** argv) {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  const std::filesystem::path engine =
      (error ? std::filesystem::path(argv[0]) : self).parent_path() / "gpe-engine";
  ::execv(engine.c_str(), argv);
  std::fprintf(stderr,
               "gpe: '%s' runs the model in gpe-engine, which should be installed next to gpe "
               "(%s): %s\n",
               argv[1], engine.c_str(), std::strerror(errno));
  return 1;
}

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
  if (command == "make-corpus") return gpeserve::cli::MakeCorpusCommand(argc, argv, 2);
  if (command == "score") return gpeserve::cli::ScoreCommand(argc, argv, 2);
  if (gpeserve::cli::IsEngineCommand(command)) return RunEngineCommand(argv);
  std::fprintf(stderr, "gpe: unknown command '%s'\n\n%s", argv[1], kUsage);
  return 2;
}
