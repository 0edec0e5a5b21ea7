#include "engine/policy/profile.h"

#include <fstream>
#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace gpeserve::policy {
namespace {

TEST(ProfileTest, BuiltinsLoadAndBuildThePrefix) {
  EXPECT_EQ(BuiltinProfileNames(),
            (std::vector<std::string>{"gemma2", "llama3", "phi3", "qwen2.5", "qwen3"}));
  for (const std::string& name : BuiltinProfileNames()) {
    auto p = LoadProfile(name);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->name, name);
    EXPECT_FALSE(p->assistant.empty());
    EXPECT_FALSE(p->end.empty());
    EXPECT_EQ(p->Prefix().find("{instruction}"), std::string::npos);
  }
  auto qwen = LoadProfile("qwen2.5");
  ASSERT_TRUE(qwen.ok());
  EXPECT_EQ(qwen->WithInstruction("Translate the following English paragraph to French").Prefix(),
            "<|im_start|>system\nTranslate the following English paragraph to French"
            "<|im_end|>\n<|im_start|>user\n");  // docs/GPE.md section 2
  EXPECT_EQ(qwen->assistant, "<|im_start|>assistant\n");
  EXPECT_EQ(qwen->end, "<|im_end|>\n");
  EXPECT_TRUE(qwen->add_space);
  EXPECT_EQ(qwen->phi, 0);
}

TEST(ProfileTest, FilesAndErrors) {
  const std::string path = ::testing::TempDir() + "/profile_test.json";
  std::ofstream(path) << R"({"name": "mine", "instruct": "S:{instruction}|", "instruction": "x",
                             "user": "U:", "assistant": "A:", "end": "E", "add_space": false,
                             "phi": 7})";
  auto p = LoadProfile(path);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->Prefix(), "S:x|U:");
  EXPECT_FALSE(p->add_space);
  EXPECT_EQ(p->phi, 7);

  EXPECT_EQ(LoadProfile("nonsense").status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(LoadProfile("nonsense").status().message().find("qwen2.5"), std::string::npos);
  EXPECT_EQ(LoadProfile("/no/such/profile.json").status().code(), absl::StatusCode::kNotFound);
  std::ofstream(path) << R"({"assistant": "A", "end": "E", "phi": -1})";
  EXPECT_NE(LoadProfile(path).status().message().find("phi: expected a non-negative integer"),
            std::string::npos);
  std::ofstream(path) << R"({"assistant": "A"})";
  EXPECT_NE(LoadProfile(path).status().message().find("end: missing"), std::string::npos);
}

}  // namespace
}  // namespace gpeserve::policy

namespace gpeserve::policy {
namespace {

// --profile auto follows the model's chat template: the real tokenizers' templates (loaded as a
// model's tokenizer loads them) and the formats of the other families, by their markers.
TEST(ProfileTest, AutoFollowsTheChatTemplate) {
  const std::string shared = std::string(GPESERVE_SHARED_DIR) + "/data/tokenizers/";
  for (const auto& [vocab, expected] : {std::pair<const char*, const char*>{"qwen3", "qwen3"},
                                        {"llama3", "llama3"},
                                        {"gemma3", "gemma2"}}) {
    auto tokenizer = tokenizer::Tokenizer::Load(shared + vocab);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    ASSERT_FALSE((*tokenizer)->chat_template().empty()) << vocab;
    // The template wins over model_type: a Llama-architecture model speaking another format.
    auto name = ResolveProfileName(kAutoProfile, "llama", (*tokenizer)->chat_template());
    ASSERT_TRUE(name.ok()) << name.status();
    EXPECT_EQ(*name, expected) << vocab;
  }
  // SmolLM2's ChatML (no think block), Phi-3's format.
  EXPECT_EQ(*ProfileForChatTemplate(
                "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"),
            "qwen2.5");
  EXPECT_EQ(*ProfileForChatTemplate("{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
                                    "{{'<|assistant|>\\n'}}"),
            "phi3");
  // Llama 2's and Mistral's [INST]: no built-in profile, and no silent guess.
  auto inst = ResolveProfileName(kAutoProfile, "mistral",
                                 "{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}");
  EXPECT_EQ(inst.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(inst.status().message().find("--profile FILE"), std::string::npos) << inst.status();
  // Without a template (a base model): by model_type; a named profile is kept.
  EXPECT_EQ(*ResolveProfileName(kAutoProfile, "gemma2", ""), "gemma2");
  EXPECT_EQ(*ResolveProfileName(kAutoProfile, "gemma3_text", ""), "gemma2");
  EXPECT_EQ(*ResolveProfileName(kAutoProfile, "mistral", ""), "qwen2.5");
  EXPECT_EQ(*ResolveProfileName("phi3", "qwen2", "<|im_start|>"), "phi3");
}

}  // namespace
}  // namespace gpeserve::policy
