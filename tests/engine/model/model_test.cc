#include "engine/model/model.h"

#include <torch/cuda.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/make_model.h"
#include "cli/quantize.h"
#include "engine/kernels/cpu_matmul.h"
#include "engine/util/remove_tree.h"
#include "gtest/gtest.h"
#include "tests/engine/tokenizer/test_tokenizers.h"

namespace gpeserve::model {
namespace {

namespace fs = std::filesystem;

// A fresh folder under the test temp dir, one per process: ctest runs this binary three times
// at once (model_test, model_test_scalar, model_test_avx2).
std::string TempFolder(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("gpe_model_test_" + std::to_string(::getpid()) + "_" + name);
  EXPECT_TRUE(model::RemoveTree(dir).ok());
  fs::create_directories(dir);
  return dir.string();
}

// A byte-level tokenizer folder (256 tokens + 2 specials).
std::string TokenizerFolder() {
  static const std::string dir = [] {
    const std::string d = TempFolder("tokenizer");
    nlohmann::json added =
        nlohmann::json::array({tokenizer::testing::Added(256, "<|im_start|>", true),
                               tokenizer::testing::Added(257, "<|im_end|>", true)});
    std::ofstream(d + "/tokenizer.json") << tokenizer::testing::ByteLevelJson({}, {}, added).dump();
    std::ofstream(d + "/tokenizer_config.json") << R"({"eos_token": "<|im_end|>"})";
    return d;
  }();
  return dir;
}

std::string MakeTiny(const std::string& name, const std::string& arch, uint64_t seed,
                     DType stored = DType::kF32) {
  const std::string dir = TempFolder(name);
  MakeModelOptions o;
  o.dtype = stored;
  o.arch = arch;
  o.preset = "tiny";
  o.tokenizer_dir = TokenizerFolder();
  o.seed = seed;
  o.init_std = 0.2;
  const absl::Status s = MakeModel(o, dir);
  EXPECT_TRUE(s.ok()) << s;
  return dir;
}

std::shared_ptr<const Model> LoadOrDie(const std::string& dir, const std::string& dtype = "fp32") {
  auto m = Model::Load(dir, {.dtype = dtype, .device = "cpu", .threads = 2});
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : nullptr;
}

torch::Tensor Ids(const std::vector<int64_t>& v) { return torch::tensor(v, torch::kInt64); }

double RelativeError(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max()).item<double>();
}

TEST(ModelTest, LoadsConfigTokenizerAndEos) {
  auto m = LoadOrDie(MakeTiny("load", "qwen2", 1));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->config().vocab_size, 320);  // 258 tokens rounded up to a multiple of 64
  ASSERT_NE(m->tokenizer(), nullptr);
  EXPECT_EQ(m->config().eos_token_ids, std::vector<int64_t>{257});
  EXPECT_GT(m->weight_bytes(), 0);
}

// One forward over all tokens == the same tokens fed in chunks with a growing K/V cache, for
// plain positions and for two position groups (as group position encoding produces).
TEST(ModelTest, ChunkedWithCacheEqualsFullForward) {
  for (const std::string arch : {"qwen2", "llama", "mistral"}) {
    auto m = LoadOrDie(MakeTiny("chunked_" + arch, arch, 2));
    ASSERT_NE(m, nullptr);
    const std::vector<int64_t> tokens = {5, 17, 99, 3, 250, 42, 7, 300, 11, 64};
    for (const std::vector<int64_t>& positions :
         {std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
          std::vector<int64_t>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3}}) {
      const int64_t t = static_cast<int64_t>(tokens.size());
      DenseAttention full({}, {}, DenseAttention::CausalMask(t));
      auto expected = m->Forward(Ids(tokens), Ids(positions), torch::arange(t), full);
      ASSERT_TRUE(expected.ok()) << expected.status();

      std::vector<torch::Tensor> past_k, past_v;
      int64_t done = 0;
      for (int64_t chunk : {3, 1, 1, 4, 1}) {
        std::vector<int64_t> ids(tokens.begin() + done, tokens.begin() + done + chunk);
        std::vector<int64_t> pos(positions.begin() + done, positions.begin() + done + chunk);
        // New token i sees all cached keys and new tokens 0..i.
        torch::Tensor allowed = torch::cat(
            {torch::ones({chunk, done}, torch::kBool), DenseAttention::CausalMask(chunk)}, 1);
        DenseAttention step(past_k, past_v, allowed);
        auto logits = m->Forward(Ids(ids), Ids(pos), torch::arange(chunk), step);
        ASSERT_TRUE(logits.ok()) << logits.status();
        EXPECT_LT(RelativeError(*logits, expected->slice(0, done, done + chunk)), 1e-5)
            << arch << " chunk at " << done;
        for (size_t l = 0; l < step.new_k().size(); ++l) {
          if (past_k.size() <= l) {
            past_k.push_back(step.new_k()[l]);
            past_v.push_back(step.new_v()[l]);
          } else {
            past_k[l] = torch::cat({past_k[l], step.new_k()[l]});
            past_v[l] = torch::cat({past_v[l], step.new_v()[l]});
          }
        }
        done += chunk;
      }
    }
  }
}

TEST(ModelTest, BatchedSequencesEqualSeparateRuns) {
  auto m = LoadOrDie(MakeTiny("batched", "llama", 3));
  ASSERT_NE(m, nullptr);
  const std::vector<int64_t> a = {1, 2, 3, 4, 5}, b = {9, 8, 7};
  auto run = [&](const std::vector<int64_t>& ids) {
    const int64_t t = static_cast<int64_t>(ids.size());
    DenseAttention attn({}, {}, DenseAttention::CausalMask(t));
    return *m->Forward(Ids(ids), torch::arange(t), torch::arange(t), attn);
  };
  torch::Tensor allowed = torch::zeros({8, 8}, torch::kBool);
  allowed.slice(0, 0, 5).slice(1, 0, 5).copy_(DenseAttention::CausalMask(5));
  allowed.slice(0, 5, 8).slice(1, 5, 8).copy_(DenseAttention::CausalMask(3));
  DenseAttention attn({}, {}, allowed);
  // Only the last row of each sequence is asked for, as a decode step would.
  auto batched =
      m->Forward(Ids({1, 2, 3, 4, 5, 9, 8, 7}), Ids({0, 1, 2, 3, 4, 0, 1, 2}), Ids({4, 7}), attn);
  ASSERT_TRUE(batched.ok()) << batched.status();
  EXPECT_EQ(batched->size(0), 2);
  EXPECT_LT(RelativeError(batched->slice(0, 0, 1), run(a).slice(0, 4, 5)), 1e-5);
  EXPECT_LT(RelativeError(batched->slice(0, 1, 2), run(b).slice(0, 2, 3)), 1e-5);
}

TEST(ModelTest, ForwardRejectsBadInput) {
  auto m = LoadOrDie(MakeTiny("badinput", "qwen2", 4));
  ASSERT_NE(m, nullptr);
  DenseAttention attn({}, {}, DenseAttention::CausalMask(2));
  EXPECT_EQ(m->Forward(Ids({1, 999}), Ids({0, 1}), Ids({1}), attn).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m->Forward(Ids({1, 2}), Ids({0, -1}), Ids({1}), attn).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m->Forward(Ids({1, 2}), Ids({0, 1}), Ids({2}), attn).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m->Forward(Ids({1, 2}), Ids({0}), Ids({0}), attn).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Rewrites DIR/model.safetensors through `edit`, which may drop or change tensors.
void RewriteWeights(const std::string& dir,
                    const std::function<void(std::vector<TensorToWrite>*)>& edit) {
  const std::string path = dir + "/model.safetensors";
  std::vector<TensorToWrite> tensors;
  std::vector<std::vector<char>> storage;
  {
    auto file = SafetensorsFile::Open(path);
    ASSERT_TRUE(file.ok());
    for (const TensorInfo& t : (*file)->tensors()) {
      const char* data = static_cast<const char*>((*file)->Data(t));
      storage.emplace_back(data, data + t.size);
    }
    for (size_t i = 0; i < (*file)->tensors().size(); ++i) {
      const TensorInfo& t = (*file)->tensors()[i];
      tensors.push_back({t.name, t.dtype, t.shape, storage[i].data()});
    }
  }
  edit(&tensors);
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
}

TEST(ModelTest, ShardedCheckpointEqualsSingleFile) {
  const std::string dir = MakeTiny("sharded", "llama", 7);
  auto single = LoadOrDie(dir);
  ASSERT_NE(single, nullptr);
  DenseAttention a({}, {}, DenseAttention::CausalMask(3));
  const torch::Tensor expected =
      *single->Forward(Ids({4, 5, 6}), torch::arange(3), torch::arange(3), a);
  single.reset();
  // Split the tensors over two shards and describe them in an index.
  std::vector<TensorToWrite> tensors;
  std::vector<std::vector<char>> storage;
  {
    auto file = SafetensorsFile::Open(dir + "/model.safetensors");
    ASSERT_TRUE(file.ok());
    for (const TensorInfo& t : (*file)->tensors()) {
      const char* data = static_cast<const char*>((*file)->Data(t));
      storage.emplace_back(data, data + t.size);
    }
    for (size_t i = 0; i < (*file)->tensors().size(); ++i) {
      const TensorInfo& t = (*file)->tensors()[i];
      tensors.push_back({t.name, t.dtype, t.shape, storage[i].data()});
    }
  }
  const size_t half = tensors.size() / 2;
  const std::vector<TensorToWrite> first(tensors.begin(), tensors.begin() + half),
      second(tensors.begin() + half, tensors.end());
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00001-of-00002.safetensors", first).ok());
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00002-of-00002.safetensors", second).ok());
  nlohmann::json index = {{"metadata", nlohmann::json::object()},
                          {"weight_map", nlohmann::json::object()}};
  for (const auto& t : first) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : second) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  fs::remove(dir + "/model.safetensors");
  auto sharded = LoadOrDie(dir);
  ASSERT_NE(sharded, nullptr);
  DenseAttention b({}, {}, DenseAttention::CausalMask(3));
  EXPECT_TRUE(torch::equal(*sharded->Forward(Ids({4, 5, 6}), torch::arange(3), torch::arange(3), b),
                           expected));
}

TEST(ModelTest, LoadErrorsNameFileAndTensor) {
  struct Case {
    std::string name;
    std::function<void(const std::string& dir)> damage;
    absl::StatusCode code;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"missing config", [](const std::string& d) { fs::remove(d + "/config.json"); },
       absl::StatusCode::kNotFound, "config.json: cannot open"},
      {"no weights", [](const std::string& d) { fs::remove(d + "/model.safetensors"); },
       absl::StatusCode::kNotFound, "no model.safetensors or model.safetensors.index.json"},
      {"missing tensor",
       [](const std::string& d) {
         RewriteWeights(d, [](std::vector<TensorToWrite>* t) {
           std::erase_if(*t, [](const TensorToWrite& w) {
             return w.name == "model.layers.1.mlp.up_proj.weight";
           });
         });
       },
       absl::StatusCode::kNotFound, "tensor 'model.layers.1.mlp.up_proj.weight' is missing"},
      {"wrong shape",
       [](const std::string& d) {
         RewriteWeights(d, [](std::vector<TensorToWrite>* t) {
           for (auto& w : *t) {
             if (w.name == "model.norm.weight") w.shape = {32, 2};
           }
         });
       },
       absl::StatusCode::kInvalidArgument, "tensor 'model.norm.weight' has shape [32, 2]"},
      {"truncated", [](const std::string& d) { fs::resize_file(d + "/model.safetensors", 100); },
       absl::StatusCode::kDataLoss, "model.safetensors: "},
      {"vocab mismatch",
       [](const std::string& d) {
         std::ifstream in(d + "/config.json");
         nlohmann::json c = nlohmann::json::parse(in);
         c["vocab_size"] = 200;
         std::ofstream(d + "/config.json") << c.dump();
       },
       absl::StatusCode::kInvalidArgument, "tokenizer and model do not match"},
      {"unknown architecture",
       [](const std::string& d) {
         std::ifstream in(d + "/config.json");
         nlohmann::json c = nlohmann::json::parse(in);
         c["architectures"] = {"BertModel"};
         std::ofstream(d + "/config.json") << c.dump();
       },
       absl::StatusCode::kUnimplemented, "unknown architecture 'BertModel'"},
  };
  for (const Case& c : cases) {
    const std::string dir = MakeTiny("damaged", "qwen2", 5);
    c.damage(dir);
    auto m = Model::Load(dir);
    ASSERT_FALSE(m.ok()) << c.name;
    EXPECT_EQ(m.status().code(), c.code) << c.name << ": " << m.status();
    EXPECT_NE(m.status().message().find(c.message_part), std::string::npos)
        << c.name << ": " << m.status();
  }
  const std::string dir = MakeTiny("options", "qwen2", 6);
  EXPECT_EQ(Model::Load(dir, {.dtype = "int4"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Model::Load(dir, {.device = "tpu"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  if (!torch::cuda::is_available()) {
    EXPECT_EQ(Model::Load(dir, {.device = "cuda"}).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

// Logits of `tokens` (causal, positions 0..) for every row.
torch::Tensor AllLogits(const Model& m, const std::vector<int64_t>& tokens) {
  const int64_t t = static_cast<int64_t>(tokens.size());
  DenseAttention attention({}, {}, DenseAttention::CausalMask(t));
  auto logits = m.Forward(Ids(tokens), torch::arange(t), torch::arange(t), attention);
  EXPECT_TRUE(logits.ok()) << logits.status();
  return logits.ok() ? *logits : torch::Tensor();
}

std::vector<int64_t> RandomTokens(int64_t count, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < count; ++i)
    tokens.push_back(static_cast<int64_t>((seed + i * 7919) % vocab));
  return tokens;
}

// bf16 and fp16 weights served as they are (the cpu_matmul kernels widen them in registers)
// compute what fp32 serving of the same values computes: both accumulate in fp32. Step sizes
// cover one row (decode), a few rows (the kernel's multi-row tiles) and more rows than the
// kernel takes (weight tiles widened for the fp32 GEMM).
TEST(ModelTest, SixteenBitWeightsComputeWhatFp32ComputesOnTheSameValues) {
  for (const auto& [stored, name] : {std::pair{DType::kBF16, "bf16"}, {DType::kF16, "fp16"}}) {
    for (const std::string arch : {"qwen2", "llama"}) {
      const std::string dir = MakeTiny(std::string("sixteen_") + name + arch, arch, 21, stored);
      auto as_stored = LoadOrDie(dir, name);
      auto as_fp32 = LoadOrDie(dir, "fp32");
      ASSERT_NE(as_stored, nullptr);
      ASSERT_NE(as_fp32, nullptr);
      EXPECT_STREQ(as_stored->weight_dtype_name(), name);
      EXPECT_EQ(as_stored->dtype(), torch::kFloat32);  // activations and KV cache
      EXPECT_LT(as_stored->weight_bytes(), as_fp32->weight_bytes() * 6 / 10);
      EXPECT_NE(as_stored->kernel_path().find(std::string(name) + " kernel"), std::string::npos)
          << as_stored->kernel_path();
      for (int64_t t : {1, 3, 7, 40}) {
        const std::vector<int64_t> tokens = RandomTokens(t, 258, 5 + t);
        const torch::Tensor got = AllLogits(*as_stored, tokens);
        const torch::Tensor want = AllLogits(*as_fp32, tokens);
        EXPECT_LT(RelativeError(got, want), 1e-5) << name << " " << arch << " T=" << t;
      }
    }
  }
}

// --cpu_activations bf16: each activation row rounded to bf16 before the bf16 matrices
// (AVX512-BF16's dot products where the CPU has them, else widened back to fp32): within bf16's
// rounding of the exact logits and not equal to them (the rounding is there) at every step size
// (decode rows, the kernel's tiles, prefill beyond 64 rows); rows batched with others compute
// what they compute alone; auto picks bf16 exactly where the CPU has the dot product; unknown
// names are refused.
TEST(ModelTest, Bf16ActivationsStayWithinTheirRoundingAndRowsStayAlone) {
  const std::string dir = MakeTiny("bf16_activations", "qwen2", 23, DType::kBF16);
  auto exact = LoadOrDie(dir, "bf16");
  auto rounded =
      Model::Load(dir, {.dtype = "bf16", .device = "cpu", .threads = 2, .cpu_activations = "bf16"});
  ASSERT_NE(exact, nullptr);
  ASSERT_TRUE(rounded.ok()) << rounded.status();
  const Model& m = **rounded;
  EXPECT_NE(m.kernel_path().find("bf16 activations"), std::string::npos) << m.kernel_path();
  EXPECT_EQ(exact->kernel_path().find("bf16 activations"), std::string::npos);
  for (int64_t t : {1, 3, 7, 40, 70}) {
    const std::vector<int64_t> tokens = RandomTokens(t, 258, 11 + t);
    const double error = RelativeError(AllLogits(m, tokens), AllLogits(*exact, tokens));
    EXPECT_LT(error, 3e-2) << "T=" << t;
    EXPECT_GT(error, 1e-6) << "T=" << t;
  }
  // Two sequences in one forward against each alone: the rounding is per row.
  torch::Tensor allowed = torch::zeros({8, 8}, torch::kBool);
  allowed.slice(0, 0, 5).slice(1, 0, 5).copy_(DenseAttention::CausalMask(5));
  allowed.slice(0, 5, 8).slice(1, 5, 8).copy_(DenseAttention::CausalMask(3));
  DenseAttention together({}, {}, allowed);
  auto batched = m.Forward(Ids({1, 2, 3, 4, 5, 9, 8, 7}), Ids({0, 1, 2, 3, 4, 0, 1, 2}),
                           Ids({4, 7}), together);
  ASSERT_TRUE(batched.ok()) << batched.status();
  EXPECT_LT(RelativeError(batched->slice(0, 0, 1), AllLogits(m, {1, 2, 3, 4, 5}).slice(0, 4, 5)),
            1e-5);
  EXPECT_LT(RelativeError(batched->slice(0, 1, 2), AllLogits(m, {9, 8, 7}).slice(0, 2, 3)), 1e-5);

  auto automatic = Model::Load(dir, {.dtype = "bf16", .threads = 2, .cpu_activations = "auto"});
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ((*automatic)->kernel_path().find("bf16 activations") != std::string::npos,
            cpu::HasBf16Dot())
      << (*automatic)->kernel_path();
  auto unknown = Model::Load(dir, {.dtype = "bf16", .cpu_activations = "fp8"});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("fp32, bf16, auto"), std::string::npos)
      << unknown.status();
}

// --dtype int8 quantizes at load; gpe quantize writes the same weights to a folder a quarter
// the size, which loads as int8 by itself and computes exactly the same logits. Both stay
// near fp32 (loosely: this tiny random model has large weights and 2 layers of error growth;
// model_reference checks int8 exactly against dequantized weights, quality checks BLEU).
TEST(ModelTest, Int8QuantizedFolderEqualsQuantizingAtLoad) {
  const std::string dir = MakeTiny("int8_source", "qwen2", 31);
  const std::string quantized = TempFolder("int8_quantized");
  ASSERT_TRUE(QuantizeModel(dir, quantized, 2).ok());
  EXPECT_LT(fs::file_size(quantized + "/model.safetensors"),
            fs::file_size(dir + "/model.safetensors") * 3 / 10);
  auto at_load = LoadOrDie(dir, "int8");
  auto from_folder = LoadOrDie(quantized, "auto");
  auto fp32 = LoadOrDie(dir, "fp32");
  ASSERT_NE(at_load, nullptr);
  ASSERT_NE(from_folder, nullptr);
  EXPECT_STREQ(from_folder->weight_dtype_name(), "int8");
  EXPECT_TRUE(from_folder->config().int8_weights);
  ASSERT_NE(from_folder->tokenizer(), nullptr);
  for (int64_t t : {1, 5, 40}) {
    const std::vector<int64_t> tokens = RandomTokens(t, 258, 9 + t);
    const torch::Tensor a = AllLogits(*at_load, tokens);
    EXPECT_TRUE(torch::equal(a, AllLogits(*from_folder, tokens))) << "T=" << t;
    EXPECT_LT(RelativeError(a, AllLogits(*fp32, tokens)), 0.15) << "T=" << t;
  }
  // A quantized folder serves only as int8, and is not quantized twice.
  auto as_fp32 = Model::Load(quantized, {.dtype = "fp32"});
  EXPECT_EQ(as_fp32.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(as_fp32.status().message().find("--dtype int8"), std::string::npos) << as_fp32.status();
  EXPECT_FALSE(QuantizeModel(quantized, TempFolder("int8_twice")).ok());
  // int8 tensors never pass for floats, nor floats for int8: a folder that mixes them is
  // refused by file and tensor.
  {
    const std::string mixed = TempFolder("int8_mixed");
    fs::copy(quantized, mixed, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    fs::copy_file(dir + "/model.safetensors", mixed + "/model.safetensors",
                  fs::copy_options::overwrite_existing);  // fp32 tensors, int8 config
    auto m = Model::Load(mixed);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
    fs::copy_file(dir + "/config.json", mixed + "/config.json",
                  fs::copy_options::overwrite_existing);  // plain config
    fs::copy_file(quantized + "/model.safetensors", mixed + "/model.safetensors",
                  fs::copy_options::overwrite_existing);  // int8 tensors
    m = Model::Load(mixed, {.dtype = "fp32"});
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
    EXPECT_NE(m.status().message().find("no quantization_config"), std::string::npos) << m.status();
    // The int8 folder with one matrix written back as F32.
    fs::copy_file(quantized + "/config.json", mixed + "/config.json",
                  fs::copy_options::overwrite_existing);
    auto q = SafetensorsFile::Open(quantized + "/model.safetensors");
    auto f = SafetensorsFile::Open(dir + "/model.safetensors");
    ASSERT_TRUE(q.ok() && f.ok());
    const std::string swapped = "model.layers.1.mlp.up_proj.weight";
    std::vector<TensorToWrite> tensors;
    for (const TensorInfo& t : (*q)->tensors()) {
      const auto& from = t.name == swapped ? *f : *q;
      const TensorInfo* info = from->Find(t.name);
      tensors.push_back({t.name, info->dtype, info->shape, from->Data(*info)});
    }
    fs::remove(mixed + "/model.safetensors");
    ASSERT_TRUE(WriteSafetensors(mixed + "/model.safetensors", tensors).ok());
    m = Model::Load(mixed);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
    EXPECT_NE(m.status().message().find("'" + swapped + "' is F32"), std::string::npos)
        << m.status();
  }
  // A folder whose config claims int8 without int8 tensors is refused by name.
  std::ifstream in(quantized + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["quantization_config"]["quant_method"] = "gptq";
  std::ofstream(quantized + "/config.json") << config.dump();
  auto gptq = Model::Load(quantized);
  EXPECT_EQ(gptq.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(gptq.status().message().find("quant_method 'gptq'"), std::string::npos)
      << gptq.status();
}

// auto: the checkpoint's own float dtype where a kernel serves it (bf16 stays bf16 on an AVX2
// CPU), fp32 for fp32 checkpoints.
TEST(ModelTest, AutoDtypeIsTheStoredOneWhereAKernelServesIt) {
  auto fp32 = LoadOrDie(MakeTiny("auto_fp32", "qwen2", 41), "auto");
  auto bf16 = LoadOrDie(MakeTiny("auto_bf16", "qwen2", 42, DType::kBF16), "auto");
  ASSERT_NE(fp32, nullptr);
  ASSERT_NE(bf16, nullptr);
  EXPECT_STREQ(fp32->weight_dtype_name(), "fp32");
  EXPECT_STREQ(bf16->weight_dtype_name(), cpu::ActiveIsa() == cpu::Isa::kScalar ? "fp32" : "bf16");
}

}  // namespace
}  // namespace gpeserve::model
