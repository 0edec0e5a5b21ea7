#include "tests/engine/test_models.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "tests/engine/tokenizer/test_tokenizers.h"

namespace gpeserve::testing {

std::vector<model::MakeModelOptions> TestFamilies() {
  return {
      {.arch = "qwen2"},
      {.arch = "llama"},
      {.arch = "mistral", .sliding_window = 6},
      {.arch = "gemma2",
       .sliding_window = 8,
       .attn_logit_softcapping = 1.0,
       .final_logit_softcapping = 3.0},
      {.arch = "qwen3", .sliding_window = 7, .max_window_layers = 1},
      {.arch = "phi3",
       .rope_scaling = "longrope",
       .sliding_window = 9,
       .partial_rotary_factor = 0.5,
       .original_max_position_embeddings = 24},
  };
}

std::string WriteTinyChatModel(uint64_t seed, const std::string& dir_name,
                               model::MakeModelOptions family) {
  namespace fs = std::filesystem;
  const fs::path dir(dir_name);
  fs::create_directories(dir / "tok");
  std::ofstream((dir / "tok" / "tokenizer.json").string())
      << tokenizer::testing::ByteLevelJson(
             {}, {},
             nlohmann::json::array({tokenizer::testing::Added(256, "<|im_start|>", true),
                                    tokenizer::testing::Added(257, "<|im_end|>", true)}))
             .dump();
  std::ofstream((dir / "tok" / "tokenizer_config.json").string())
      << R"({"eos_token": "<|im_end|>"})";
  model::MakeModelOptions o = std::move(family);
  if (o.arch.empty()) o.arch = "qwen2";
  o.tokenizer_dir = (dir / "tok").string();
  o.seed = seed;
  o.init_std = 0.3;
  const std::string out = (dir / (o.arch + std::to_string(seed))).string();
  const absl::Status made = model::MakeModel(o, out);
  EXPECT_TRUE(made.ok()) << made;
  return out;
}

std::shared_ptr<const model::Model> TinyChatModel(uint64_t seed, model::MakeModelOptions family) {
  namespace fs = std::filesystem;
  // One folder per process: test binaries run in parallel, and rewriting a safetensors file
  // that another process has memory-mapped would crash it (SIGBUS).
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("gpe_tiny_chat_models_" + std::to_string(::getpid()));
  const std::string out = WriteTinyChatModel(seed, dir.string(), std::move(family));
  auto m = model::Model::Load(out, {.threads = 2});
  EXPECT_TRUE(m.ok()) << m.status();
  fs::remove_all(dir);  // the loaded model keeps its mapping of the removed file
  return m.ok() ? *m : nullptr;
}

}  // namespace gpeserve::testing
