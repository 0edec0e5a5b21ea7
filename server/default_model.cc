#include "server/default_model.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/model/make_model.h"
#include "engine/tokenizer/bpe_trainer.h"

namespace gpeserve::server {
namespace {

constexpr const char* kCorpus[] = {
    "The speaker said that our city will build a new bridge over the river next year.",
    "Many people think it is a good idea for everyone who lives on both sides of the water.",
    "Hello, streaming world! The translation starts while the speaker is still talking.",
    "Good morning, ladies and gentlemen, and welcome to this conference on simultaneous "
    "translation.",
    "We will talk about how machines can listen, read and write at the same time.",
    "The weather today is sunny with a light wind from the west and warm temperatures.",
    "Der Sprecher sagte, dass unsere Stadt im nächsten Jahr eine neue Brücke bauen wird.",
    "Viele Menschen denken, dass es eine gute Idee für alle ist.",
    "Guten Morgen, meine Damen und Herren, und willkommen zu dieser Konferenz.",
    "Das Wetter ist heute sonnig mit leichtem Wind aus dem Westen.",
};

}  // namespace

absl::Status WriteDefaultModel(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> texts;
  for (int repeat = 0; repeat < 4; ++repeat) {
    for (const char* line : kCorpus) texts.emplace_back(line);
  }
  tokenizer::BpeTrainerConfig config;
  config.vocab_size = 640;
  auto trained = tokenizer::TrainByteLevelBpe(texts, config);
  if (!trained.ok()) return trained.status();
  const fs::path tokenizer_dir = fs::path(dir) / "tokenizer";
  std::error_code error;
  fs::create_directories(tokenizer_dir, error);
  if (error) {
    return absl::UnavailableError("cannot create " + tokenizer_dir.string() + ": " +
                                  error.message());
  }
  std::ofstream(tokenizer_dir / "tokenizer.json") << trained->tokenizer.dump();
  std::ofstream(tokenizer_dir / "tokenizer_config.json") << trained->config.dump();
  model::MakeModelOptions options;
  options.arch = "qwen2";
  options.preset = "tiny";
  options.tokenizer_dir = tokenizer_dir.string();
  options.seed = 2026;
  options.init_std = 0.3;  // peaked, varied logits rather than near-uniform noise
  return model::MakeModel(options, dir);
}

}  // namespace gpeserve::server
