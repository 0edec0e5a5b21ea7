// The `gpe` subcommands. Each takes argv and the index of its first own argument, prints its
// output to stdout and errors to stderr, and returns the process exit code.
#pragma once

#include <string_view>

namespace gpeserve::cli {

// The commands gpe-engine runs (they load a model: libtorch); gpe runs the others itself.
inline bool IsEngineCommand(std::string_view command) {
  for (std::string_view name :
       {"make-model", "default-model", "quantize", "train", "logits", "make-adapter",
        "merge-adapter", "bench-forward", "bench-stream", "bench-long", "bench", "eval"}) {
    if (command == name) return true;
  }
  return false;
}

int TokenizeCommand(int argc, char** argv, int first);
int DetokenizeCommand(int argc, char** argv, int first);
int TrainTokenizerCommand(int argc, char** argv, int first);
int MakeModelCommand(int argc, char** argv, int first);
int DefaultModelCommand(int argc, char** argv, int first);
int QuantizeCommand(int argc, char** argv, int first);
int LogitsCommand(int argc, char** argv, int first);
int MakeAdapterCommand(int argc, char** argv, int first);
int MergeAdapterCommand(int argc, char** argv, int first);
int BenchForwardCommand(int argc, char** argv, int first);
int BenchStreamCommand(int argc, char** argv, int first);
int BenchLongCommand(int argc, char** argv, int first);
int BenchCommand(int argc, char** argv, int first);
int ScoreCommand(int argc, char** argv, int first);
int EvalCommand(int argc, char** argv, int first);
int MakeCorpusCommand(int argc, char** argv, int first);
int TrainCommand(int argc, char** argv, int first);

}  // namespace gpeserve::cli
