// gpe tokenize / gpe detokenize: line-oriented JSON filters over a Hugging Face tokenizer.
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "engine/formats/gguf.h"
#include "engine/formats/gguf_tokenizer.h"
#include "engine/tokenizer/incremental_detokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "flags/flags.h"
#include "nlohmann/json.hpp"

namespace gpeserve::cli {
namespace {

// Where the tokenizer comes from: exactly one of the two.
struct TokenizerFlags {
  std::optional<std::string> model_dir;
  std::optional<std::string> file;
};

void AddTokenizerFlags(flags::FlagSet& flags, TokenizerFlags* source) {
  flags.Add("model", "DIR",
            "model folder with tokenizer.json (and tokenizer_config.json), or a GGUF file",
            &source->model_dir);
  flags.Add("tokenizer", "FILE",
            "a tokenizer.json file, or a folder holding one (as --model) (instead of --model)",
            &source->file);
}

// Parses flags and loads the tokenizer; on failure or --help returns an exit code.
std::optional<int> Setup(flags::FlagSet& flags, const TokenizerFlags& source, int argc, char** argv,
                         int first, std::shared_ptr<const tokenizer::Tokenizer>* tok) {
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  if (source.model_dir.has_value() == source.file.has_value()) {
    std::cerr << "gpe: give exactly one of --model DIR or --tokenizer FILE\n\n" << flags.Help();
    return 2;
  }
  // A folder given as --tokenizer is read as --model would read it (tokenizer.json and
  // tokenizer_config.json), not parsed as JSON.
  std::error_code error;
  const bool folder =
      source.model_dir.has_value() || std::filesystem::is_directory(*source.file, error);
  auto load = [&]() -> absl::StatusOr<std::shared_ptr<const tokenizer::Tokenizer>> {
    // A GGUF file as --model: its tokenizer.ggml.* metadata.
    if (source.model_dir && std::filesystem::is_regular_file(*source.model_dir, error)) {
      auto gguf = model::GgufFile::Open(*source.model_dir);
      if (!gguf.ok()) return gguf.status();
      return model::GgufTokenizer(**gguf);
    }
    return folder ? tokenizer::Tokenizer::Load(source.model_dir.value_or(*source.file))
                  : tokenizer::Tokenizer::LoadFiles(*source.file, "");
  };
  auto loaded = load();
  if (!loaded.ok()) {
    std::cerr << "gpe: cannot load tokenizer: " << loaded.status().message() << "\n";
    return 1;
  }
  *tok = *std::move(loaded);
  return std::nullopt;
}

// Reports a bad input line: a JSON error object on stdout (so output lines stay aligned with
// input lines) and a message on stderr.
void ReportLineError(size_t line_number, std::string_view message) {
  const std::string text = absl::StrCat("line ", line_number, ": ", std::string(message));
  std::cerr << "gpe: " << text << "\n";
  // The message may quote the offending bytes: replace ill-formed UTF-8 rather than throw.
  std::cout << nlohmann::json{{"error", text}}.dump(-1, ' ', false,
                                                    nlohmann::json::error_handler_t::replace)
            << "\n";
}

}  // namespace

int TokenizeCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe tokenize (--model DIR | --tokenizer FILE|DIR) [options] < strings.jsonl",
      "Reads one JSON string per line from stdin and prints {\"ids\":[...]} per line.\n"
      "Special tokens written in the text (e.g. <|im_start|>) are recognised. Text must be\n"
      "valid UTF-8; a bad line prints {\"error\":...} and the exit code becomes 1.");
  TokenizerFlags source;
  AddTokenizerFlags(flags, &source);
  tokenizer::EncodeOptions options;
  flags.Add("add_special_tokens", "add the model's BOS/EOS tokens around each line",
            &options.add_special_tokens);
  flags.Add("split_special_tokens", "treat special-token text as plain text",
            &options.split_special_tokens);
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  if (auto code = Setup(flags, source, argc, argv, first, &tok)) return *code;

  int exit_code = 0;
  std::string line;
  for (size_t line_number = 1; std::getline(std::cin, line); ++line_number) {
    if (line.empty()) continue;
    nlohmann::json input;
    try {
      input = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      ReportLineError(line_number, absl::StrCat("not valid JSON: ", e.what()));
      exit_code = 1;
      continue;
    }
    if (!input.is_string()) {
      ReportLineError(line_number, "expected a JSON string");
      exit_code = 1;
      continue;
    }
    auto ids = tok->Encode(input.get<std::string>(), options);
    if (!ids.ok()) {
      ReportLineError(line_number, std::string(ids.status().message()));
      exit_code = 1;
      continue;
    }
    std::cout << nlohmann::json{{"ids", *ids}}.dump() << "\n";
  }
  return exit_code;
}

int DetokenizeCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe detokenize (--model DIR | --tokenizer FILE|DIR) [options] < ids.jsonl",
      "Reads one JSON list of token ids per line from stdin and prints {\"text\":\"...\"}\n"
      "per line. With --stream the ids are also fed one at a time to the incremental\n"
      "detokenizer and its pieces are printed as \"pieces\".");
  TokenizerFlags source;
  AddTokenizerFlags(flags, &source);
  tokenizer::DecodeOptions options;
  bool stream = false;
  flags.Add("skip_special_tokens", "leave special tokens out of the text",
            &options.skip_special_tokens);
  flags.AddChoice("clean_up_spaces",
                  "apply clean_up_tokenization (default: the tokenizer_config.json setting)",
                  &options.clean_up_spaces,
                  {{"true", std::optional<bool>(true)}, {"false", std::optional<bool>(false)}});
  flags.Add("stream", "also print the incremental detokenizer's pieces", &stream);
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  if (auto code = Setup(flags, source, argc, argv, first, &tok)) return *code;

  int exit_code = 0;
  std::string line;
  for (size_t line_number = 1; std::getline(std::cin, line); ++line_number) {
    if (line.empty()) continue;
    std::vector<int32_t> ids;
    try {
      const nlohmann::json input = nlohmann::json::parse(line);
      ids = input.get<std::vector<int32_t>>();
    } catch (const nlohmann::json::exception& e) {
      ReportLineError(line_number, absl::StrCat("expected a JSON list of integer ids: ", e.what()));
      exit_code = 1;
      continue;
    }
    if (absl::Status s = tok->CheckIds(ids); !s.ok()) {
      ReportLineError(line_number, std::string(s.message()));
      exit_code = 1;
      continue;
    }
    nlohmann::json out{{"text", tok->Decode(ids, options)}};
    if (stream) {
      tokenizer::IncrementalDetokenizer detok(*tok, options);
      std::vector<std::string> pieces;
      for (const int32_t id : ids) pieces.push_back(detok.Push(id));
      pieces.push_back(detok.Flush());
      out["pieces"] = pieces;
    }
    std::cout << out.dump() << "\n";
  }
  return exit_code;
}

}  // namespace gpeserve::cli
