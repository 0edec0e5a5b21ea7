#include "engine/model/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "engine/kernels/cpu_matmul.h"
#include "engine/kernels/ggml_quants.h"
#include "engine/model/model.h"
#include "engine/util/remove_tree.h"
#include "tests/engine/test_models.h"

namespace gpeserve::model {
namespace {

namespace fs = std::filesystem;

// ---- A GGUF writer, as llama.cpp's converter lays a Hugging Face model out ----------------

class GgufBytes {
 public:
  template <typename T>
  void Put(T v) {
    char raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    s_.append(raw, sizeof(T));
  }
  void Str(const std::string& v) {
    Put<uint64_t>(v.size());
    s_ += v;
  }
  void Int(const std::string& key, int64_t v) {
    Str(key);
    Put<uint32_t>(4);  // uint32
    Put<uint32_t>(static_cast<uint32_t>(v));
    ++count_;
  }
  void Float(const std::string& key, double v) {
    Str(key);
    Put<uint32_t>(6);  // float32
    Put<float>(static_cast<float>(v));
    ++count_;
  }
  void String(const std::string& key, const std::string& v) {
    Str(key);
    Put<uint32_t>(8);
    Str(v);
    ++count_;
  }
  std::string& bytes() { return s_; }
  uint64_t count() const { return count_; }

 private:
  std::string s_;
  uint64_t count_ = 0;
};

// Converter's rotary interleave of a Llama q/k projection (checkpoint.cc undoes it).
torch::Tensor Interleave(const torch::Tensor& w, int64_t heads) {
  const std::vector<int64_t> shape(w.sizes().begin(), w.sizes().end());
  return w.reshape({heads, 2, shape[0] / heads / 2, -1}).transpose(1, 2).reshape(shape);
}

// ggml's type number for the matrix `index` of a layout (F32: 0), and its bytes.
using MatrixTypes = std::function<uint32_t(int index)>;
uint32_t AllF32(int) { return 0; }

cpu::WeightType BlockTypeOf(uint32_t ggml_type) {
  return ggml_type == 8   ? cpu::WeightType::kQ8_0
         : ggml_type == 2 ? cpu::WeightType::kQ4_0
                          : cpu::WeightType::kQ4_1;
}

// Writes model `m` (loaded fp32 from its folder) as a GGUF file: norms and biases F32, the
// matrices in the types `types` gives (F32, or a block type quantized as ggml rounds).
void WriteGguf(const Model& m, const std::string& path, const MatrixTypes& types = AllF32) {
  const ModelConfig& c = m.config();
  std::string arch = c.model_type();
  if (arch == "mistral") arch = "llama";
  if (arch == "gemma3_text") arch = "gemma3";
  GgufBytes meta;
  meta.String("general.architecture", arch);
  const std::string a = arch + ".";
  meta.Int(a + "embedding_length", c.hidden_size);
  meta.Int(a + "feed_forward_length", c.intermediate_size);
  meta.Int(a + "block_count", c.num_layers);
  meta.Int(a + "attention.head_count", c.num_heads);
  meta.Int(a + "attention.head_count_kv", c.num_kv_heads);
  meta.Int(a + "attention.key_length", c.head_dim);
  meta.Int(a + "context_length", c.max_position_embeddings);
  meta.Int(a + "rope.dimension_count", c.rotary_dim);
  meta.Float(a + "attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  meta.Float(a + "rope.freq_base", c.rope_theta);
  if (c.sliding_window > 0) meta.Int(a + "attention.sliding_window", c.sliding_window);
  if (c.attn_logit_softcapping > 0)
    meta.Float(a + "attn_logit_softcapping", c.attn_logit_softcapping);
  if (c.final_logit_softcapping > 0) {
    meta.Float(a + "final_logit_softcapping", c.final_logit_softcapping);
  }
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  std::vector<uint32_t> ggml_types;
  int matrix_index = 0;
  for (const WeightSpec& spec : WeightLayout(c)) {
    torch::Tensor t = spec.kind == WeightSpec::Kind::kMatrix ? GatherMatrix(spec, m.weights()).data
                                                             : HeldVector(spec, m.weights());
    t = t.to(torch::kFloat32).contiguous();
    const Role role = spec.parts.front().role;
    if (c.architecture == Architecture::kLlama && (role == Role::kQ || role == Role::kK)) {
      t = Interleave(t, role == Role::kQ ? c.num_heads : c.num_kv_heads).contiguous();
    }
    if (c.norm_weight_plus_one && spec.kind == WeightSpec::Kind::kNorm) t = t + 1.0f;
    const uint32_t type = spec.kind == WeightSpec::Kind::kMatrix ? types(matrix_index++) : 0;
    if (type != 0) {
      const cpu::WeightType blocks = BlockTypeOf(type);
      torch::Tensor packed = torch::empty({cpu::WeightBytes(blocks, t.numel())}, torch::kUInt8);
      cpu::QuantizeRowsBlocks(blocks, t.data_ptr<float>(), t.size(1), 0, t.size(0),
                              packed.data_ptr());
      t = packed;
    }
    ggml_types.push_back(type);
    tensors.emplace_back(spec.gguf_name, t);
  }
  std::vector<std::vector<int64_t>> shapes;
  for (const WeightSpec& spec : WeightLayout(c)) shapes.push_back(spec.shape);
  GgufBytes file;
  file.Put<uint32_t>(0x46554747);
  file.Put<uint32_t>(3);
  file.Put<uint64_t>(tensors.size());
  file.Put<uint64_t>(meta.count());
  file.bytes() += meta.bytes();
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::vector<int64_t>& shape = shapes[i];
    file.Str(tensors[i].first);
    file.Put<uint32_t>(static_cast<uint32_t>(shape.size()));
    for (auto d = shape.rbegin(); d != shape.rend(); ++d) file.Put<uint64_t>(*d);
    file.Put<uint32_t>(ggml_types[i]);
    file.Put<uint64_t>(offset);
    offset += (tensors[i].second.nbytes() + 31) / 32 * 32;
  }
  std::string& bytes = file.bytes();
  for (const auto& [name, t] : tensors) {
    bytes.append((32 - bytes.size() % 32) % 32, '\0');
    bytes.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  std::ofstream(path, std::ios::binary) << bytes;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("gpe_checkpoint_" + std::to_string(::getpid()));
  }
  void TearDown() override { (void)RemoveTree(dir_); }
  fs::path dir_;
};

torch::Tensor Logits(const Model& m, const std::vector<int64_t>& ids) {
  const int64_t t = static_cast<int64_t>(ids.size());
  DenseAttention attention({}, {}, DenseAttention::CausalMask(t));
  auto logits = m.Forward(torch::tensor(ids), torch::arange(t), torch::arange(t), attention);
  EXPECT_TRUE(logits.ok()) << logits.status();
  return logits.ok() ? *logits : torch::Tensor();
}

// A model written as GGUF the way llama.cpp's converter writes it (its names, its Llama rotary
// interleave, Gemma's 1 + w norms, the configuration in metadata) loads as the same model: the
// same logits as its Hugging Face folder, for every family served from GGUF.
TEST_F(CheckpointTest, GgufFileServesTheSameModelAsItsFolder) {
  std::vector<MakeModelOptions> families = {
      {.arch = "llama", .tie_word_embeddings = false},
      {.arch = "qwen2"},
      {.arch = "qwen3"},
      {.arch = "gemma2", .sliding_window = 8, .final_logit_softcapping = 3.0},
      // llama.cpp's fixed pattern: layers 0-4 and 6 local, 5 global.
      {.arch = "gemma3", .num_layers = 7, .sliding_window = 5},
      {.arch = "phi3", .partial_rotary_factor = 0.5},
  };
  uint64_t seed = 11;
  for (const MakeModelOptions& family : families) {
    SCOPED_TRACE(family.arch);
    const std::string folder = testing::WriteTinyChatModel(seed++, dir_.string(), family);
    auto from_folder = Model::Load(folder, {.dtype = "fp32", .threads = 2});
    ASSERT_TRUE(from_folder.ok()) << from_folder.status();
    const std::string gguf = folder + ".gguf";
    WriteGguf(**from_folder, gguf);
    auto checkpoint = Checkpoint::Open(gguf);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    EXPECT_TRUE((*checkpoint)->is_gguf());
    const ModelConfig& want = (*from_folder)->config();
    const ModelConfig& got = (*checkpoint)->config();
    EXPECT_EQ(got.architecture, want.architecture);
    EXPECT_EQ(got.tie_word_embeddings, want.tie_word_embeddings);
    EXPECT_EQ(got.attention_bias, want.attention_bias);
    EXPECT_EQ(got.rotary_dim, want.rotary_dim);
    EXPECT_EQ(got.windowed_layers, want.windowed_layers);
    auto from_gguf = Model::Load(gguf, {.dtype = "fp32", .threads = 2});
    ASSERT_TRUE(from_gguf.ok()) << from_gguf.status();
    const std::vector<int64_t> ids = {256, 72, 101, 108, 108, 111, 257, 33, 44, 55, 66};
    const torch::Tensor expected = Logits(**from_folder, ids);
    const torch::Tensor actual = Logits(**from_gguf, ids);
    // The metadata holds eps as float32: not bit-identical, but far inside rounding noise.
    const double error =
        (actual - expected).abs().max().item<double>() / expected.abs().max().item<double>();
    EXPECT_LT(error, 1e-5);
    EXPECT_TRUE(torch::equal(actual.argmax(-1), expected.argmax(-1)));
  }
}

// Q8_0, Q4_0 and Q4_1 matrices are served as the file holds them (--dtype auto: gguf). A
// prefill beyond the kernels' 64 rows widens the blocks to the values the fp32 load decodes and
// computes exactly what the file served widened to fp32 computes; decode-sized steps round the
// activations to int8 blocks (cpu_matmul_blocks.h) and stay within that rounding.
TEST_F(CheckpointTest, GgufBlocksAreServedAsStoredAndMatchTheirWidenedModel) {
  uint64_t seed = 31;
  for (const MakeModelOptions& family :
       {MakeModelOptions{.arch = "llama"}, MakeModelOptions{.arch = "qwen2"}}) {
    SCOPED_TRACE(family.arch);
    const std::string folder = testing::WriteTinyChatModel(seed++, dir_.string(), family);
    auto from_folder = Model::Load(folder, {.dtype = "fp32", .threads = 2});
    ASSERT_TRUE(from_folder.ok()) << from_folder.status();
    const std::string gguf = folder + ".gguf";
    const uint32_t cycle[] = {8, 2, 3};  // Q8_0, Q4_0, Q4_1 in turn
    WriteGguf(**from_folder, gguf, [&cycle](int i) { return cycle[i % 3]; });
    auto packed = Model::Load(gguf, {.dtype = "auto", .threads = 2});
    ASSERT_TRUE(packed.ok()) << packed.status();
    if (cpu::ActiveIsa() == cpu::Isa::kScalar) {
      EXPECT_STREQ((*packed)->weight_dtype_name(), "fp32");
      continue;
    }
    EXPECT_STREQ((*packed)->weight_dtype_name(), "gguf");
    const Weights& w = (*packed)->weights();
    EXPECT_EQ(w.embed.blocks, cpu::WeightType::kQ8_0);
    EXPECT_TRUE(w.layers[0].q_w.has_blocks());
    EXPECT_EQ(w.layers[0].q_w.in(), (*packed)->config().hidden_size);
    auto widened = Model::Load(gguf, {.dtype = "fp32", .threads = 2});
    ASSERT_TRUE(widened.ok()) << widened.status();
    EXPECT_LT((*packed)->weight_bytes() * 3, (*widened)->weight_bytes());
    std::vector<int64_t> long_ids;
    for (int i = 0; i < 90; ++i) long_ids.push_back(40 + (i * 7) % 200);
    EXPECT_TRUE(torch::equal(Logits(**packed, long_ids), Logits(**widened, long_ids)));
    // Rounded activations move a tiny random model's logits by a few percent of their scale (a
    // wrong block layout or row order would move them by all of it).
    const std::vector<int64_t> ids = {256, 72, 101, 108, 108, 111, 257, 33, 44, 55, 66};
    const torch::Tensor a = Logits(**packed, ids), b = Logits(**widened, ids);
    EXPECT_LT((a - b).abs().max().item<double>(), 0.2 * b.abs().max().item<double>());
    // A file of Q8_0 serves what --dtype q8_0 makes of the folder at load, close to the fp32
    // model (4 bits move a tiny random model's logits far).
    const std::string q8 = folder + ".q8_0.gguf";
    WriteGguf(**from_folder, q8, [](int) { return 8u; });
    auto q8_model = Model::Load(q8, {.threads = 2});
    ASSERT_TRUE(q8_model.ok()) << q8_model.status();
    const torch::Tensor original = Logits(**from_folder, ids);
    auto q8_at_load = Model::Load(folder, {.dtype = "q8_0", .threads = 2});
    ASSERT_TRUE(q8_at_load.ok()) << q8_at_load.status();
    const torch::Tensor from_file = Logits(**q8_model, ids);
    EXPECT_TRUE(torch::equal(from_file, Logits(**q8_at_load, ids)));
    EXPECT_LT((from_file - original).abs().max().item<double>(),
              0.1 * original.abs().max().item<double>());
    // A named block type keeps the matrices already in it and quantizes the others.
    auto as_q4_0 = Model::Load(gguf, {.dtype = "q4_0", .threads = 2});
    ASSERT_TRUE(as_q4_0.ok()) << as_q4_0.status();
    EXPECT_EQ((*as_q4_0)->weights().embed.blocks, cpu::WeightType::kQ4_0);
    const LayerWeights& file = w.layers[0];
    const LayerWeights& requantized = (*as_q4_0)->weights().layers[0];
    int kept = 0;
    for (auto member :
         {&LayerWeights::q_w, &LayerWeights::k_w, &LayerWeights::v_w, &LayerWeights::o_w,
          &LayerWeights::gate_w, &LayerWeights::up_w, &LayerWeights::down_w}) {
      EXPECT_EQ((requantized.*member).blocks, cpu::WeightType::kQ4_0);
      if ((file.*member).blocks != cpu::WeightType::kQ4_0) continue;
      EXPECT_TRUE(torch::equal((requantized.*member).data, (file.*member).data));
      ++kept;
    }
    EXPECT_GT(kept, 0);
  }
  // gguf names a file's own types: a folder has none.
  const std::string folder = testing::WriteTinyChatModel(3, dir_.string(), {.arch = "qwen2"});
  auto refused = Model::Load(folder, {.dtype = "gguf"});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("is a folder"), std::string::npos) << refused.status();
}

TEST_F(CheckpointTest, GgufErrorsNameTheFileAndWhatIsWrong) {
  fs::create_directories(dir_);
  const std::string path = (dir_ / "not.gguf").string();
  std::ofstream(path) << "not a gguf file at all";
  auto opened = Checkpoint::Open(path);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find(path), std::string::npos);
  EXPECT_NE(opened.status().message().find("not a GGUF file"), std::string::npos);
  auto loaded = Model::Load(path);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
}

// A Gemma3ForConditionalGeneration folder serves its text model: written in either layout
// transformers saves (the original checkpoints' language_model.model.*, or 4.52's
// model.language_model.* with lm_head.*), with a vision tensor beside it and the text model's
// config nested in text_config, it computes exactly what the same weights as Gemma3ForCausalLM
// compute.
TEST_F(CheckpointTest, MultimodalGemma3ServesItsTextModel) {
  const std::string folder = testing::WriteTinyChatModel(21, dir_.string(),
                                                         {.arch = "gemma3",
                                                          .tie_word_embeddings = false,
                                                          .rope_scaling = "linear",
                                                          .sliding_window = 5,
                                                          .sliding_window_pattern = 2,
                                                          .final_logit_softcapping = 3.0});
  auto text_model = Model::Load(folder, {.dtype = "fp32", .threads = 2});
  ASSERT_TRUE(text_model.ok()) << text_model.status();
  const std::vector<int64_t> ids = {256, 72, 101, 108, 108, 111, 257, 33, 44, 55, 66};
  const torch::Tensor expected = Logits(**text_model, ids);

  nlohmann::json text = (*text_model)->config().ToJson();
  const nlohmann::json eos = text["eos_token_id"];
  text.erase("architectures");
  text.erase("eos_token_id");  // the top level's, as the real checkpoints keep it
  const nlohmann::json config = {{"architectures", {"Gemma3ForConditionalGeneration"}},
                                 {"model_type", "gemma3"},
                                 {"eos_token_id", eos},
                                 {"text_config", text},
                                 {"vision_config", {{"model_type", "siglip_vision_model"}}}};
  auto file = SafetensorsFile::Open(folder + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  const float vision[4] = {1, 2, 3, 4};
  for (const auto& [model_prefix, head_prefix] :
       {std::pair{"language_model.model.", "language_model.lm_head."},
        std::pair{"model.language_model.", "lm_head."}}) {
    SCOPED_TRACE(model_prefix);
    const fs::path multimodal = dir_ / (std::string("multimodal_") + model_prefix);
    fs::create_directories(multimodal);
    std::ofstream(multimodal / "config.json") << config.dump();
    fs::copy_file(fs::path(folder) / "tokenizer.json", multimodal / "tokenizer.json");
    std::vector<TensorToWrite> tensors = {
        {"vision_tower.vision_model.post_layernorm.weight", DType::kF32, {4}, vision}};
    for (const TensorInfo& info : (*file)->tensors()) {
      std::string name = info.name;
      if (name.starts_with("model.")) name = model_prefix + name.substr(6);
      if (name.starts_with("lm_head.")) name = head_prefix + name.substr(8);
      tensors.push_back({name, info.dtype, info.shape, (*file)->Data(info)});
    }
    ASSERT_TRUE(WriteSafetensors((multimodal / "model.safetensors").string(), tensors, {}).ok());
    auto served = Model::Load(multimodal.string(), {.dtype = "fp32", .threads = 2});
    ASSERT_TRUE(served.ok()) << served.status();
    const ModelConfig& c = (*served)->config();
    EXPECT_TRUE(c.multimodal);
    EXPECT_EQ(c.architecture_name, "Gemma3ForConditionalGeneration");
    EXPECT_EQ(c.eos_token_ids, (*text_model)->config().eos_token_ids);
    EXPECT_EQ(c.ToJson(), (*text_model)->config().ToJson());
    EXPECT_TRUE(torch::equal(Logits(**served, ids), expected));
  }

  // Without the language model: an error naming the file and both layouts looked for.
  const fs::path vision_only = dir_ / "vision_only";
  fs::create_directories(vision_only);
  std::ofstream(vision_only / "config.json") << config.dump();
  ASSERT_TRUE(WriteSafetensors((vision_only / "model.safetensors").string(),
                               {{"vision_tower.w", DType::kF32, {4}, vision}}, {})
                  .ok());
  auto missing = Checkpoint::Open(vision_only.string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(vision_only.string()), std::string::npos);
  EXPECT_NE(missing.status().message().find("model.language_model.embed_tokens.weight"),
            std::string::npos)
      << missing.status();
}

// ---- ggml's blocks: quantized here from their spec, decoded by DequantizeGgml ----------

uint16_t Half(float f) { return cpu::FloatToHalf(f); }
float FromHalf(uint16_t h) { return cpu::HalfToFloat(h); }

// One block of 32 weights in `type` (the layouts of ggml-common.h), and the largest error the
// decode may have against `x`: half a step of the block's scale (after its fp16 rounding).
std::pair<std::string, float> EncodeBlock(uint32_t type, const float* x) {
  std::string out;
  auto put16 = [&](uint16_t v) { out.append(reinterpret_cast<const char*>(&v), 2); };
  float lo = x[0], hi = x[0], amax = 0;
  for (int j = 0; j < 32; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
    amax = std::max(amax, std::fabs(x[j]));
  }
  const bool with_min = type == 3 || type == 7;
  const int levels = type == 8 ? 127 : (type == 2 || type == 3) ? 15 : 31;
  float d, m = 0;
  if (with_min) {
    d = FromHalf(Half((hi - lo) / static_cast<float>(levels)));
    m = FromHalf(Half(lo));
  } else {
    // Symmetric: q in [-(levels+1)/2, (levels-1)/2] for the 4/5-bit types, [-127, 127] for Q8_0.
    d = FromHalf(Half(amax / (type == 8 ? 127.0f : static_cast<float>((levels + 1) / 2))));
  }
  const int offset = with_min ? 0 : type == 8 ? 0 : (levels + 1) / 2;
  std::vector<int> q(32);
  for (int j = 0; j < 32; ++j) {
    const float v = d > 0 ? (x[j] - m) / d : 0;
    q[j] = std::clamp(static_cast<int>(std::lround(v)) + offset, type == 8 ? -127 : 0,
                      type == 8 ? 127 : levels);
  }
  put16(Half(d));
  if (with_min) put16(Half(m));
  if (type == 8) {
    for (int j = 0; j < 32; ++j) out.push_back(static_cast<char>(static_cast<int8_t>(q[j])));
  } else {
    if (type == 6 || type == 7) {  // the fifth bits, weight j at bit j
      uint32_t qh = 0;
      for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
      out.append(reinterpret_cast<const char*>(&qh), 4);
    }
    for (int j = 0; j < 16; ++j) {
      out.push_back(static_cast<char>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4)));
    }
  }
  // Half a step, plus the clamp at the symmetric types' top level, plus fp16 rounding of m.
  const float bound = 0.5f * d + (with_min ? std::fabs(m - lo) : (type == 8 ? 0 : d)) + 1e-6f;
  return {out, bound};
}

TEST(GgmlQuantsTest, DecodesEveryBlockTypeWithinHalfAStep) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (uint32_t type : {8u, 2u, 3u, 6u, 7u}) {
    SCOPED_TRACE(type);
    ASSERT_TRUE(cpu::CanDequantizeGgml(type));
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> x(64);
      for (float& v : x) v = normal(rng) + (trial % 5 == 0 ? 0.3f : 0.0f);  // some shifted
      std::string blocks;
      std::vector<float> bound;
      for (int b = 0; b < 2; ++b) {
        auto [bytes, limit] = EncodeBlock(type, x.data() + 32 * b);
        blocks += bytes;
        bound.push_back(limit);
      }
      std::vector<float> decoded(64);
      cpu::DequantizeGgml(type, blocks.data(), 64, decoded.data());
      for (int i = 0; i < 64; ++i) {
        ASSERT_LE(std::fabs(decoded[i] - x[i]), bound[i / 32]) << "weight " << i;
      }
    }
  }
  // The plain types are exact.
  const std::vector<float> x = {1.5f, -2.25f, 0.0f, 3.0f};
  std::vector<float> out(4);
  cpu::DequantizeGgml(0, x.data(), 4, out.data());
  EXPECT_EQ(out, x);
  std::vector<uint16_t> halves;
  for (float v : x) halves.push_back(Half(v));
  cpu::DequantizeGgml(1, halves.data(), 4, out.data());
  EXPECT_EQ(out, x);
  EXPECT_TRUE(cpu::CanDequantizeGgml(12));   // Q4_K (checked against gguf-py: gguf_reference)
  EXPECT_FALSE(cpu::CanDequantizeGgml(10));  // Q2_K: not yet
}

}  // namespace
}  // namespace gpeserve::model
