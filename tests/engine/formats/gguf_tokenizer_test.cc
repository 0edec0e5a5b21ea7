#include "engine/formats/gguf_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "nlohmann/json.hpp"

namespace gpeserve::model {
namespace {

namespace fs = std::filesystem;

#ifndef GPESERVE_SHARED_DIR
#define GPESERVE_SHARED_DIR ""
#endif

// GGUF metadata bytes.
class Meta {
 public:
  void Str(const std::string& v) {
    Put<uint64_t>(v.size());
    s_ += v;
  }
  void String(const std::string& key, const std::string& v) {
    Str(key);
    Put<uint32_t>(8);
    Str(v);
    ++count_;
  }
  void Int(const std::string& key, uint32_t v) {
    Str(key);
    Put<uint32_t>(4);
    Put<uint32_t>(v);
    ++count_;
  }
  void Strings(const std::string& key, const std::vector<std::string>& items) {
    Str(key);
    Put<uint32_t>(9);
    Put<uint32_t>(8);
    Put<uint64_t>(items.size());
    for (const std::string& item : items) Str(item);
    ++count_;
  }
  void Ints(const std::string& key, const std::vector<int32_t>& items) {
    Str(key);
    Put<uint32_t>(9);
    Put<uint32_t>(5);
    Put<uint64_t>(items.size());
    for (int32_t item : items) Put<int32_t>(item);
    ++count_;
  }
  // A file with this metadata and no tensors.
  std::string File() const {
    Meta f;
    f.Put<uint32_t>(0x46554747);
    f.Put<uint32_t>(3);
    f.Put<uint64_t>(0);
    f.Put<uint64_t>(count_);
    return f.s_ + s_;
  }
  template <typename T>
  void Put(T v) {
    char raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    s_.append(raw, sizeof(T));
  }

 private:
  std::string s_;
  uint64_t count_ = 0;
};

// The tokenizer.ggml.* metadata llama.cpp's converter writes for a Hugging Face byte-level BPE
// tokenizer folder: tokens by id (added tokens included), token types (control for special
// added tokens, user-defined for the others), merges as "a b", the pre-tokenizer's name.
std::string ConvertAsLlamaCpp(const fs::path& folder, const std::string& pre) {
  nlohmann::json tok, config;
  std::ifstream(folder / "tokenizer.json") >> tok;
  std::ifstream(folder / "tokenizer_config.json") >> config;
  std::map<int64_t, std::pair<std::string, int32_t>> by_id;
  for (const auto& [token, id] : tok["model"]["vocab"].items()) by_id[id] = {token, 1};
  for (const auto& added : tok["added_tokens"]) {
    by_id[added["id"]] = {added["content"], added["special"].get<bool>() ? 3 : 4};
  }
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (const auto& [id, entry] : by_id) {
    EXPECT_EQ(id, static_cast<int64_t>(tokens.size())) << "ids must be dense";
    tokens.push_back(entry.first);
    types.push_back(entry.second);
  }
  std::vector<std::string> merges;
  for (const auto& merge : tok["model"]["merges"]) {
    merges.push_back(merge.is_string()
                         ? merge.get<std::string>()
                         : merge[0].get<std::string>() + " " + merge[1].get<std::string>());
  }
  Meta meta;
  meta.String("tokenizer.ggml.model", "gpt2");
  meta.String("tokenizer.ggml.pre", pre);
  meta.Strings("tokenizer.ggml.tokens", tokens);
  meta.Ints("tokenizer.ggml.token_type", types);
  meta.Strings("tokenizer.ggml.merges", merges);
  const std::string eos =
      config["eos_token"].is_string() ? config["eos_token"].get<std::string>() : std::string();
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (tokens[id] == eos) meta.Int("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(id));
  }
  return meta.File();
}

// A byte-level BPE tokenizer converted as llama.cpp converts it encodes every text as the
// tokenizer.json it came from (Qwen 3's NFC and split regex; Llama 3's regex and
// ignore_merges), special tokens and the eos included.
TEST(GgufTokenizerTest, ConvertedTokenizersEncodeAsTheirTokenizerJson) {
  const fs::path tokenizers = fs::path(GPESERVE_SHARED_DIR) / "data" / "tokenizers";
  if (!fs::exists(tokenizers)) GTEST_SKIP() << tokenizers << " is not here";
  const std::vector<std::string> texts = {
      "The quick brown fox jumps over the lazy dog.",
      "In 2024 the price rose 12345 times, to $3.50!",
      "Straße, Ça va? Naïve café — 東京は晴れです。 Привет, мир!",
      "  leading spaces\n\n\ttabs and\r\nnewlines   ",
      "<|im_start|>user\nTranslate: I don't think we'll go.<|im_end|>\n",
      "def f(x):\n    return x**2  # comment",
      "e\u0301 (decomposed) vs \u00e9 (composed)",
  };
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("gpe_gguf_tok_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& [name, pre] : {std::pair{"qwen3", "qwen2"}, std::pair{"llama3", "llama-bpe"}}) {
    SCOPED_TRACE(name);
    auto original = tokenizer::Tokenizer::Load((tokenizers / name).string());
    ASSERT_TRUE(original.ok()) << original.status();
    const fs::path path = dir / (std::string(name) + ".gguf");
    { std::ofstream(path, std::ios::binary) << ConvertAsLlamaCpp(tokenizers / name, pre); }
    auto file = GgufFile::Open(path.string());
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_TRUE(GgufHasTokenizer(**file));
    auto converted = GgufTokenizer(**file);
    ASSERT_TRUE(converted.ok()) << converted.status();
    EXPECT_EQ((*converted)->vocab_size(), (*original)->vocab_size());
    EXPECT_EQ((*converted)->eos_id(), (*original)->eos_id());
    for (const std::string& text : texts) {
      auto want = (*original)->Encode(text);
      auto got = (*converted)->Encode(text);
      ASSERT_TRUE(want.ok() && got.ok());
      EXPECT_EQ(*got, *want) << text;
      EXPECT_EQ((*converted)->Decode(*got), (*original)->Decode(*want)) << text;
    }
  }
  fs::remove_all(dir);
}

TEST(GgufTokenizerTest, RefusesWhatItDoesNotRead) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("gpe_gguf_tok_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto open = [&](const Meta& meta) {
    const std::string path = (dir / "t.gguf").string();
    { std::ofstream(path, std::ios::binary) << meta.File(); }
    auto file = GgufFile::Open(path);
    EXPECT_TRUE(file.ok()) << file.status();
    return GgufTokenizer(**file).status();
  };
  Meta spm;
  spm.String("tokenizer.ggml.model", "llama");
  EXPECT_EQ(open(spm).code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(open(spm).message().find("tokenizer.ggml.model 'llama'"), std::string::npos);
  Meta pre;
  pre.String("tokenizer.ggml.model", "gpt2");
  pre.String("tokenizer.ggml.pre", "deepseek-coder");
  EXPECT_EQ(open(pre).code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(open(pre).message().find("'deepseek-coder'"), std::string::npos);
  Meta types;
  types.String("tokenizer.ggml.model", "gpt2");
  types.Strings("tokenizer.ggml.tokens", {"a", "b"});
  types.Strings("tokenizer.ggml.merges", {"a b"});
  types.Ints("tokenizer.ggml.token_type", {1});
  EXPECT_NE(open(types).message().find("one integer per token"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpeserve::model
