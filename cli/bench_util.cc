#include "cli/bench_util.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/make_model.h"
#include "engine/model/adapter.h"
#include "engine/model/default_model.h"
#include "engine/model/model.h"
#include "engine/tokenizer/bpe_trainer.h"
#include "engine/train/corpus.h"
#include "engine/util/remove_tree.h"
#include "flags/groups.h"
#include "nlohmann/json.hpp"

namespace gpeserve::cli {
namespace {

// Trained on BenchWords() and the corpus's English sentences (what gpe bench --pace speaks), so
// that a word is one or two tokens, as with a real model's vocabulary.
absl::Status WriteTokenizer(const std::filesystem::path& dir) {
  std::vector<std::string> texts;
  for (int i = 0; i < 50; ++i) {
    std::string line;
    for (const std::string& w : BenchWords()) absl::StrAppend(&line, line.empty() ? "" : " ", w);
    texts.push_back(line + " mot x.");
  }
  for (const train::Translation& t : train::GenerateCorpus(1, 2000)) texts.push_back(t.en);
  tokenizer::BpeTrainerConfig config;
  config.vocab_size = 1000;
  auto trained = tokenizer::TrainByteLevelBpe(texts, config);
  if (!trained.ok()) return trained.status();
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << trained->tokenizer.dump();
  std::ofstream(dir / "tokenizer_config.json") << trained->config.dump();
  return absl::OkStatus();
}

// Gives the ids beyond the trained tokenizer (the preset's full vocabulary, which the LM head
// keeps) text of their own, as a real vocabulary has: even ids a word start (" " + letters),
// odd ones a piece of a word (letters), so that what a random model writes decodes to words of
// about two tokens.
absl::Status PadVocabulary(const std::filesystem::path& model_dir) {
  std::ifstream config_in(model_dir / "config.json");
  const nlohmann::json config = nlohmann::json::parse(config_in, nullptr, false);
  std::ifstream tokenizer_in(model_dir / "tokenizer.json");
  nlohmann::json tokenizer = nlohmann::json::parse(tokenizer_in, nullptr, false);
  if (config.is_discarded() || !config.contains("vocab_size") || tokenizer.is_discarded()) {
    return absl::InternalError(
        absl::StrCat("cannot read the model written to ", model_dir.string()));
  }
  nlohmann::json& vocab = tokenizer["model"]["vocab"];
  int64_t next = 0;
  for (const auto& entry : vocab.items()) next = std::max(next, entry.value().get<int64_t>() + 1);
  for (const auto& added : tokenizer["added_tokens"]) {
    next = std::max(next, added["id"].get<int64_t>() + 1);
  }
  const int64_t vocab_size = config["vocab_size"].get<int64_t>();
  for (int64_t id = next; id < vocab_size; ++id) {
    std::string letters;
    for (int64_t n = id; n > 0; n /= 26) letters += static_cast<char>('a' + n % 26);
    const std::string token = (id % 2 == 0 ? "\u0120" : "") + letters;  // U+0120: byte-level space
    if (!vocab.contains(token)) vocab[token] = id;
  }
  std::ofstream(model_dir / "tokenizer.json") << tokenizer.dump();
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string>& BenchWords() {
  static const std::vector<std::string> words = {
      "the",    "speaker", "said", "that", "our",   "city", "will", "build", "a",
      "new",    "bridge",  "over", "the",  "river", "next", "year", "and",   "many",
      "people", "think",   "it",   "is",   "a",     "good", "idea", "for",   "everyone"};
  return words;
}

std::vector<std::string> BenchSource(int count) {
  std::vector<std::string> words;
  for (int i = 0; i < count; ++i) words.push_back(BenchWords()[i % BenchWords().size()]);
  return words;
}

namespace {

absl::StatusOr<std::shared_ptr<const model::Model>> LoadBenchModelQuietly(
    const std::optional<std::string>& model_dir, const std::string& preset,
    const model::ModelOptions& options) {
  if (model_dir) return model::Model::Load(*model_dir, options);
  if (preset == "default") return model::LoadDefaultModel(options);
  const std::filesystem::path temp =
      std::filesystem::temp_directory_path() / absl::StrCat("gpe-bench-", ::getpid());
  model::MakeModelOptions o;
  o.preset = preset;
  o.tokenizer_dir = (temp / "tokenizer").string();
  o.dtype = options.dtype == "fp32" ? model::DType::kF32 : model::DType::kBF16;
  std::cerr << "gpe: writing a random " << preset << " model to " << temp << "\n";
  absl::Status s = WriteTokenizer(o.tokenizer_dir);
  if (s.ok()) s = model::MakeModel(o, (temp / "model").string());
  if (s.ok()) s = PadVocabulary(temp / "model");
  absl::StatusOr<std::shared_ptr<const model::Model>> loaded =
      s.ok() ? model::Model::Load((temp / "model").string(), options)
             : absl::StatusOr<std::shared_ptr<const model::Model>>(s);
  model::RemoveTree(temp).IgnoreError();
  return loaded;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const model::Model>> LoadBenchModel(
    const std::optional<std::string>& model_dir, const std::string& preset,
    const model::ModelOptions& options) {
  auto loaded = LoadBenchModelQuietly(model_dir, preset, options);
  if (loaded.ok()) std::cerr << "gpe: " << (*loaded)->kernel_path() << "\n";
  return loaded;
}

absl::StatusOr<CommandModel> LoadCommandModel(const flags::ModelFlags& flags) {
  auto model = flags.dir ? model::Model::Load(*flags.dir, flags.options)
                         : model::LoadDefaultModel(flags.options);
  if (!model.ok()) return model.status();
  CommandModel loaded{.model = *std::move(model)};
  if (!flags.adapter) return loaded;
  // On the built-in model, a built-in adapter's name (unless a folder has that name).
  const bool builtin = !flags.dir && !std::filesystem::exists(*flags.adapter) &&
                       model::IsDefaultAdapterName(*flags.adapter);
  auto adapter = builtin ? model::LoadDefaultAdapter(*flags.adapter, *loaded.model)
                         : model::LoadAdapter(*flags.adapter, *loaded.model, "adapter");
  if (!adapter.ok()) return adapter.status();
  loaded.instruction = (*adapter)->config.instruction;
  if (!flags.merge_adapter) {
    loaded.adapter = *std::move(adapter);
    return loaded;
  }
  auto merged = loaded.model->WithMergedAdapter(**adapter);
  if (!merged.ok()) return merged.status();
  loaded.model = *std::move(merged);
  return loaded;
}

std::string CpuName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name = "unknown CPU", flags;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key(absl::StripAsciiWhitespace(line.substr(0, colon)));
    const std::string value(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    if (key == "model name" && name == "unknown CPU") name = value;
    if (key == "flags" && flags.empty()) flags = " " + value + " ";
  }
  std::string features;
  for (const char* f : {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}) {
    if (flags.find(absl::StrCat(" ", f, " ")) != std::string::npos) {
      absl::StrAppend(&features, features.empty() ? "" : " ", f);
    }
  }
  return absl::StrCat(name, " (", features.empty() ? "no AVX2" : features, ")");
}

absl::Status ParsePositiveList(std::string_view text, std::vector<int>* values) {
  std::vector<int> parsed;
  for (absl::string_view part : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1) {
      return absl::InvalidArgumentError("takes positive whole numbers separated by commas");
    }
    parsed.push_back(n);
  }
  *values = std::move(parsed);
  return absl::OkStatus();
}

}  // namespace gpeserve::cli
