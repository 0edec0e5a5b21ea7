#include "cli/make_model.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/weight_layout.h"
#include "engine/tokenizer/tokenizer.h"

namespace gpeserve::model {
namespace {

struct Preset {
  const char* name;
  const char* arch;  // nullptr: any architecture (the default: qwen2)
  int64_t hidden, intermediate, layers, heads, kv_heads, head_dim, vocab;
  bool tied;
  double rope_theta, rms_eps;
  int64_t max_positions;
  const char* rope;                // the preset's own rope scaling: none, llama3, longrope
  int64_t sliding_window;          // 0: the architecture's default for tiny/small, none otherwise
  int64_t original_max_positions;  // longrope
};

// Shapes of the public checkpoints; `tiny` fits in a unit test; `small` takes its vocabulary
// from the tokenizer like `tiny`.
constexpr Preset kPresets[] = {
    {"tiny", nullptr, 64, 128, 2, 4, 2, 16, 0, false, 10000.0, 1e-6, 4096, "none", 0, 0},
    // Trainable on a CPU in minutes (the default model's size class).
    {"small", nullptr, 256, 768, 4, 4, 2, 64, 0, true, 10000.0, 1e-6, 4096, "none", 0, 0},
    {"qwen2.5-0.5b", "qwen2", 896, 4864, 24, 14, 2, 64, 151936, true, 1000000.0, 1e-6, 32768,
     "none", 0, 0},
    {"qwen2.5-3b", "qwen2", 2048, 11008, 36, 16, 2, 128, 151936, true, 1000000.0, 1e-6, 32768,
     "none", 0, 0},
    {"llama-3.2-1b", "llama", 2048, 8192, 16, 32, 8, 64, 128256, true, 500000.0, 1e-5, 131072,
     "llama3", 0, 0},
    {"gemma2-2b", "gemma2", 2304, 9216, 26, 8, 4, 256, 256000, true, 10000.0, 1e-6, 8192, "none",
     4096, 0},
    {"gemma3-270m", "gemma3", 640, 2048, 18, 4, 1, 256, 262144, true, 1000000.0, 1e-6, 32768,
     "none", 512, 0},
    {"gemma3-1b", "gemma3", 1152, 6912, 26, 4, 1, 256, 262144, true, 1000000.0, 1e-6, 32768, "none",
     512, 0},
    {"qwen3-0.6b", "qwen3", 1024, 3072, 28, 16, 8, 128, 151936, true, 1000000.0, 1e-6, 40960,
     "none", 0, 0},
    {"qwen3-4b", "qwen3", 2560, 9728, 36, 32, 8, 128, 151936, true, 1000000.0, 1e-6, 40960, "none",
     0, 0},
    {"phi3-mini", "phi3", 3072, 8192, 32, 32, 32, 96, 32064, false, 10000.0, 1e-5, 4096, "none",
     2047, 0},
    {"phi3-mini-128k", "phi3", 3072, 8192, 32, 32, 32, 96, 32064, false, 10000.0, 1e-5, 131072,
     "longrope", 262144, 4096},
};

constexpr std::pair<const char*, Architecture> kArchNames[] = {
    {"qwen2", Architecture::kQwen2},     {"llama", Architecture::kLlama},
    {"mistral", Architecture::kMistral}, {"gemma2", Architecture::kGemma2},
    {"qwen3", Architecture::kQwen3},     {"phi3", Architecture::kPhi3},
    {"gemma3", Architecture::kGemma3},
};

// longrope's per-frequency factors (the real checkpoints' are fitted by search; these are
// smooth stand-ins of the same form): short ones near 1, long ones growing with the wavelength.
std::vector<double> LongRopeFactors(int64_t count, bool long_factors) {
  std::vector<double> f(count);
  for (int64_t i = 0; i < count; ++i) {
    const double x = count > 1 ? static_cast<double>(i) / static_cast<double>(count - 1) : 0.0;
    f[i] = long_factors ? 1.0 + 31.0 * x * x : 1.0 + 0.1 * x;
  }
  return f;
}

// bf16 by truncation after rounding to nearest even, as torch does.
uint16_t ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

uint16_t ToF16(float f) {
  // IEEE half, round to nearest even; values here are small and finite.
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xFF) - 127 + 15;
  uint32_t mant = x & 0x7FFFFF;
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    const int shift = 14 - exp;
    uint32_t half = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7C00);
  uint32_t half = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(sign | half);
}

// One tensor's bytes in the stored dtype.
std::vector<char> Encode(const std::vector<float>& values, DType dtype) {
  std::vector<char> bytes(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(&bytes[i * 4], &values[i], 4);
    } else {
      const uint16_t h = dtype == DType::kBF16 ? ToBf16(values[i]) : ToF16(values[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

absl::Status WriteJsonFile(const std::filesystem::path& path, const nlohmann::json& json) {
  std::ofstream out(path);
  out << json.dump(2) << "\n";
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path.string(), ": write failed"));
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

absl::StatusOr<ModelConfig> MakeConfig(const MakeModelOptions& o, int64_t tokenizer_vocab) {
  const Preset* preset = nullptr;
  for (const Preset& p : kPresets) {
    if (o.preset == p.name) preset = &p;
  }
  if (preset == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown preset '", o.preset, "' (", absl::StrJoin(PresetNames(), ", "), ")"));
  }
  ModelConfig c;
  const std::string arch = !o.arch.empty() ? o.arch : preset->arch ? preset->arch : "qwen2";
  if (preset->arch != nullptr && arch != preset->arch) {
    return absl::InvalidArgumentError(
        absl::StrCat("preset '", o.preset, "' is a ", preset->arch, " shape, not ", arch));
  }
  std::vector<std::string> arch_names;
  bool known = false;
  for (const auto& [name, value] : kArchNames) {
    arch_names.push_back(name);
    if (arch == name) {
      c.architecture = value;
      known = true;
    }
  }
  if (!known) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown arch '", arch, "' (", absl::StrJoin(arch_names, ", "), ")"));
  }
  static constexpr const char* kClassNames[] = {
      "Qwen2ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM", "Gemma2ForCausalLM",
      "Qwen3ForCausalLM", "Phi3ForCausalLM",  "Gemma3ForCausalLM"};
  c.architecture_name = kClassNames[static_cast<int>(c.architecture)];
  const int64_t rounded = (tokenizer_vocab + 63) / 64 * 64;
  c.vocab_size = std::max(preset->vocab, rounded);
  c.hidden_size = o.hidden_size.value_or(preset->hidden);
  c.intermediate_size = o.intermediate_size.value_or(preset->intermediate);
  c.num_layers = o.num_layers.value_or(preset->layers);
  c.num_heads = o.num_heads.value_or(preset->heads);
  c.num_kv_heads = o.num_kv_heads.value_or(preset->kv_heads);
  c.head_dim = o.head_dim.value_or(preset->head_dim);
  for (const auto& [name, value] :
       {std::pair{"hidden_size", c.hidden_size},
        std::pair{"intermediate_size", c.intermediate_size}, std::pair{"num_layers", c.num_layers},
        std::pair{"num_heads", c.num_heads}, std::pair{"head_dim", c.head_dim},
        std::pair{"max_position_embeddings", c.max_position_embeddings}}) {
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be positive, got ", value));
    }
  }
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_kv_heads ", c.num_kv_heads, " must divide num_heads ", c.num_heads));
  }
  const Architecture a = c.architecture;
  const bool gemma = a == Architecture::kGemma2 || a == Architecture::kGemma3;
  c.rms_norm_eps = preset->rms_eps;
  // Gemma 3's global layers rotate with base 1e6, its local ones with 1e4 (transformers'
  // defaults), whatever the shape.
  c.rope_theta = a == Architecture::kGemma3 ? 1e6 : preset->rope_theta;
  c.max_position_embeddings = o.max_position_embeddings.value_or(preset->max_positions);
  // Gemma ties its head by default (transformers' default too).
  c.tie_word_embeddings =
      o.tie_word_embeddings.value_or(preset->arch == nullptr && gemma ? true : preset->tied);
  const bool phi3 = a == Architecture::kPhi3;
  if (o.partial_rotary_factor.has_value() && !phi3) {
    return absl::InvalidArgumentError("partial_rotary_factor is for phi3 only");
  }
  c.partial_rotary_factor = o.partial_rotary_factor.value_or(1.0);
  c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);
  if (c.partial_rotary_factor <= 0 || c.partial_rotary_factor > 1 || c.rotary_dim <= 0 ||
      c.rotary_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partial_rotary_factor must be in (0, 1] and give an even number of rotary channels (got ",
        c.partial_rotary_factor, " of head_dim ", c.head_dim, ")"));
  }
  if (phi3 && c.head_dim * c.num_heads != c.hidden_size) {
    return absl::InvalidArgumentError("phi3 needs head_dim * num_heads == hidden_size");
  }
  const std::string rope = o.rope_scaling.value_or(preset->rope);
  if (rope == "llama3") {
    c.rope_scaling = {RopeScaling::Type::kLlama3, 32.0, 1.0, 4.0, 8192};
    if (c.max_position_embeddings <= 8192) c.rope_scaling.original_max_position = 256;
  } else if (rope == "linear") {
    c.rope_scaling = {RopeScaling::Type::kLinear, 2.0};
  } else if (rope == "longrope" && phi3) {
    RopeScaling& r = c.rope_scaling;
    r.type = RopeScaling::Type::kLongRope;
    r.original_max_position = o.original_max_position_embeddings.value_or(
        preset->original_max_positions > 0 ? preset->original_max_positions
                                           : std::max<int64_t>(1, c.max_position_embeddings / 16));
    r.short_factor = LongRopeFactors(c.rotary_dim / 2, false);
    r.long_factor = LongRopeFactors(c.rotary_dim / 2, true);
    r.attention_factor =
        LongRopeAttentionFactor(c.max_position_embeddings, r.original_max_position);
  } else if (rope != "none") {
    return absl::InvalidArgumentError(absl::StrCat("unknown rope_scaling '", rope,
                                                   "' (none, linear, llama3; longrope for phi3)"));
  }
  if (o.original_max_position_embeddings.has_value() &&
      c.rope_scaling.type != RopeScaling::Type::kLongRope) {
    return absl::InvalidArgumentError("original_max_position_embeddings is for longrope");
  }
  const bool fixed_bias = a == Architecture::kQwen2 || a == Architecture::kMistral || phi3;
  if (fixed_bias && (o.attention_bias.has_value() || o.mlp_bias.has_value())) {
    return absl::InvalidArgumentError(
        "attention_bias / mlp_bias are fixed for qwen2 (q/k/v bias), mistral and phi3 (none)");
  }
  if (o.mlp_bias.has_value() && a != Architecture::kLlama) {
    return absl::InvalidArgumentError("mlp_bias is for llama only");
  }
  if (a == Architecture::kQwen2) {
    c.attention_bias = true;
  } else if (!fixed_bias) {
    c.attention_bias = c.o_proj_bias = o.attention_bias.value_or(false);
    c.mlp_bias = o.mlp_bias.value_or(false);
  }
  // Sliding window: a windowed architecture gets the preset's window (4096, transformers'
  // default, for tiny/small); qwen2/qwen3 use it only when given, from max_window_layers on.
  const bool qwen = a == Architecture::kQwen2 || a == Architecture::kQwen3;
  if (a == Architecture::kLlama && o.sliding_window.value_or(0) > 0) {
    return absl::InvalidArgumentError("llama has no sliding window");
  }
  if (o.max_window_layers.has_value() && !qwen) {
    return absl::InvalidArgumentError("max_window_layers is for qwen2 and qwen3 only");
  }
  if (o.sliding_window_pattern.has_value() && a != Architecture::kGemma3) {
    return absl::InvalidArgumentError("sliding_window_pattern is for gemma3 only");
  }
  const int64_t pattern = o.sliding_window_pattern.value_or(6);
  if (pattern <= 0) return absl::InvalidArgumentError("sliding_window_pattern must be positive");
  if (a != Architecture::kLlama) {
    const int64_t preset_window =
        preset->arch != nullptr ? preset->sliding_window : (qwen || phi3 ? 0 : 4096);
    c.sliding_window = o.sliding_window.value_or(preset_window);
    if (c.sliding_window < 0) {
      return absl::InvalidArgumentError("sliding_window must be 0 (none) or positive");
    }
    c.windowed_layers.assign(c.num_layers, false);
    if (qwen) {
      c.use_sliding_window = c.sliding_window > 0;
      c.max_window_layers = o.max_window_layers.value_or(0);
      for (int64_t i = c.max_window_layers; c.use_sliding_window && i < c.num_layers; ++i) {
        c.windowed_layers[i] = true;
      }
    } else {
      for (int64_t i = 0; i < c.num_layers; ++i) {
        c.windowed_layers[i] = a == Architecture::kGemma2   ? i % 2 == 0
                               : a == Architecture::kGemma3 ? (i + 1) % pattern != 0
                                                            : true;
      }
    }
  }
  if (a == Architecture::kGemma3 && o.attn_logit_softcapping.value_or(0) > 0) {
    return absl::InvalidArgumentError(
        "attn_logit_softcapping is for gemma2 only (Gemma 3 does not cap attention scores)");
  }
  if (gemma) {
    // Gemma 2 caps by default, Gemma 3 does not (transformers' defaults).
    const bool gemma2 = a == Architecture::kGemma2;
    c.activation = Activation::kGeluTanh;
    c.query_pre_attn_scalar = static_cast<double>(c.head_dim);
    c.attn_logit_softcapping = o.attn_logit_softcapping.value_or(gemma2 ? 50.0 : 0.0);
    c.final_logit_softcapping = o.final_logit_softcapping.value_or(gemma2 ? 30.0 : 0.0);
    c.scale_embeddings = c.norm_weight_plus_one = c.sandwich_norms = true;
    if (!gemma2) c.rope_local_theta = 10000.0;
  } else if (o.attn_logit_softcapping.has_value() || o.final_logit_softcapping.has_value()) {
    return absl::InvalidArgumentError("soft-capping is for gemma2 and gemma3 only");
  }
  c.qk_norm = a == Architecture::kQwen3 || a == Architecture::kGemma3;
  c.fused_projections = phi3;
  c.torch_dtype = o.dtype == DType::kF32    ? "float32"
                  : o.dtype == DType::kBF16 ? "bfloat16"
                                            : "float16";
  return c;
}

absl::Status MakeModel(const MakeModelOptions& o, const std::string& out_dir) {
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  if (!o.tokenizer_dir.empty()) {
    auto loaded = tokenizer::Tokenizer::Load(o.tokenizer_dir);
    if (!loaded.ok()) return loaded.status();
    tok = *std::move(loaded);
  }
  auto config = MakeConfig(o, tok ? tok->vocab_size() : 0);
  if (!config.ok()) return config.status();
  ModelConfig& c = *config;
  if (c.vocab_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("preset '", o.preset, "' takes its vocabulary from a tokenizer folder"));
  }
  if (tok && tok->eos_id()) c.eos_token_ids = {*tok->eos_id()};
  if (tok && tok->bos_id()) c.bos_token_id = *tok->bos_id();

  std::error_code error;
  std::filesystem::create_directories(out_dir, error);
  if (error) return absl::PermissionDeniedError(absl::StrCat(out_dir, ": ", error.message()));
  const std::filesystem::path dir(out_dir);

  // Weights: normal(0, init_std) for matrices and biases, 1 + normal(0, init_std) for norms.
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal(0.0f, static_cast<float>(o.init_std));
  std::vector<std::vector<char>> storage;
  std::vector<TensorToWrite> tensors;
  // Norms: 1 + noise, or noise alone where the checkpoint stores w of (1 + w) (Gemma).
  const float norm_center = c.norm_weight_plus_one ? 0.0f : 1.0f;
  for (const WeightSpec& spec : WeightLayout(c)) {
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    const bool norm = spec.kind == WeightSpec::Kind::kNorm;
    std::vector<float> values(n);
    for (float& v : values) v = (norm ? norm_center : 0.0f) + normal(rng);
    storage.push_back(Encode(values, o.dtype));
    tensors.push_back({spec.name, o.dtype, spec.shape, nullptr});
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = storage[i].data();
  if (absl::Status s =
          WriteSafetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
      !s.ok()) {
    return s;
  }

  if (absl::Status s = WriteJsonFile(dir / "config.json", c.ToJson()); !s.ok()) return s;
  nlohmann::json generation = {{"do_sample", false}};
  if (c.bos_token_id) generation["bos_token_id"] = *c.bos_token_id;
  if (!c.eos_token_ids.empty()) generation["eos_token_id"] = c.eos_token_ids;
  if (absl::Status s = WriteJsonFile(dir / "generation_config.json", generation); !s.ok()) {
    return s;
  }
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    if (o.tokenizer_dir.empty()) break;
    const std::filesystem::path from = std::filesystem::path(o.tokenizer_dir) / name;
    if (!std::filesystem::exists(from)) continue;
    std::filesystem::copy_file(from, dir / name, std::filesystem::copy_options::overwrite_existing,
                               error);
    if (error) return absl::DataLossError(absl::StrCat(from.string(), ": ", error.message()));
  }
  return absl::OkStatus();
}

}  // namespace gpeserve::model
