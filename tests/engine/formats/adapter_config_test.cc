// PEFT's rules for which modules an adapter_config.json adapts and how much, against cases
// worked out from PEFT's check_target_module_exists and get_pattern_key.
#include "engine/formats/adapter_config.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "engine/util/remove_tree.h"
#include "gtest/gtest.h"

namespace gpeserve::model {
namespace {

AdapterConfig Parse(const std::string& text) {
  auto config = AdapterConfig::FromJson(nlohmann::json::parse(text), "adapter_config.json");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : AdapterConfig();
}

ModelConfig TwoLayers(bool fused = false) {
  ModelConfig c;
  c.vocab_size = 100;
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.fused_projections = fused;
  c.architecture_name = "Test";
  return c;
}

std::vector<std::string> Names(const std::vector<AdaptableModule>& modules) {
  std::vector<std::string> names;
  for (const AdaptableModule& m : modules) names.push_back(m.name);
  return names;
}

TEST(AdapterConfigTest, ListTargetsMatchNamesAndSuffixes) {
  const AdapterConfig c = Parse(R"({"r": 4, "target_modules": ["q_proj", "mlp.down_proj"]})");
  EXPECT_TRUE(c.Targets("model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(c.Targets("model.layers.1.mlp.down_proj"));
  EXPECT_FALSE(c.Targets("model.layers.0.self_attn.k_proj"));
  EXPECT_FALSE(c.Targets("model.layers.0.self_attn.xq_proj"));  // a suffix after a dot only
  auto targeted = TargetedModules(c, TwoLayers(), "adapter_config.json");
  ASSERT_TRUE(targeted.ok());
  EXPECT_EQ(Names(*targeted),
            (std::vector<std::string>{
                "model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj",
                "model.layers.1.self_attn.q_proj", "model.layers.1.mlp.down_proj"}));
}

TEST(AdapterConfigTest, RegexTargetsMatchWholeNamesAndIgnoreLayers) {
  const AdapterConfig c = Parse(
      R"({"target_modules": ".*\\.layers\\.1\\.self_attn\\.(q|v)_proj", "layers_to_transform": [0]})");
  EXPECT_TRUE(c.Targets("model.layers.1.self_attn.q_proj"));
  EXPECT_TRUE(c.Targets("model.layers.1.self_attn.v_proj"));
  EXPECT_FALSE(c.Targets("model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(c.Targets("model.layers.1.self_attn.q_proj.x"));
}

TEST(AdapterConfigTest, LayersToTransformAndPattern) {
  AdapterConfig c = Parse(R"({"target_modules": ["q_proj"], "layers_to_transform": 1})");
  EXPECT_FALSE(c.Targets("model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(c.Targets("model.layers.1.self_attn.q_proj"));
  c = Parse(R"({"target_modules": ["q_proj"], "layers_to_transform": [0],
                "layers_pattern": "blocks"})");
  EXPECT_FALSE(c.Targets("model.layers.0.self_attn.q_proj"));  // no "blocks" component
  c = Parse(R"({"target_modules": ["q_proj"], "layers_to_transform": [0],
                "layers_pattern": ["h", "layers"]})");
  EXPECT_TRUE(c.Targets("model.layers.0.self_attn.q_proj"));
}

TEST(AdapterConfigTest, AllLinearAndExcludes) {
  const AdapterConfig c =
      Parse(R"({"target_modules": "all-linear", "exclude_modules": ["o_proj"]})");
  // target_modules "all-linear" is a list entry PEFT expands, not a regex.
  EXPECT_FALSE(c.target_regex.has_value());
  auto targeted = TargetedModules(c, TwoLayers(/*fused=*/true), "adapter_config.json");
  ASSERT_TRUE(targeted.ok()) << targeted.status();
  EXPECT_EQ(Names(*targeted),
            (std::vector<std::string>{
                "model.layers.0.self_attn.qkv_proj", "model.layers.0.mlp.gate_up_proj",
                "model.layers.0.mlp.down_proj", "model.layers.1.self_attn.qkv_proj",
                "model.layers.1.mlp.gate_up_proj", "model.layers.1.mlp.down_proj"}));
  const AdapterConfig regex_exclude =
      Parse(R"({"target_modules": ["q_proj"], "exclude_modules": ".*layers\\.0.*"})");
  EXPECT_FALSE(regex_exclude.Targets("model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(regex_exclude.Targets("model.layers.1.self_attn.q_proj"));
}

TEST(AdapterConfigTest, RankAndAlphaPatternsAndScaling) {
  const AdapterConfig c = Parse(R"({"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"],
      "rank_pattern": {"down_proj": 2, "layers.1.self_attn.q_proj": 4},
      "alpha_pattern": {"q_proj": 3}})");
  EXPECT_EQ(c.RankOf("model.layers.0.self_attn.q_proj"), 8);
  EXPECT_EQ(c.RankOf("model.layers.1.self_attn.q_proj"), 4);
  EXPECT_EQ(c.RankOf("model.layers.0.mlp.down_proj"), 2);
  EXPECT_DOUBLE_EQ(c.ScalingOf("model.layers.0.self_attn.q_proj", 8), 3.0 / 8);
  EXPECT_DOUBLE_EQ(c.ScalingOf("model.layers.0.mlp.down_proj", 2), 16.0 / 2);
  const AdapterConfig rs = Parse(R"({"r": 16, "lora_alpha": 8, "use_rslora": true,
                                     "target_modules": ["q_proj"]})");
  EXPECT_DOUBLE_EQ(rs.ScalingOf("model.layers.0.self_attn.q_proj", 16), 8.0 / 4);
}

TEST(AdapterConfigTest, RefusesWhatIsNotComputed) {
  for (const char* text :
       {R"({"target_modules": ["q"], "use_dora": true})",
        R"({"target_modules": ["q"], "bias": "lora_only"})",
        R"({"target_modules": ["q"], "peft_type": "PREFIX_TUNING"})",
        R"({"target_modules": ["q"], "task_type": "SEQ_CLS"})",
        R"({"target_modules": ["q"], "r": -1})", R"({"target_modules": "([unclosed"})",
        R"({"target_modules": 5})", R"({"r": 4})", R"([1, 2])"}) {
    auto config = AdapterConfig::FromJson(nlohmann::json::parse(text), "x/adapter_config.json");
    EXPECT_FALSE(config.ok()) << text;
    if (!config.ok()) {
      EXPECT_NE(std::string(config.status().message()).find("x/adapter_config.json"),
                std::string::npos);
    }
  }
}

TEST(AdapterConfigTest, ToJsonRoundTrips) {
  const AdapterConfig c = Parse(R"({"r": 4, "lora_alpha": 8, "use_rslora": true,
      "target_modules": ["q_proj", "v_proj"], "layers_to_transform": [1],
      "modules_to_save": ["lm_head"], "rank_pattern": {"v_proj": 2}})");
  const AdapterConfig back = Parse(c.ToJson().dump());
  EXPECT_EQ(back.ToJson(), c.ToJson());
  EXPECT_EQ(back.RankOf("model.layers.1.self_attn.v_proj"), 2);
}

// prompt.json beside adapter_config.json gives the adapter's instruction; without it there is
// none; a malformed one is refused naming the file.
TEST(AdapterConfigTest, PromptFileGivesTheInstruction) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("gpe_adapter_prompt_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
  };
  write("adapter_config.json", R"({"r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]})");
  auto plain = LoadAdapterConfig(dir.string());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->instruction.has_value());
  EXPECT_EQ(AdapterPromptJson(*plain), nlohmann::json::object());

  AdapterConfig with = *plain;
  with.instruction = "Translate the following German paragraph to English";
  write(kAdapterPromptFile, AdapterPromptJson(with).dump());
  auto loaded = LoadAdapterConfig(dir.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->instruction, with.instruction);
  // Not PEFT's: adapter_config.json stays as PEFT writes it.
  EXPECT_FALSE(loaded->ToJson().contains("instruction"));

  for (const char* bad : {R"(["x"])", R"({"instruction": 5})", R"({"instructions": "x"})", "{"}) {
    write(kAdapterPromptFile, bad);
    auto refused = LoadAdapterConfig(dir.string());
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(refused.status().message().find("prompt.json"), std::string::npos)
        << refused.status();
  }
  EXPECT_TRUE(model::RemoveTree(dir).ok());
}

}  // namespace
}  // namespace gpeserve::model
