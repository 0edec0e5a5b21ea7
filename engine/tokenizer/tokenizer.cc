#include "engine/tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/json_util.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/unicode.h"
#include "nlohmann/json.hpp"

namespace gpeserve::tokenizer {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open file"));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return contents.str();
}

absl::StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view name) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(name), ": not valid JSON at byte ", e.byte, ": ", e.what()));
  } catch (const nlohmann::json::exception& e) {  // e.g. a number beyond a double's range
    return absl::InvalidArgumentError(absl::StrCat(std::string(name), ": ", e.what()));
  }
}

// A token named in tokenizer_config.json: either "text" or {"content": "text", ...}.
std::optional<std::string> ConfigToken(const nlohmann::json& config, std::string_view key) {
  const auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    if (auto c = it->find("content"); c != it->end() && c->is_string()) {
      return c->get<std::string>();
    }
  }
  return std::nullopt;
}

absl::StatusOr<AddedToken> ParseAddedToken(const nlohmann::json& json, const JsonLocation& at) {
  if (!json.is_object()) return JsonError(at, "expected an added-token object");
  AddedToken token;
  const auto id = json.find("id");
  if (id == json.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
      id->get<int64_t>() > (1 << 30)) {
    return JsonError(at.Child("id"), "expected a non-negative integer id");
  }
  token.id = id->get<int32_t>();
  auto content = GetString(json, "content", at);
  if (!content.ok()) return content.status();
  token.content = *std::move(content);
  token.special = GetBoolOr(json, "special", false);
  token.normalized = GetBoolOr(json, "normalized", !token.special);
  token.lstrip = GetBoolOr(json, "lstrip", false);
  token.rstrip = GetBoolOr(json, "rstrip", false);
  token.single_word = GetBoolOr(json, "single_word", false);
  return token;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::Load(const std::string& dir) {
  const std::string config = dir + "/tokenizer_config.json";
  return LoadFiles(dir + "/tokenizer.json", std::ifstream(config).good() ? config : "");
}

absl::StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::LoadFiles(
    const std::string& tokenizer_path, const std::string& config_path) {
  auto tokenizer_json = ReadFile(tokenizer_path);
  if (!tokenizer_json.ok()) return tokenizer_json.status();
  std::string config_json;
  if (!config_path.empty()) {
    auto config = ReadFile(config_path);
    if (!config.ok()) return config.status();
    config_json = *std::move(config);
  }
  return FromJson(*tokenizer_json, tokenizer_path, config_json, config_path);
}

absl::StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::FromJson(
    std::string_view tokenizer_json, std::string_view tokenizer_name, std::string_view config_json,
    std::string_view config_name) {
  auto parsed = ParseJson(tokenizer_json, tokenizer_name);
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& json = *parsed;
  const JsonLocation root{std::string(tokenizer_name), ""};
  if (!json.is_object()) return JsonError(root, "expected a JSON object");
  std::shared_ptr<Tokenizer> t(new Tokenizer());

  if (auto it = json.find("normalizer"); it != json.end() && !it->is_null()) {
    auto normalizer = NormalizerFromJson(*it, root.Child("normalizer"));
    if (!normalizer.ok()) return normalizer.status();
    t->normalizer_ = *std::move(normalizer);
  }
  if (auto it = json.find("pre_tokenizer"); it != json.end() && !it->is_null()) {
    auto pre_tokenizer = PreTokenizerFromJson(*it, root.Child("pre_tokenizer"));
    if (!pre_tokenizer.ok()) return pre_tokenizer.status();
    t->pre_tokenizer_ = *std::move(pre_tokenizer);
  }
  const auto model_json = json.find("model");
  if (model_json == json.end()) return JsonError(root.Child("model"), "missing");
  auto model = BpeModel::FromJson(*model_json, root.Child("model"));
  if (!model.ok()) return model.status();
  t->model_ = *std::move(model);
  if (auto it = json.find("decoder"); it != json.end() && !it->is_null()) {
    auto decoder = DecoderFromJson(*it, root.Child("decoder"));
    if (!decoder.ok()) return decoder.status();
    t->decoder_ = *std::move(decoder);
    if (t->decoder_->HasByteFallback()) {
      for (int b = 0; b < 256; ++b) {
        if (auto id = t->model_->TokenToId(absl::StrFormat("<0x%02X>", b))) {
          t->byte_fallback_ids_.insert(*id);
        }
      }
    }
  }

  // Added tokens: matched in the raw text, or (normalized = true) in the normalized text.
  t->vocab_size_ = t->model_->vocab_size();
  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  if (auto it = json.find("added_tokens"); it != json.end() && !it->is_null()) {
    if (!it->is_array()) return JsonError(root.Child("added_tokens"), "expected an array");
    for (size_t i = 0; i < it->size(); ++i) {
      auto token = ParseAddedToken((*it)[i], root.Child("added_tokens").Child(i));
      if (!token.ok()) return token.status();
      t->vocab_size_ = std::max(t->vocab_size_, token->id + 1);
      t->added_by_content_[token->content] = token->id;
      if (token->normalized) {
        normalized_patterns.push_back(t->normalizer_ ? t->normalizer_->Normalize(token->content)
                                                     : token->content);
        normalized.push_back(*token);
      } else {
        raw_patterns.push_back(token->content);
        raw.push_back(*token);
      }
      t->added_by_id_[token->id] = *std::move(token);
    }
  }
  t->raw_matcher_ = AddedTokenMatcher(std::move(raw), std::move(raw_patterns));
  t->normalized_matcher_ = AddedTokenMatcher(std::move(normalized), std::move(normalized_patterns));

  // Post-processor: only the tokens added around a single sequence matter here.
  auto read_template = [&](const nlohmann::json& pp, const JsonLocation& at) -> absl::Status {
    const auto single = pp.find("single");
    const auto specials = pp.find("special_tokens");
    if (single == pp.end() || !single->is_array()) {
      return JsonError(at.Child("single"), "expected an array");
    }
    bool after_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const auto& piece = (*single)[i];
      if (piece.contains("Sequence")) {
        after_sequence = true;
        continue;
      }
      const auto special = piece.find("SpecialToken");
      if (special == piece.end() || !special->contains("id")) {
        return JsonError(at.Child("single").Child(i), "expected Sequence or SpecialToken");
      }
      const std::string name = (*special)["id"].get<std::string>();
      if (specials == pp.end() || !specials->contains(name) || !(*specials)[name].contains("ids")) {
        return JsonError(at.Child("special_tokens"), absl::StrCat("missing '", name, "'"));
      }
      for (const auto& id : (*specials)[name]["ids"]) {
        (after_sequence ? t->suffix_ids_ : t->prefix_ids_).push_back(id.get<int32_t>());
      }
    }
    return absl::OkStatus();
  };
  if (auto it = json.find("post_processor"); it != json.end() && !it->is_null()) {
    const JsonLocation at = root.Child("post_processor");
    std::vector<std::pair<const nlohmann::json*, JsonLocation>> processors;
    if (GetStringOr(*it, "type", "") == "Sequence" && it->contains("processors")) {
      for (size_t i = 0; i < (*it)["processors"].size(); ++i) {
        processors.emplace_back(&(*it)["processors"][i], at.Child("processors").Child(i));
      }
    } else {
      processors.emplace_back(&*it, at);
    }
    for (const auto& [pp, pp_at] : processors) {
      const std::string type = GetStringOr(*pp, "type", "");
      if (type == "ByteLevel") continue;  // only adjusts offsets
      if (type != "TemplateProcessing") {
        return JsonUnsupported(pp_at.Child("type"), "post-processor", type);
      }
      if (absl::Status s = read_template(*pp, pp_at); !s.ok()) return s;
    }
  }

  if (!config_json.empty()) {
    auto config = ParseJson(config_json, config_name);
    if (!config.ok()) return config.status();
    if (!config->is_object()) {
      return JsonError({std::string(config_name), ""}, "expected a JSON object");
    }
    if (auto bos = ConfigToken(*config, "bos_token")) t->bos_id_ = t->TokenToId(*bos);
    if (auto eos = ConfigToken(*config, "eos_token")) t->eos_id_ = t->TokenToId(*eos);
    t->clean_up_spaces_ = GetBoolOr(*config, "clean_up_tokenization_spaces", false);
    // A string, or named templates ([{"name": ..., "template": ...}]): the "default" one.
    if (const auto chat = config->find("chat_template"); chat != config->end()) {
      if (chat->is_string()) {
        t->chat_template_ = chat->get<std::string>();
      } else if (chat->is_array()) {
        for (const auto& named : *chat) {
          if (named.is_object() && named.value("name", "") == "default" &&
              named.contains("template") && named["template"].is_string()) {
            t->chat_template_ = named["template"].get<std::string>();
          }
        }
      }
    }
    // transformers rebuilds the template from these flags for Llama/Gemma-style tokenizers.
    if (config->contains("add_bos_token") || config->contains("add_eos_token")) {
      t->prefix_ids_.clear();
      t->suffix_ids_.clear();
      if (GetBoolOr(*config, "add_bos_token", false) && t->bos_id_) {
        t->prefix_ids_.push_back(*t->bos_id_);
      }
      if (GetBoolOr(*config, "add_eos_token", false) && t->eos_id_) {
        t->suffix_ids_.push_back(*t->eos_id_);
      }
    }
  }
  return std::shared_ptr<const Tokenizer>(std::move(t));
}

void Tokenizer::EncodeText(std::string_view text, bool starts_input, bool split_special,
                           std::vector<int32_t>* ids) const {
  const std::string normalized = normalizer_ ? normalizer_->Normalize(text) : std::string(text);
  std::vector<TextSegment> segments;
  normalized_matcher_.Split(normalized, split_special, &segments);
  std::vector<std::string> pieces;
  for (const TextSegment& segment : segments) {
    if (segment.token_id >= 0) {
      ids->push_back(segment.token_id);
      continue;
    }
    pieces.assign(1, std::string(segment.text));
    if (pre_tokenizer_) {
      pre_tokenizer_->PreTokenize(&pieces,
                                  starts_input && segment.text.data() == normalized.data());
    }
    for (const std::string& piece : pieces) model_->Tokenize(piece, ids);
  }
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                       const EncodeOptions& options) const {
  if (absl::Status s = ValidateUtf8(text); !s.ok()) return s;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (options.add_special_tokens) ids = prefix_ids_;
  std::vector<TextSegment> segments;
  raw_matcher_.Split(text, options.split_special_tokens, &segments);
  for (const TextSegment& segment : segments) {
    if (segment.token_id >= 0) {
      ids.push_back(segment.token_id);
    } else {
      EncodeText(segment.text, segment.text.data() == text.data(), options.split_special_tokens,
                 &ids);
    }
  }
  if (options.add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string Tokenizer::DecodeRaw(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (const auto it = added_by_id_.find(id); it != added_by_id_.end()) {
      if (!(skip_special_tokens && it->second.special)) tokens.push_back(it->second.content);
    } else if (const std::string* token = model_->IdToToken(id)) {
      tokens.push_back(*token);
    }
  }
  std::string text;
  if (decoder_) {
    decoder_->DecodeChain(&tokens);
    for (const std::string& piece : tokens) text.append(piece);
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text.push_back(' ');
      text.append(tokens[i]);
    }
  }
  return text;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  std::string text = DecodeRaw(ids, options.skip_special_tokens);
  return options.clean_up_spaces.value_or(clean_up_spaces_) ? CleanUpSpaces(text) : text;
}

std::string Tokenizer::CleanUpSpaces(std::string_view text) {
  // The replacements of transformers' clean_up_tokenization, applied one after another.
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  std::string s(text);
  for (const auto& [from, to] : kRules) {
    if (s.find(from) == std::string::npos) continue;
    std::string out;
    out.reserve(s.size());
    size_t last = 0;
    for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, last)) {
      out.append(s, last, pos - last);
      out.append(to);
      last = pos + from.size();
    }
    out.append(s, last);
    s = std::move(out);
  }
  return s;
}

void Tokenizer::ClearCache() const { model_->ClearCache(); }

absl::Status Tokenizer::CheckIds(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (IdToToken(ids[i]) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at index ", i,
                                                     " is not in the vocabulary (size ",
                                                     vocab_size_, ")"));
    }
  }
  return absl::OkStatus();
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (const auto it = added_by_content_.find(absl::string_view(token.data(), token.size()));
      it != added_by_content_.end()) {
    return it->second;
  }
  return model_->TokenToId(token);
}

const std::string* Tokenizer::IdToToken(int32_t id) const {
  if (const auto it = added_by_id_.find(id); it != added_by_id_.end()) return &it->second.content;
  return model_->IdToToken(id);
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && it->second.special;
}

}  // namespace gpeserve::tokenizer
