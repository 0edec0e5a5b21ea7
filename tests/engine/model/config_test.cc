#include "engine/model/config.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gpeserve::model {
namespace {

nlohmann::json Base(const std::string& arch) {
  return {{"architectures", {arch}},  {"vocab_size", 100},      {"hidden_size", 64},
          {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-5},   {"rope_theta", 500000.0}};
}

TEST(ModelConfigTest, ReadsEveryFieldThatChangesTheMath) {
  nlohmann::json j = Base("LlamaForCausalLM");
  j["head_dim"] = 32;
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  j["tie_word_embeddings"] = true;
  j["eos_token_id"] = {7, 8};
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  auto c = ModelConfig::FromJson(j, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kLlama);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_TRUE(c->attention_bias && c->o_proj_bias && c->mlp_bias && c->tie_word_embeddings);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{7, 8}));
  // ToJson writes what FromJson reads back.
  auto again = ModelConfig::FromJson(c->ToJson(), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->ToJson(), c->ToJson());
}

TEST(ModelConfigTest, Qwen2HasQkvBiasOnly) {
  auto c = ModelConfig::FromJson(Base("Qwen2ForCausalLM"), "config.json");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->o_proj_bias);
  EXPECT_EQ(c->head_dim, 16);
}

TEST(ModelConfigTest, RejectsWhatIsNotImplemented) {
  struct Case {
    std::string arch;
    nlohmann::json patch;
    absl::StatusCode code;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"GPT2LMHeadModel",
       {},
       absl::StatusCode::kUnimplemented,
       "unknown architecture 'GPT2LMHeadModel'"},
      {"MistralForCausalLM",
       {{"sliding_window", 4096}, {"max_position_embeddings", 32768}},
       absl::StatusCode::kUnimplemented,
       "sliding_window"},
      {"Qwen2ForCausalLM",
       {{"use_sliding_window", true}},
       absl::StatusCode::kUnimplemented,
       "use_sliding_window"},
      {"LlamaForCausalLM",
       {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}},
       absl::StatusCode::kUnimplemented,
       "rope_scaling.rope_type: 'yarn'"},
      {"LlamaForCausalLM",
       {{"hidden_act", "gelu"}},
       absl::StatusCode::kUnimplemented,
       "hidden_act"},
      {"LlamaForCausalLM",
       {{"num_key_value_heads", 3}},
       absl::StatusCode::kInvalidArgument,
       "num_key_value_heads: 3 does not divide"},
      {"LlamaForCausalLM",
       {{"vocab_size", nullptr}},
       absl::StatusCode::kInvalidArgument,
       "vocab_size: missing"},
      {"LlamaForCausalLM",
       {{"hidden_size", -4}},
       absl::StatusCode::kInvalidArgument,
       "hidden_size: expected a positive integer"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = Base(c.arch);
    for (const auto& [key, value] : c.patch.items()) {
      if (value.is_null()) {
        j.erase(key);
      } else {
        j[key] = value;
      }
    }
    auto parsed = ModelConfig::FromJson(j, "dir/config.json");
    ASSERT_FALSE(parsed.ok()) << c.message_part;
    EXPECT_EQ(parsed.status().code(), c.code) << parsed.status();
    EXPECT_NE(parsed.status().message().find("dir/config.json: "), std::string::npos);
    EXPECT_NE(parsed.status().message().find(c.message_part), std::string::npos) << parsed.status();
  }
}

TEST(ModelConfigTest, MistralWithoutWindowIsAccepted) {
  nlohmann::json j = Base("MistralForCausalLM");
  j["sliding_window"] = nullptr;
  EXPECT_TRUE(ModelConfig::FromJson(j, "config.json").ok());
}

}  // namespace
}  // namespace gpeserve::model
