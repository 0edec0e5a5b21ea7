#include "engine/tokenizer/bpe_trainer.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace gpeserve::tokenizer {
namespace {

// The pre-tokenizer of Qwen2 / Qwen2.5 / Qwen3 tokenizers.
constexpr char kSplitPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

nlohmann::json ByteLevel() {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", false},
          {"use_regex", false}};
}

nlohmann::json PreTokenizerJson() {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", kSplitPattern}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            ByteLevel()}}};
}

using Pair = std::pair<int, int>;

struct Word {
  std::vector<int> symbols;
  int64_t count = 0;
};

// Adds `sign` * count for every adjacent pair of `word` to *pairs.
void CountPairs(const Word& word, int64_t sign, std::map<Pair, int64_t>* pairs) {
  for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
    int64_t& c = (*pairs)[{word.symbols[i], word.symbols[i + 1]}];
    c += sign * word.count;
  }
}

}  // namespace

absl::StatusOr<TrainedTokenizer> TrainByteLevelBpe(const std::vector<std::string>& texts,
                                                   const BpeTrainerConfig& config) {
  const int specials = static_cast<int>(config.special_tokens.size());
  if (config.vocab_size < 256 + specials) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_size ", config.vocab_size, " is too small: byte-level BPE needs 256 byte tokens + ",
        specials, " special tokens"));
  }
  for (const std::string* name : {&config.eos_token, &config.pad_token}) {
    if (!name->empty() && std::find(config.special_tokens.begin(), config.special_tokens.end(),
                                    *name) == config.special_tokens.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", *name, "' is not one of the special tokens"));
    }
  }
  auto pre = PreTokenizerFromJson(PreTokenizerJson(), {"(built-in)", "/pre_tokenizer"});
  if (!pre.ok()) return pre.status();

  // Word frequencies over the corpus, after the same normalization and pre-tokenization the
  // resulting tokenizer applies.
  std::map<std::string, int64_t> frequencies;
  for (const std::string& text : texts) {
    if (absl::Status s = ValidateUtf8(text); !s.ok()) return s;
    std::vector<std::string> pieces = {Normalize(text, NormalForm::kNfc)};
    (*pre)->PreTokenize(&pieces, true);
    for (std::string& piece : pieces) ++frequencies[std::move(piece)];
  }

  // Symbols: ids 0..255 are the byte characters, in byte order; merges append.
  std::vector<std::string> tokens;
  absl::flat_hash_map<std::string, int> token_ids;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(ByteToCharUtf8(static_cast<uint8_t>(b)));
    token_ids[tokens.back()] = b;
  }
  std::vector<Word> words;
  for (const auto& [text, count] : frequencies) {
    Word word;
    word.count = count;
    for (size_t pos = 0; pos < text.size();) {
      const size_t begin = pos;
      NextCodePoint(text, &pos);
      word.symbols.push_back(token_ids.at(text.substr(begin, pos - begin)));
    }
    words.push_back(std::move(word));
  }
  std::map<Pair, int64_t> pairs;
  for (const Word& word : words) CountPairs(word, 1, &pairs);

  TrainedTokenizer result;
  nlohmann::json merges = nlohmann::json::array();
  while (static_cast<int>(tokens.size()) + specials < config.vocab_size) {
    // Most frequent pair; ties go to the smaller (left, right) strings.
    const std::pair<const Pair, int64_t>* best = nullptr;
    for (const auto& entry : pairs) {
      if (entry.second <= 0) continue;
      if (best == nullptr || entry.second > best->second ||
          (entry.second == best->second &&
           std::tie(tokens[entry.first.first], tokens[entry.first.second]) <
               std::tie(tokens[best->first.first], tokens[best->first.second]))) {
        best = &entry;
      }
    }
    if (best == nullptr || best->second < config.min_frequency) break;
    const Pair pair = best->first;
    const std::string merged = tokens[pair.first] + tokens[pair.second];
    int new_id;
    if (auto it = token_ids.find(merged); it != token_ids.end()) {
      new_id = it->second;  // reached before through another split of the same string
    } else {
      new_id = static_cast<int>(tokens.size());
      tokens.push_back(merged);
      token_ids[merged] = new_id;
    }
    merges.push_back({tokens[pair.first], tokens[pair.second]});
    for (Word& word : words) {
      auto& s = word.symbols;
      bool present = false;
      for (size_t i = 0; i + 1 < s.size() && !present; ++i) {
        present = s[i] == pair.first && s[i + 1] == pair.second;
      }
      if (!present) continue;
      CountPairs(word, -1, &pairs);
      std::vector<int> merged_symbols;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == pair.first && s[i + 1] == pair.second) {
          merged_symbols.push_back(new_id);
          ++i;
        } else {
          merged_symbols.push_back(s[i]);
        }
      }
      s = std::move(merged_symbols);
      CountPairs(word, 1, &pairs);
    }
    pairs.erase(pair);
    ++result.merges;
  }

  nlohmann::json vocab = nlohmann::json::object();
  for (size_t id = 0; id < tokens.size(); ++id) vocab[tokens[id]] = id;
  nlohmann::json added = nlohmann::json::array();
  for (int i = 0; i < specials; ++i) {
    added.push_back({{"id", static_cast<int>(tokens.size()) + i},
                     {"content", config.special_tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  result.tokenizer = {{"version", "1.0"},
                      {"truncation", nullptr},
                      {"padding", nullptr},
                      {"added_tokens", added},
                      {"normalizer", {{"type", "NFC"}}},
                      {"pre_tokenizer", PreTokenizerJson()},
                      {"post_processor", ByteLevel()},
                      {"decoder", ByteLevel()},
                      {"model",
                       {{"type", "BPE"},
                        {"dropout", nullptr},
                        {"unk_token", nullptr},
                        {"continuing_subword_prefix", nullptr},
                        {"end_of_word_suffix", nullptr},
                        {"fuse_unk", false},
                        {"byte_fallback", false},
                        {"ignore_merges", false},
                        {"vocab", vocab},
                        {"merges", merges}}}};
  auto token_or_null = [](const std::string& s) {
    return s.empty() ? nlohmann::json() : nlohmann::json(s);
  };
  result.config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                   {"add_bos_token", false},
                   {"add_eos_token", false},
                   {"bos_token", nullptr},
                   {"eos_token", token_or_null(config.eos_token)},
                   {"pad_token", token_or_null(config.pad_token)},
                   {"unk_token", nullptr},
                   {"clean_up_tokenization_spaces", false},
                   {"model_max_length", 32768}};
  return result;
}

}  // namespace gpeserve::tokenizer
