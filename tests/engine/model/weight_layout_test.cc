#include "engine/model/weight_layout.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>

#include "cli/quantize.h"
#include "engine/model/model.h"
#include "engine/util/remove_tree.h"
#include "tests/engine/test_models.h"

namespace gpeserve::model {
namespace {

namespace fs = std::filesystem;

// Every architecture with every optional tensor somewhere: the test families, llama with all
// its biases and an untied head, gemma2 with attention biases.
std::vector<MakeModelOptions> Families() {
  std::vector<MakeModelOptions> families = testing::TestFamilies();
  families.push_back(
      {.arch = "llama", .tie_word_embeddings = false, .attention_bias = true, .mlp_bias = true});
  families.push_back({.arch = "gemma2", .attention_bias = true});
  return families;
}

class WeightLayoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("gpe_weight_layout_" + std::to_string(::getpid()));
  }
  void TearDown() override { (void)RemoveTree(dir_.string()); }

  fs::path dir_;
};

// The folder's tensors by name, as loaded from the file itself.
std::map<std::string, torch::Tensor> FileTensors(const std::string& folder) {
  auto file = SafetensorsFile::Open(folder + "/model.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  std::map<std::string, torch::Tensor> tensors;
  for (const TensorInfo& info : (*file)->tensors()) {
    tensors[info.name] = torch::from_blob(const_cast<void*>((*file)->Data(info)), info.shape,
                                          torch::TensorOptions().dtype(TorchType(info.dtype)))
                             .clone();
  }
  return tensors;
}

// What a model loaded from `folder` writes back (NamedWeights) is the folder's file: the same
// names in layout order, the same values bit for bit. Fails where loading and writing disagree
// on a member (a fused projection's split, a norm's role).
void ExpectWritesBackItsFile(const std::string& folder, const std::string& dtype) {
  auto model = Model::Load(folder, {.dtype = dtype, .threads = 2});
  ASSERT_TRUE(model.ok()) << model.status();
  const std::map<std::string, torch::Tensor> file = FileTensors(folder);
  const auto named = NamedWeights((*model)->config(), (*model)->weights());
  ASSERT_EQ(named.size(), file.size()) << folder;
  std::vector<std::string> layout_names;
  for (const WeightSpec& spec : WeightLayout((*model)->config())) {
    layout_names.push_back(spec.name);
    if (spec.kind == WeightSpec::Kind::kMatrix && file.contains(spec.name + "_scale")) {
      layout_names.push_back(spec.name + "_scale");
    }
  }
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& [name, tensor] = named[i];
    EXPECT_EQ(name, layout_names[i]);
    ASSERT_TRUE(file.contains(name)) << folder << ": wrote " << name << ", not in the file";
    const torch::Tensor& stored = file.at(name);
    EXPECT_EQ(tensor.scalar_type(), stored.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(tensor.contiguous(), stored)) << folder << ": " << name;
  }
}

TEST_F(WeightLayoutTest, LoadingThenWritingGivesBackTheFile) {
  uint64_t seed = 1;
  for (const MakeModelOptions& family : Families()) {
    SCOPED_TRACE(family.arch);
    const std::string folder = testing::WriteTinyChatModel(seed++, dir_.string(), family);
    ExpectWritesBackItsFile(folder, "fp32");
    // int8: each matrix's scale follows it.
    const std::string quantized = folder + "-int8";
    ASSERT_TRUE(QuantizeModel(folder, quantized, 2).ok());
    ExpectWritesBackItsFile(quantized, "int8");
  }
}

// Each member is filled by one tensor at most, every layer member the architecture has is
// filled, and the names are unique in both conventions.
TEST(WeightLayoutStructureTest, EveryMemberOnceAndEveryNameOnce) {
  for (const MakeModelOptions& family : Families()) {
    SCOPED_TRACE(family.arch);
    auto config = MakeConfig(family, 300);
    ASSERT_TRUE(config.ok()) << config.status();
    Weights weights;
    weights.layers.resize(config->num_layers);
    std::set<std::string> names, gguf_names;
    std::set<const void*> filled;
    for (const WeightSpec& spec : WeightLayout(*config)) {
      EXPECT_TRUE(names.insert(spec.name).second) << spec.name;
      EXPECT_TRUE(gguf_names.insert(spec.gguf_name).second) << spec.gguf_name;
      int64_t rows = 0;
      if (spec.kind == WeightSpec::Kind::kMatrix) {
        for (Matrix* m : HeldMatrices(spec, weights)) {
          EXPECT_TRUE(filled.insert(m).second) << spec.name << " fills a member twice";
        }
        for (const WeightSpec::Part& part : spec.parts) rows += part.rows;
        // Mark the members defined, as loading would.
        PlaceMatrix(spec, {torch::zeros(spec.shape), torch::Tensor()}, weights);
      } else {
        ASSERT_EQ(spec.parts.size(), 1u);
        EXPECT_TRUE(filled.insert(&HeldVector(spec, weights)).second) << spec.name;
        rows = spec.parts[0].rows;
        HeldVector(spec, weights) = torch::zeros(spec.shape);
      }
      EXPECT_EQ(rows, spec.shape[0]) << spec.name << ": the parts split every row";
    }
    // What the forward pass reads of a layer: its norms, matrices, and the biases the config
    // turns on.
    const int64_t expected_per_layer = 2 + 7 + (config->sandwich_norms ? 2 : 0) +
                                       (config->qk_norm ? 2 : 0) +
                                       (config->attention_bias ? 3 : 0) +
                                       (config->o_proj_bias ? 1 : 0) + (config->mlp_bias ? 3 : 0);
    for (LayerWeights& layer : weights.layers) {
      int64_t defined = 0;
      layer.ForEachTensor([&](torch::Tensor& t) { defined += t.defined(); });
      EXPECT_EQ(defined, expected_per_layer);
    }
    EXPECT_TRUE(weights.embed.data.defined() && weights.final_norm.defined());
    EXPECT_EQ(weights.lm_head.data.defined(), !config->tie_word_embeddings);
  }
}

// The GGUF names of one llama layer as llama.cpp's converter writes them (gguf-py's tensor
// mapping), and Phi-3's fused projections under its names.
TEST(WeightLayoutStructureTest, GgufNamesAreLlamaCpps) {
  auto llama = MakeConfig({.arch = "llama", .num_layers = 1, .tie_word_embeddings = false}, 300);
  ASSERT_TRUE(llama.ok());
  std::vector<std::string> gguf;
  for (const WeightSpec& spec : WeightLayout(*llama)) gguf.push_back(spec.gguf_name);
  EXPECT_EQ(gguf, (std::vector<std::string>{
                      "token_embd.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight",
                      "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
                      "blk.0.attn_output.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight",
                      "blk.0.ffn_down.weight", "output_norm.weight", "output.weight"}));
  auto phi3 = MakeConfig({.arch = "phi3", .num_layers = 1}, 300);
  ASSERT_TRUE(phi3.ok());
  std::map<std::string, std::string> hf_to_gguf;
  for (const WeightSpec& spec : WeightLayout(*phi3)) hf_to_gguf[spec.name] = spec.gguf_name;
  EXPECT_EQ(hf_to_gguf["model.layers.0.self_attn.qkv_proj.weight"], "blk.0.attn_qkv.weight");
  EXPECT_EQ(hf_to_gguf["model.layers.0.mlp.gate_up_proj.weight"], "blk.0.ffn_up.weight");
}

}  // namespace
}  // namespace gpeserve::model
