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
      {"Gemma3ForCausalLM",
       {{"use_bidirectional_attention", true}},
       absl::StatusCode::kUnimplemented,
       "use_bidirectional_attention: bidirectional attention"},
      {"Gemma3ForCausalLM",
       {{"sliding_window_pattern", 0}},
       absl::StatusCode::kInvalidArgument,
       "sliding_window_pattern: expected a positive integer"},
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
      // Gemma 3: every sliding_window_pattern-th layer global (6 when absent), or layer_types.
      {"Gemma3ForCausalLM", {{"sliding_window", 8}}, 8, {true, true, true, true}},
      {"Gemma3ForCausalLM",
       {{"sliding_window", 8}, {"sliding_window_pattern", 2}},
       8,
       {true, false, true, false}},
      {"Gemma3ForCausalLM",
       {{"sliding_window", 8},
        {"sliding_window_pattern", 2},
        {"layer_types",
         {"full_attention", "sliding_attention", "sliding_attention", "full_attention"}}},
       8,
       {false, true, true, false}},
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
  // Gemma 3: Gemma 2's switches with q/k norms, its own defaults (rope 1e6 global, 1e4 local,
  // no soft-capping), and attention scores never capped (transformers ignores the field).
  nlohmann::json gemma3 = Base("Gemma3ForCausalLM");
  gemma3.erase("rope_theta");
  gemma3["num_hidden_layers"] = 7;
  gemma3["attn_logit_softcapping"] = 50.0;
  gemma3["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  auto g3 = ModelConfig::FromJson(gemma3, "config.json");
  ASSERT_TRUE(g3.ok()) << g3.status();
  EXPECT_STREQ(g3->model_type(), "gemma3_text");
  EXPECT_EQ(g3->head_dim, 256);
  EXPECT_TRUE(g3->qk_norm && g3->scale_embeddings && g3->norm_weight_plus_one &&
              g3->sandwich_norms && g3->tie_word_embeddings);
  EXPECT_EQ(g3->rope_theta, 1e6);
  EXPECT_EQ(g3->rope_local_theta, 1e4);
  EXPECT_EQ(g3->rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(g3->attn_logit_softcapping, 0.0);
  EXPECT_EQ(g3->final_logit_softcapping, 0.0);
  EXPECT_EQ(g3->sliding_window, 4096);
  for (int64_t layer = 0; layer < 7; ++layer) {
    EXPECT_EQ(g3->local_rotary(layer), layer != 5) << layer;
  }
  EXPECT_FALSE(g->local_rotary(0));  // Gemma 2: one rotary for every layer
  // Fields a checkpoint leaves out take Gemma3TextConfig's defaults.
  auto sparse = ModelConfig::FromJson(
      {{"architectures", {"Gemma3ForCausalLM"}}, {"hidden_size", 640}}, "config.json");
  ASSERT_TRUE(sparse.ok()) << sparse.status();
  EXPECT_EQ(sparse->vocab_size, 262208);
  EXPECT_EQ(sparse->num_layers, 26);
  EXPECT_EQ(sparse->num_kv_heads, 4);
  EXPECT_EQ(sparse->max_position_embeddings, 131072);
  // Each family's config.json reads back as written.
  for (const ModelConfig& c : {*g, *q, *p, *g3}) {
    auto again = ModelConfig::FromJson(c.ToJson(), "again");
    ASSERT_TRUE(again.ok()) << c.architecture_name << ": " << again.status();
    EXPECT_EQ(again->ToJson(), c.ToJson()) << c.architecture_name;
  }
}

// Gemma3ForConditionalGeneration: the text model's config is text_config, the rest taken from
// Gemma3TextConfig's defaults (Gemma 3 4B's config.json, its vision part cut short).
TEST(ModelConfigTest, MultimodalGemma3ReadsItsTextConfig) {
  const nlohmann::json j = {
      {"architectures", {"Gemma3ForConditionalGeneration"}},
      {"model_type", "gemma3"},
      {"eos_token_id", {1, 106}},
      {"torch_dtype", "bfloat16"},
      {"text_config",
       {{"hidden_size", 2560},
        {"intermediate_size", 10240},
        {"model_type", "gemma3_text"},
        {"num_hidden_layers", 34},
        {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
        {"sliding_window", 1024}}},
      {"vision_config", {{"hidden_size", 1152}, {"model_type", "siglip_vision_model"}}}};
  auto c = ModelConfig::FromJson(j, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->multimodal);
  EXPECT_EQ(c->architecture, Architecture::kGemma3);
  EXPECT_EQ(c->architecture_name, "Gemma3ForConditionalGeneration");
  EXPECT_EQ(c->hidden_size, 2560);
  EXPECT_EQ(c->num_layers, 34);
  EXPECT_EQ(c->num_heads, 8);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_EQ(c->vocab_size, 262208);
  EXPECT_EQ(c->sliding_window, 1024);
  EXPECT_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{1, 106}));
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->ToJson()["architectures"][0], "Gemma3ForCausalLM");
  auto again = ModelConfig::FromJson(c->ToJson(), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->multimodal);
  EXPECT_EQ(again->windowed_layers, c->windowed_layers);

  nlohmann::json bad = j;
  bad["text_config"]["num_attention_heads"] = -1;
  auto parsed = ModelConfig::FromJson(bad, "dir/config.json");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("dir/config.json: text_config: num_attention_heads"),
            std::string::npos)
      << parsed.status();
  bad["text_config"] = 3;
  EXPECT_EQ(ModelConfig::FromJson(bad, "c").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpeserve::model
