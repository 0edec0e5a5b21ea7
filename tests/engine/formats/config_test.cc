#include "engine/formats/config.h"

#include <cmath>
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
      {"LlamaForCausalLM",
       {{"partial_rotary_factor", 0.5}},
       absl::StatusCode::kUnimplemented,
       "partial_rotary_factor: a partial rotary embedding is implemented for Phi3ForCausalLM"},
      {"LlamaForCausalLM",
       {{"rope_scaling", {{"type", "longrope"}}}},
       absl::StatusCode::kUnimplemented,
       "rope_scaling.rope_type: 'longrope'"},
      {"Phi3ForCausalLM",
       {{"rope_scaling", {{"type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}}}},
       absl::StatusCode::kInvalidArgument,
       "rope_scaling.short_factor: expected a list of 8 numbers"},
      {"Phi3ForCausalLM",
       {{"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}}},
       absl::StatusCode::kUnimplemented,
       "rope_scaling.type: 'dynamic': Phi3ForCausalLM takes longrope only"},
      {"Gemma2ForCausalLM",
       {{"hidden_activation", "gelu"}},
       absl::StatusCode::kUnimplemented,
       "hidden_activation: 'gelu'"},
      {"Gemma2ForCausalLM",
       {{"attn_logit_softcapping", -1}},
       absl::StatusCode::kInvalidArgument,
       "attn_logit_softcapping: expected a positive number or null"},
      {"Gemma2ForCausalLM",
       {{"layer_types", {"full_attention"}}},
       absl::StatusCode::kInvalidArgument,
       "layer_types: expected one entry per layer"},
      {"Qwen3ForCausalLM",
       {{"layer_types", {"sliding_attention", "full_attention"}}},
       absl::StatusCode::kInvalidArgument,
       "layer_types: sliding layers need use_sliding_window"},
      {"MistralForCausalLM",
       {{"attention_bias", true}, {"hidden_act", 3}},
       absl::StatusCode::kInvalidArgument,
       "hidden_act: expected the activation's name"},
      {"Qwen3ForCausalLM",
       {{"use_sliding_window", true}, {"layer_types", {"full_attention", "chunked_attention"}}},
       absl::StatusCode::kInvalidArgument,
       "layer_types[1]"},
      {"MistralForCausalLM",
       {{"sliding_window", 0}},
       absl::StatusCode::kInvalidArgument,
       "sliding_window: expected a positive integer"},
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

TEST(ModelConfigTest, SlidingWindowLayersFollowEachArchitecture) {
  struct Case {
    std::string arch;
    nlohmann::json patch;
    int64_t window;
    std::vector<bool> windowed;
  };
  nlohmann::json four_layers = {{"num_hidden_layers", 4}};
  const std::vector<Case> cases = {
      // transformers' default window when the field is absent; null means none.
      {"MistralForCausalLM", {}, 4096, {true, true, true, true}},
      {"MistralForCausalLM", {{"sliding_window", nullptr}}, 0, {false, false, false, false}},
      {"Phi3ForCausalLM", {}, 0, {false, false, false, false}},
      {"Phi3ForCausalLM", {{"sliding_window", 2047}}, 2047, {true, true, true, true}},
      {"Gemma2ForCausalLM", {{"sliding_window", 8}}, 8, {true, false, true, false}},
      {"Qwen2ForCausalLM", {{"sliding_window", 8}}, 8, {false, false, false, false}},
      {"Qwen3ForCausalLM",
       {{"use_sliding_window", true}, {"sliding_window", 8}, {"max_window_layers", 1}},
       8,
       {false, true, true, true}},
      // max_window_layers 0: every layer.
      {"Qwen2ForCausalLM",
       {{"use_sliding_window", true}, {"sliding_window", 8}, {"max_window_layers", 0}},
       8,
       {true, true, true, true}},
      // Mistral windows every layer whatever layer_types says (transformers ignores it there).
      {"MistralForCausalLM",
       {{"sliding_window", 8},
        {"layer_types", {"full_attention", "full_attention", "full_attention", "full_attention"}}},
       8,
       {true, true, true, true}},
      {"Qwen3ForCausalLM",
       {{"use_sliding_window", true},
        {"sliding_window", 8},
        {"layer_types",
         {"sliding_attention", "full_attention", "sliding_attention", "full_attention"}}},
       8,
       {true, false, true, false}},
      {"LlamaForCausalLM", {{"sliding_window", 8}}, 0, {false, false, false, false}},
  };
  for (const Case& c : cases) {
    nlohmann::json j = Base(c.arch);
    j.update(four_layers);
    if (!c.patch.is_null()) j.update(c.patch);
    auto parsed = ModelConfig::FromJson(j, "config.json");
    ASSERT_TRUE(parsed.ok()) << c.arch << " " << c.patch << ": " << parsed.status();
    std::vector<bool> windowed;
    for (int64_t i = 0; i < 4; ++i) windowed.push_back(parsed->windowed(i));
    EXPECT_EQ(windowed, c.windowed) << c.arch << " " << c.patch;
    EXPECT_EQ(parsed->windowed(0) || parsed->windowed(1) ? parsed->sliding_window : 0,
              c.windowed[0] || c.windowed[1] ? c.window : 0)
        << c.arch << " " << c.patch;
    // The config.json gpeserve writes reads back with the same windows.
    auto again = ModelConfig::FromJson(parsed->ToJson(), "again");
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->windowed_layers, parsed->windowed_layers) << c.arch << " " << c.patch;
    EXPECT_EQ(again->sliding_window, parsed->sliding_window) << c.arch << " " << c.patch;
  }
}

TEST(ModelConfigTest, FamiliesReadTheirOwnFields) {
  nlohmann::json gemma = Base("Gemma2ForCausalLM");
  gemma["query_pre_attn_scalar"] = 144;
  gemma["final_logit_softcapping"] = nullptr;
  auto g = ModelConfig::FromJson(gemma, "config.json");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->head_dim, 256);  // transformers' Gemma 2 default, not hidden / heads
  EXPECT_TRUE(g->tie_word_embeddings);
  EXPECT_EQ(g->activation, Activation::kGeluTanh);
  EXPECT_DOUBLE_EQ(g->attention_scale(), 1.0 / 12.0);
  EXPECT_EQ(g->attn_logit_softcapping, 50.0);
  EXPECT_EQ(g->final_logit_softcapping, 0.0);
  EXPECT_TRUE(g->scale_embeddings && g->norm_weight_plus_one && g->sandwich_norms);

  auto q = ModelConfig::FromJson(Base("Qwen3ForCausalLM"), "config.json");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->head_dim, 128);
  EXPECT_TRUE(q->qk_norm);
  EXPECT_FALSE(q->attention_bias || q->tie_word_embeddings);

  nlohmann::json phi = Base("Phi3ForCausalLM");
  phi["partial_rotary_factor"] = 0.5;
  phi["max_position_embeddings"] = 131072;
  phi["original_max_position_embeddings"] = 4096;
  phi["rope_scaling"] = {{"type", "su"},
                         {"short_factor", std::vector<double>(4, 1.0)},
                         {"long_factor", std::vector<double>(4, 2.0)}};
  auto p = ModelConfig::FromJson(phi, "config.json");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->fused_projections);
  EXPECT_EQ(p->rotary_dim, 8);
  EXPECT_EQ(p->rope_scaling.type, RopeScaling::Type::kLongRope);
  EXPECT_EQ(p->rope_scaling.original_max_position, 4096);
  EXPECT_NEAR(p->rope_scaling.attention_factor, std::sqrt(1 + std::log(32.0) / std::log(4096.0)),
              1e-12);
  // Each family's config.json reads back as written.
  for (const ModelConfig& c : {*g, *q, *p}) {
    auto again = ModelConfig::FromJson(c.ToJson(), "again");
    ASSERT_TRUE(again.ok()) << c.architecture_name << ": " << again.status();
    EXPECT_EQ(again->ToJson(), c.ToJson()) << c.architecture_name;
  }
}

}  // namespace
}  // namespace gpeserve::model
