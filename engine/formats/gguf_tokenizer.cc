#include "engine/formats/gguf_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gpeserve::model {
namespace {

using json = nlohmann::ordered_json;

// llama.cpp's token types (tokenizer.ggml.token_type).
constexpr int64_t kControl = 3, kUserDefined = 4;

// GPT-2's pre-tokenizer split (ByteLevel's own regex).
json ByteLevel(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", false},
          {"use_regex", use_regex}};
}

json SplitThenBytes(const char* regex) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", regex}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            ByteLevel(false)}}};
}

// The pre-tokenizer, normalizer and ignore_merges of llama.cpp's pre-tokenizer `pre`, as the
// Hugging Face tokenizers it was converted from write them; false when not known.
bool PreTokenizer(const std::string& pre, json* pre_tokenizer, json* normalizer,
                  bool* ignore_merges) {
  *normalizer = nullptr;
  *ignore_merges = false;
  if (pre == "qwen2") {
    *pre_tokenizer = SplitThenBytes(
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
    *normalizer = {{"type", "NFC"}};
  } else if (pre == "llama-bpe" || pre == "llama3") {
    *pre_tokenizer = SplitThenBytes(
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
    *ignore_merges = true;
  } else if (pre == "smollm") {
    *pre_tokenizer = {
        {"type", "Sequence"},
        {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, ByteLevel(true)}}};
  } else if (pre == "gpt-2" || pre == "gpt2" || pre == "default") {
    *pre_tokenizer = ByteLevel(true);
  } else {
    return false;
  }
  return true;
}

// The strings of array `key`.
absl::StatusOr<std::vector<std::string>> Strings(const GgufFile& file, const std::string& key) {
  const GgufValue* v = file.FindValue(key);
  const auto* items = v == nullptr ? nullptr : std::get_if<std::vector<GgufValue>>(&v->value);
  if (items == nullptr || v->element_type != GgufValue::Type::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": ", key, " must be an array of strings"));
  }
  std::vector<std::string> out;
  out.reserve(items->size());
  for (const GgufValue& item : *items) out.push_back(std::get<std::string>(item.value));
  return out;
}

}  // namespace

bool GgufHasTokenizer(const GgufFile& file) {
  return file.FindValue("tokenizer.ggml.model") != nullptr;
}

absl::StatusOr<std::pair<std::string, std::string>> GgufTokenizerJson(const GgufFile& file) {
  auto model = file.String("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  if (*model != "gpt2") {
    return absl::UnimplementedError(absl::StrCat(
        file.path(), ": tokenizer.ggml.model '", *model,
        "' is not read (byte-level BPE, 'gpt2', is): serve the model's Hugging Face folder"));
  }
  std::string pre = "default";
  if (file.FindValue("tokenizer.ggml.pre") != nullptr) {
    auto named = file.String("tokenizer.ggml.pre");
    if (!named.ok()) return named.status();
    pre = *named;
  }
  json pre_tokenizer, normalizer;
  bool ignore_merges = false;
  if (!PreTokenizer(pre, &pre_tokenizer, &normalizer, &ignore_merges)) {
    return absl::UnimplementedError(absl::StrCat(
        file.path(), ": tokenizer.ggml.pre '", pre,
        "' is not read (qwen2, llama-bpe, smollm, gpt-2, default): serve the model's Hugging "
        "Face folder"));
  }
  auto tokens = Strings(file, "tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  auto merges = Strings(file, "tokenizer.ggml.merges");
  if (!merges.ok()) return merges.status();
  std::vector<int64_t> types(tokens->size(), 1);
  if (const GgufValue* v = file.FindValue("tokenizer.ggml.token_type")) {
    const auto* items = std::get_if<std::vector<GgufValue>>(&v->value);
    if (items == nullptr || items->size() != tokens->size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.path(), ": tokenizer.ggml.token_type must be one integer per token"));
    }
    for (size_t i = 0; i < items->size(); ++i) {
      const int64_t* type = std::get_if<int64_t>(&(*items)[i].value);
      if (type == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(file.path(), ": tokenizer.ggml.token_type holds a non-integer"));
      }
      types[i] = *type;
    }
  }
  // A plain (sorted) object: ordered_json's lookups are linear, and the vocabulary is large.
  nlohmann::json vocab = nlohmann::json::object();
  json added = json::array();
  for (size_t id = 0; id < tokens->size(); ++id) {
    const std::string& token = (*tokens)[id];
    vocab.emplace(token, id);  // the first id of a duplicated string wins
    if (types[id] == kControl || types[id] == kUserDefined) {
      added.push_back({{"id", id},
                       {"content", token},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", types[id] == kUserDefined},
                       {"special", types[id] == kControl}});
    }
  }
  json tokenizer = {{"version", "1.0"},
                    {"truncation", nullptr},
                    {"padding", nullptr},
                    {"added_tokens", added},
                    {"normalizer", normalizer},
                    {"pre_tokenizer", pre_tokenizer},
                    {"post_processor", nullptr},
                    {"decoder", ByteLevel(true)},
                    {"model",
                     {{"type", "BPE"},
                      {"dropout", nullptr},
                      {"unk_token", nullptr},
                      {"continuing_subword_prefix", nullptr},
                      {"end_of_word_suffix", nullptr},
                      {"fuse_unk", false},
                      {"byte_fallback", false},
                      {"ignore_merges", ignore_merges},
                      {"vocab", vocab},
                      {"merges", *merges}}}};
  json config = json::object();
  auto token_of = [&](const char* key) -> absl::StatusOr<std::string> {
    auto id = file.Integer(key);
    if (!id.ok()) return id.status();
    if (*id < 0 || *id >= static_cast<int64_t>(tokens->size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.path(), ": ", key, " ", *id, " is not a token id"));
    }
    return (*tokens)[*id];
  };
  for (const auto& [key, field] : {std::pair{"tokenizer.ggml.eos_token_id", "eos_token"},
                                   std::pair{"tokenizer.ggml.bos_token_id", "bos_token"}}) {
    if (file.FindValue(key) == nullptr) continue;
    auto token = token_of(key);
    if (!token.ok()) return token.status();
    config[field] = *token;
  }
  if (file.FindValue("tokenizer.ggml.add_bos_token") != nullptr) {
    auto add = file.Bool("tokenizer.ggml.add_bos_token");
    if (!add.ok()) return add.status();
    config["add_bos_token"] = *add;
  }
  if (file.FindValue("tokenizer.chat_template") != nullptr) {
    auto chat = file.String("tokenizer.chat_template");
    if (!chat.ok()) return chat.status();
    config["chat_template"] = *chat;
  }
  return std::pair{tokenizer.dump(), config.dump()};
}

absl::StatusOr<std::shared_ptr<const tokenizer::Tokenizer>> GgufTokenizer(const GgufFile& file) {
  auto files = GgufTokenizerJson(file);
  if (!files.ok()) return files.status();
  return tokenizer::Tokenizer::FromJson(files->first, file.path() + " (tokenizer.ggml.*)",
                                        files->second, file.path() + " (tokenizer.*)");
}

}  // namespace gpeserve::model
