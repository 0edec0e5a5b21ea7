#include "tests/engine/tokenizer/test_tokenizers.h"

#include "absl/strings/str_format.h"
#include "engine/tokenizer/unicode.h"

namespace gpeserve::tokenizer::testing {

nlohmann::json ByteLevelJson(const std::vector<std::string>& extra_tokens,
                             const std::vector<std::pair<std::string, std::string>>& merges,
                             const nlohmann::json& added_tokens) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteToCharUtf8(static_cast<uint8_t>(b))] = b;
  int next = 256;
  for (const std::string& t : extra_tokens) {
    if (!vocab.contains(t)) vocab[t] = next++;
  }
  nlohmann::json merge_list = nlohmann::json::array();
  for (const auto& [a, b] : merges) merge_list.push_back({a, b});
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", false},
                                     {"use_regex", false}};
  return {{"version", "1.0"},
          {"added_tokens", added_tokens},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", byte_level},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}, {"byte_fallback", false}}}};
}

nlohmann::json ByteFallbackJson(const std::vector<std::string>& extra_tokens,
                                const std::vector<std::pair<std::string, std::string>>& merges) {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[absl::StrFormat("<0x%02X>", b)] = 3 + b;
  int next = 259;
  for (const std::string& t : extra_tokens) {
    if (!vocab.contains(t)) vocab[t] = next++;
  }
  nlohmann::json merge_list = nlohmann::json::array();
  for (const auto& [a, b] : merges) merge_list.push_back(a + " " + b);
  return {
      {"added_tokens", {Added(0, "<unk>", true), Added(1, "<s>", true), Added(2, "</s>", true)}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\u2581"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", merge_list},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true}}}};
}

nlohmann::json Added(int id, const std::string& content, bool special, bool lstrip, bool rstrip,
                     bool single_word, bool normalized) {
  return {{"id", id},
          {"content", content},
          {"special", special},
          {"lstrip", lstrip},
          {"rstrip", rstrip},
          {"single_word", single_word},
          {"normalized", normalized}};
}

std::shared_ptr<const Tokenizer> Build(const nlohmann::json& tokenizer,
                                       const nlohmann::json& config) {
  auto built =
      Tokenizer::FromJson(tokenizer.dump(), "test/tokenizer.json",
                          config.is_null() ? "" : config.dump(), "test/tokenizer_config.json");
  EXPECT_TRUE(built.ok()) << built.status();
  return built.ok() ? *built : nullptr;
}

}  // namespace gpeserve::tokenizer::testing
