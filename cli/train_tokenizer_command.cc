// gpe train-tokenizer: learn a byte-level BPE vocabulary from a corpus and write a Hugging Face
// tokenizer folder.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "engine/tokenizer/bpe_trainer.h"
#include "engine/tokenizer/tokenizer.h"
#include "flags/flags.h"
#include "nlohmann/json.hpp"

namespace gpeserve::cli {
namespace {

// Adds the training texts in `value`: a string, or the string fields of an object (only
// `keys` when given).
void CollectTexts(const nlohmann::json& value, const std::vector<std::string>& keys,
                  std::vector<std::string>* texts) {
  if (value.is_string()) {
    texts->push_back(value.get<std::string>());
  } else if (value.is_object()) {
    for (const auto& [key, field] : value.items()) {
      const bool wanted = keys.empty() || std::find(keys.begin(), keys.end(), key) != keys.end();
      if (wanted && field.is_string()) texts->push_back(field.get<std::string>());
    }
  }
}

// Reads FILE.json (an array of strings or objects), FILE.jsonl (one string or object per line)
// or any other file as plain text, one text per line.
absl::StatusOr<std::vector<std::string>> ReadCorpus(const std::string& path,
                                                    const std::vector<std::string>& keys) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  std::vector<std::string> texts;
  const std::string extension = std::filesystem::path(path).extension().string();
  try {
    if (extension == ".json") {
      const nlohmann::json doc = nlohmann::json::parse(in);
      if (!doc.is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": expected a JSON array"));
      }
      for (const auto& item : doc) CollectTexts(item, keys, &texts);
    } else {
      std::string line;
      for (size_t n = 1; std::getline(in, line); ++n) {
        if (line.empty()) continue;
        if (extension == ".jsonl") {
          CollectTexts(nlohmann::json::parse(line), keys, &texts);
        } else {
          texts.push_back(line);
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON: ", e.what()));
  }
  if (texts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no training text found"));
  }
  return texts;
}

absl::Status WriteJson(const std::filesystem::path& path, const nlohmann::json& json) {
  std::ofstream out(path, std::ios::binary);
  out << json.dump(2, ' ', false) << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path.string(), ": write failed"));
  return absl::OkStatus();
}

}  // namespace

int TrainTokenizerCommand(int argc, char** argv, int first) {
  flags::FlagSet flags(
      "gpe", "gpe train-tokenizer --data FILE --out DIR [options]",
      "Trains a byte-level BPE (Qwen2-style pre-tokenization) on FILE and writes\n"
      "DIR/tokenizer.json and DIR/tokenizer_config.json, loadable by gpeserve and by\n"
      "Hugging Face. FILE: .json (array of strings or objects), .jsonl (one string or\n"
      "object per line) or plain text (one text per line).");
  tokenizer::BpeTrainerConfig config;
  std::optional<std::string> data, out;
  std::vector<std::string> keys;  // empty: every string field
  flags.Add("data", "FILE", "training corpus", &data);
  flags.Add("out", "DIR", "output folder (created if missing)", &out);
  // Unbounded: TrainByteLevelBpe says what a usable vocabulary size is.
  flags.Add("vocab_size", "N", "vocabulary size, special tokens included", &config.vocab_size);
  flags.Add("min_frequency", "N", "never merge a pair seen fewer times", &config.min_frequency);
  flags.AddParsed("keys", "K1,K2", "object fields to train on (default: every string field)", "",
                  [&keys](std::string_view text) {
                    keys = absl::StrSplit(absl::string_view(text.data(), text.size()), ',',
                                          absl::SkipEmpty());
                    return absl::OkStatus();
                  });
  flags.AddParsed("special_tokens", "T1,T2", "special tokens, in id order",
                  absl::StrJoin(config.special_tokens, ","), [&config](std::string_view text) {
                    config.special_tokens = absl::StrSplit(
                        absl::string_view(text.data(), text.size()), ',', absl::SkipEmpty());
                    return absl::OkStatus();
                  });
  flags.Add("eos_token", "TOKEN", "end-of-sequence token (one of the special tokens)",
            &config.eos_token);
  if (auto code = flags.ParseOrExit(argc, argv, first)) return *code;
  if (!data || !out) {
    std::cerr << "gpe: --data and --out are required\n\n" << flags.Help();
    return 2;
  }
  config.pad_token = config.special_tokens.empty() ? "" : config.special_tokens.front();

  auto texts = ReadCorpus(*data, keys);
  if (!texts.ok()) {
    std::cerr << "gpe: " << texts.status().message() << "\n";
    return 1;
  }
  auto trained = tokenizer::TrainByteLevelBpe(*texts, config);
  if (!trained.ok()) {
    std::cerr << "gpe: " << trained.status().message() << "\n";
    return 1;
  }
  std::error_code error;
  std::filesystem::create_directories(*out, error);
  const std::filesystem::path dir(*out);
  for (const auto& [name, json] : {std::pair{"tokenizer.json", &trained->tokenizer},
                                   std::pair{"tokenizer_config.json", &trained->config}}) {
    if (absl::Status s = WriteJson(dir / name, *json); !s.ok()) {
      std::cerr << "gpe: " << s.message() << "\n";
      return 1;
    }
  }
  // Prove the result loads before reporting success.
  auto loaded = tokenizer::Tokenizer::Load(*out);
  if (!loaded.ok()) {
    std::cerr << "gpe: the written tokenizer does not load: " << loaded.status().message() << "\n";
    return 1;
  }
  std::cerr << "gpe: trained " << trained->merges << " merges on " << texts->size()
            << " texts; vocabulary " << (*loaded)->vocab_size() << " tokens; wrote " << *out
            << "\n";
  return 0;
}

}  // namespace gpeserve::cli
