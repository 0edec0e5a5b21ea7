// gpe-engine: the `gpe` commands that run a model (libtorch). Users run them as `gpe COMMAND`;
// gpe, which links no libtorch, runs this binary for them (cli/main.cc).
#include <cstdio>
#include <string_view>

#include "cli/commands.h"

int main(int argc, char** argv) {
  const std::string_view command = argc < 2 ? "" : argv[1];
  if (command == "make-model") return gpeserve::cli::MakeModelCommand(argc, argv, 2);
  if (command == "default-model") return gpeserve::cli::DefaultModelCommand(argc, argv, 2);
  if (command == "quantize") return gpeserve::cli::QuantizeCommand(argc, argv, 2);
  if (command == "train") return gpeserve::cli::TrainCommand(argc, argv, 2);
  if (command == "logits") return gpeserve::cli::LogitsCommand(argc, argv, 2);
  if (command == "make-adapter") return gpeserve::cli::MakeAdapterCommand(argc, argv, 2);
  if (command == "merge-adapter") return gpeserve::cli::MergeAdapterCommand(argc, argv, 2);
  if (command == "bench-forward") return gpeserve::cli::BenchForwardCommand(argc, argv, 2);
  if (command == "bench-stream") return gpeserve::cli::BenchStreamCommand(argc, argv, 2);
  if (command == "bench-long") return gpeserve::cli::BenchLongCommand(argc, argv, 2);
  if (command == "bench") return gpeserve::cli::BenchCommand(argc, argv, 2);
  if (command == "eval") return gpeserve::cli::EvalCommand(argc, argv, 2);
  std::fprintf(stderr, "gpe-engine: runs gpe's model commands; use `gpe --help`\n");
  return 2;
}
