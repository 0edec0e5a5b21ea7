#include "engine/train/trainer.h"

#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "engine/model/attention.h"
#include "engine/util/remove_tree.h"
#include "gtest/gtest.h"
#include "tests/engine/test_models.h"

namespace gpeserve::train {
namespace {

namespace fs = std::filesystem;

// `steps` optimizer steps on the same batch.
void Train(Trainer& t, const std::vector<Sequence>& batch, int steps) {
  for (int step = 0; step < steps; ++step) {
    ASSERT_TRUE(t.Loss(batch, /*backward=*/true).ok());
    t.OptimizerStep();
  }
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("gpe_trainer_test_" + std::to_string(::getpid()));
    model_dir_ = testing::WriteTinyChatModel(11, dir_.string());
    auto m = model::Model::Load(model_dir_, {.threads = 2});
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *m;
    profile_ = *policy::LoadProfile("qwen2.5");
  }
  void TearDown() override { EXPECT_TRUE(model::RemoveTree(dir_).ok()); }

  std::unique_ptr<Trainer> Make(TrainConfig config = {}) {
    auto t = Trainer::Create(model_, profile_, config);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }

  fs::path dir_;
  std::string model_dir_;
  std::shared_ptr<const model::Model> model_;
  policy::Profile profile_;
};

// The batch-mode sequence: prompt, source, end, header, then target tokens and EOS are the
// counted predictions, each from the row before it.
TEST_F(TrainerTest, BatchSequenceLayout) {
  auto t = Make();
  auto s = t->BatchSequence("the dog", "der Hund");
  ASSERT_TRUE(s.ok()) << s.status();
  const tokenizer::Tokenizer& tok = *model_->tokenizer();
  auto expect = [&](const std::string& text) {
    return *tok.Encode(text, {.add_special_tokens = false});
  };
  std::vector<int32_t> want;
  for (const std::string& part : {profile_.Prefix(), std::string("the"), std::string(" dog"),
                                  profile_.end, profile_.assistant}) {
    for (int32_t id : expect(part)) want.push_back(id);
  }
  const size_t context = want.size();
  const std::vector<int32_t> target = expect("der Hund");
  for (int32_t id : target) want.push_back(id);
  ASSERT_EQ(s->tokens.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(s->tokens[i], want[i]) << i;
  for (size_t i = 0; i < s->positions.size(); ++i) EXPECT_EQ(s->positions[i], int64_t(i));
  // Row i predicts token i+1 for the target tokens; the last row predicts EOS (257).
  for (size_t i = 0; i < want.size(); ++i) {
    const int64_t expected = i + 1 < context        ? -1
                             : i + 1 < want.size()  ? want[i + 1]
                             : i + 1 == want.size() ? 257
                                                    : -1;
    EXPECT_EQ(s->targets[i], expected) << i;
  }
}

// The trainer's forward (shared layers, trainable copies) equals the inference forward.
TEST_F(TrainerTest, SameLogitsAsInference) {
  auto t = Make();
  const std::vector<int64_t> tokens = {256, 72, 101, 108, 108, 111, 257};
  const std::vector<int64_t> positions = {0, 1, 2, 3, 4, 5, 6};
  const torch::Tensor ours = t->Logits(tokens, positions);
  model::DenseAttention attention({}, {}, model::DenseAttention::CausalMask(7));
  auto reference =
      model_->Forward(torch::tensor(tokens), torch::tensor(positions), torch::arange(7), attention);
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_TRUE(torch::allclose(ours, *reference, 1e-5, 1e-5))
      << (ours - *reference).abs().max().item<float>();
}

// Packing sequences into one pass (block-diagonal mask) gives the token-weighted mean of
// their separate losses.
TEST_F(TrainerTest, PackedLossEqualsSeparateLosses) {
  auto t = Make();
  auto a = t->BatchSequence("the dog sees", "der Hund sieht");
  auto b = t->BatchSequence("a cat", "eine Katze schläft");
  ASSERT_TRUE(a.ok() && b.ok());
  auto counted = [](const Sequence& s) {
    return static_cast<double>(
        std::count_if(s.targets.begin(), s.targets.end(), [](int64_t x) { return x >= 0; }));
  };
  const double la = *t->Loss({*a}, false), lb = *t->Loss({*b}, false);
  const double packed = *t->Loss({*a, *b}, false);
  EXPECT_NEAR(packed, (la * counted(*a) + lb * counted(*b)) / (counted(*a) + counted(*b)), 1e-4);
}

// A few optimizer steps on a handful of pairs lower their loss a lot.
TEST_F(TrainerTest, FewStepsLowerTheLoss) {
  TrainConfig config;
  config.lr = 3e-3;
  config.warmup_steps = 2;
  config.total_steps = 30;
  auto t = Make(config);
  std::vector<Sequence> batch;
  for (const auto& [en, de] : std::vector<std::pair<std::string, std::string>>{
           {"the dog", "der Hund"}, {"a cat", "eine Katze"}, {"the house", "das Haus"}}) {
    batch.push_back(*t->BatchSequence(en, de));
  }
  const double before = *t->Loss(batch, false);
  ASSERT_NO_FATAL_FAILURE(Train(*t, batch, config.total_steps));
  const double after = *t->Loss(batch, false);
  EXPECT_LT(after, 0.3 * before) << "before " << before << " after " << after;
  EXPECT_EQ(t->steps(), 30);
}

// Saved then loaded weights give the trainer's logits.
TEST_F(TrainerTest, CheckpointRoundTrip) {
  TrainConfig config;
  config.lr = 1e-2;
  config.total_steps = 3;
  auto t = Make(config);
  std::vector<Sequence> batch = {*t->BatchSequence("the dog", "der Hund")};
  ASSERT_NO_FATAL_FAILURE(Train(*t, batch, 3));
  const std::string out = (dir_ / "checkpoint").string();
  ASSERT_TRUE(t->Save(model_dir_, out).ok());
  auto loaded = model::Model::Load(out, {.threads = 2});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::vector<int64_t> tokens = batch[0].tokens, positions = batch[0].positions;
  const int64_t n = static_cast<int64_t>(tokens.size());
  model::DenseAttention attention({}, {}, model::DenseAttention::CausalMask(n));
  auto logits = (*loaded)->Forward(torch::tensor(tokens), torch::tensor(positions),
                                   torch::arange(n), attention);
  ASSERT_TRUE(logits.ok()) << logits.status();
  const torch::Tensor ours = t->Logits(tokens, positions);
  // Two fp32 paths (the trainer's libtorch products, the served model's kernels and oneDNN's
  // sgemm for these 95 rows) sum in different orders: equal within 1e-5 of the largest logit.
  const double scale = ours.abs().max().item<double>();
  EXPECT_LE((ours - *logits).abs().max().item<double>(), 1e-5 * scale) << "largest " << scale;
  // And they differ from the initial model's: training changed the weights.
  model::DenseAttention again({}, {}, model::DenseAttention::CausalMask(n));
  auto initial =
      model_->Forward(torch::tensor(tokens), torch::tensor(positions), torch::arange(n), again);
  EXPECT_FALSE(torch::allclose(ours, *initial, 1e-3, 1e-3));
}

// The streaming layout of docs/GPE.md 7 on a small example, worked by hand: source "a bb"
// (units: prompt, "a", " bb", end), k = 1, target "X Y." (words "X" and " Y.", then EOS).
TEST_F(TrainerTest, StreamingSequenceLayout) {
  TrainConfig config;
  config.mode = "streaming";
  config.wait_k = 1;
  auto t = Make(config);
  auto s = t->StreamingSequence("a bb", "X Y.");
  ASSERT_TRUE(s.ok()) << s.status();
  const tokenizer::Tokenizer& tok = *model_->tokenizer();
  auto count = [&](const std::string& text) {
    return static_cast<int64_t>(tok.Encode(text, {.add_special_tokens = false})->size());
  };
  const int64_t p = count(profile_.Prefix()), a = count("a"), bb = count(" bb"),
                e = count(profile_.end), h = count(profile_.assistant);
  ASSERT_EQ(a, 1);
  ASSERT_EQ(bb, 3);  // byte-level without merges: " ", "b", "b"
  const int64_t src = p + a + bb + e;
  EXPECT_EQ(s->source_length, src);
  // Target tokens: header, "X", " ", "Y", ".", EOS (257).
  const int64_t m = h + 5;
  ASSERT_EQ(static_cast<int64_t>(s->tokens.size()), src + m);
  EXPECT_EQ(s->tokens.back(), 257);
  for (int64_t i = 0; i < src; ++i) EXPECT_EQ(s->positions[i], i);
  for (int64_t j = 0; j < m; ++j) EXPECT_EQ(s->positions[src + j], profile_.phi + j);
  // Units visible: header (word 0) k - 1 = 0; word 1 ("X") 1; word 2 (" Y.") 2; EOS (word 3)
  // min(3, n + 1 = 3) = 3. Shifted up one row: each row sees what the next row's word sees.
  std::vector<int64_t> want;
  for (int64_t i = 0; i + 1 < h; ++i) want.push_back(p);  // header rows before the last
  want.push_back(p + a);                                  // last header row: word 1's view
  want.push_back(p + a + bb);                             // "X": word 2's view
  want.push_back(p + a + bb);                             // " "
  want.push_back(p + a + bb);                             // "Y"
  want.push_back(src);                                    // ".": EOS's view (everything)
  want.push_back(src);                                    // EOS: its own
  EXPECT_EQ(s->visible_source, want);
  // Labels: the first header token from the first source token after the prompt; every
  // target token (header included) and EOS from the target row before it.
  for (int64_t i = 0; i < src; ++i) {
    EXPECT_EQ(s->targets[i], i == p ? s->tokens[src] : -1) << i;
  }
  for (int64_t j = 0; j + 1 < m; ++j) EXPECT_EQ(s->targets[src + j], s->tokens[src + j + 1]);
  EXPECT_EQ(s->targets.back(), -1);
}

// The streaming mask is what the loss sees: a source token that no target row may see yet
// does not change the loss of the rows before it, and a visible one does.
TEST_F(TrainerTest, StreamingMaskHidesUnreadSource) {
  TrainConfig config;
  config.mode = "streaming";
  config.wait_k = 1;
  auto t = Make(config);
  auto base = t->StreamingSequence("a bb cc", "X Y.");
  ASSERT_TRUE(base.ok());
  // The header's rows before the last see only the prompt; change the last source word
  // (" cc", unit 3, first visible to word 3) and compare the loss of those rows only.
  auto header_loss = [&](Sequence s, int64_t changed_token) {
    if (changed_token >= 0) s.tokens[changed_token] = 'z';
    for (int64_t r = 0; r < static_cast<int64_t>(s.targets.size()); ++r) {
      const bool early_header_row = r >= s.source_length && r + 1 < s.source_length + 3;
      if (!early_header_row) s.targets[r] = -1;
    }
    return *t->Loss({s}, false);
  };
  const int64_t last_source_word =
      base->source_length - 1 -
      static_cast<int64_t>(
          model_->tokenizer()->Encode(profile_.end, {.add_special_tokens = false})->size());
  EXPECT_DOUBLE_EQ(header_loss(*base, -1), header_loss(*base, last_source_word));
  // A prompt token is visible to them: changing it changes their loss.
  EXPECT_NE(header_loss(*base, -1), header_loss(*base, 1));
}

TEST_F(TrainerTest, StreamingTrainingLowersTheLoss) {
  TrainConfig config;
  config.mode = "streaming";
  config.wait_k = 2;
  config.lr = 3e-3;
  config.total_steps = 25;
  auto t = Make(config);
  std::vector<Sequence> batch;
  for (const auto& [en, de] : std::vector<std::pair<std::string, std::string>>{
           {"the dog sleeps", "der Hund schläft"}, {"a cat", "eine Katze"}}) {
    batch.push_back(*t->StreamingSequence(en, de));
  }
  const double before = *t->Loss(batch, false);
  ASSERT_NO_FATAL_FAILURE(Train(*t, batch, config.total_steps));
  EXPECT_LT(*t->Loss(batch, false), 0.3 * before);
}

// Saved in bf16: half the bytes, config says bfloat16, logits within bf16 rounding.
TEST_F(TrainerTest, CheckpointInBf16) {
  auto t = Make();
  const std::string f32 = (dir_ / "f32").string(), bf16 = (dir_ / "bf16").string();
  ASSERT_TRUE(t->Save(model_dir_, f32).ok());
  ASSERT_TRUE(t->Save(model_dir_, bf16, model::DType::kBF16).ok());
  const auto size = [](const std::string& d) { return fs::file_size(d + "/model.safetensors"); };
  EXPECT_LT(size(bf16), size(f32) * 6 / 10);
  auto loaded = model::Model::Load(bf16, {.threads = 2});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config().torch_dtype, "bfloat16");
  const std::vector<int64_t> tokens = {256, 72, 101, 108, 257}, positions = {0, 1, 2, 3, 4};
  model::DenseAttention attention({}, {}, model::DenseAttention::CausalMask(5));
  auto logits = (*loaded)->Forward(torch::tensor(tokens), torch::tensor(positions),
                                   torch::arange(5), attention);
  ASSERT_TRUE(logits.ok());
  const torch::Tensor ours = t->Logits(tokens, positions);
  const double scale = ours.abs().max().item<double>();
  EXPECT_LT((ours - *logits).abs().max().item<double>(), 0.05 * scale);
  EXPECT_FALSE(torch::equal(ours, *logits));  // it was rounded
}

// Mixed mode draws batch-mode sequences with the configured probability and streaming ones
// with every k of the range (and only those): the sequence equals the one built directly.
TEST_F(TrainerTest, MixedModeDrawsModesAndWaitK) {
  TrainConfig config;
  config.mode = "mixed";
  config.wait_k = 1;
  config.wait_k_max = 3;
  config.batch_fraction = 0.25;
  auto t = Make(config);
  const std::string en = "the dog sees a cat", de = "der Hund sieht eine Katze";
  const Sequence batch = *t->BatchSequence(en, de);
  std::vector<Sequence> streaming;
  for (int k = 1; k <= 4; ++k) streaming.push_back(*t->StreamingSequence(en, de, k));
  ASSERT_NE(streaming[0].visible_source, streaming[1].visible_source);
  std::mt19937_64 rng(5);
  std::map<int, int> seen;  // 0: batch, k: streaming with k
  constexpr int kDraws = 400;
  for (int i = 0; i < kDraws; ++i) {
    const Sequence s = *t->MakeSequence(en, de, rng);
    int kind = -1;
    if (s.positions == batch.positions && s.visible_source.empty()) kind = 0;
    for (int k = 1; k <= 4; ++k) {
      if (s.positions == streaming[k - 1].positions &&
          s.visible_source == streaming[k - 1].visible_source) {
        kind = k;
      }
    }
    ASSERT_GE(kind, 0) << "draw " << i << " is neither batch nor streaming";
    ++seen[kind];
  }
  EXPECT_EQ(seen.count(4), 0u) << "k = 4 is outside the range";
  EXPECT_NEAR(seen[0], kDraws / 4, 40);
  for (int k = 1; k <= 3; ++k) EXPECT_NEAR(seen[k], kDraws / 4, 40) << "k = " << k;
}

// Resuming from SaveState continues exactly: 2 + 2 steps through a saved state give the same
// weights (logits) as 4 steps in one trainer; a missing or damaged state is refused.
TEST_F(TrainerTest, ResumeIsExact) {
  TrainConfig config;
  config.lr = 1e-2;
  config.warmup_steps = 1;
  config.total_steps = 4;
  auto whole = Make(config);
  std::vector<Sequence> batch = {*whole->BatchSequence("the dog", "der Hund"),
                                 *whole->BatchSequence("a cat", "eine Katze")};
  ASSERT_NO_FATAL_FAILURE(Train(*whole, batch, 4));
  auto first = Make(config);
  ASSERT_NO_FATAL_FAILURE(Train(*first, batch, 2));
  const std::string dir = (dir_ / "checkpoint-2").string();
  ASSERT_TRUE(first->SaveState(dir).ok());
  auto resumed = Make(config);
  ASSERT_TRUE(resumed->LoadState(dir).ok());
  EXPECT_EQ(resumed->steps(), 2);
  ASSERT_NO_FATAL_FAILURE(Train(*resumed, batch, 2));
  const std::vector<int64_t>& tokens = batch[0].tokens;
  const torch::Tensor expected = whole->Logits(tokens, batch[0].positions);
  EXPECT_TRUE(torch::allclose(resumed->Logits(tokens, batch[0].positions), expected, 1e-6, 1e-6));
  fs::remove(fs::path(dir) / "trainer_state" / "optimizer.pt");
  EXPECT_EQ(Make(config)->LoadState(dir).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Make(config)->LoadState((dir_ / "nowhere").string()).code(),
            absl::StatusCode::kNotFound);
}

// LoRA: a few streaming steps lower the loss of the adapter alone, the base stays as loaded,
// and the saved PEFT folder served on the base gives the trainer's logits (and not the
// base's).
TEST_F(TrainerTest, LoraTrainsOnlyTheAdapter) {
  TrainConfig config;
  config.mode = "streaming";
  config.lr = 1e-2;
  config.total_steps = 25;
  model::AdapterConfig lora;
  lora.r = 4;
  lora.lora_alpha = 8;
  lora.target_list = {"q_proj", "v_proj", "down_proj", "embed_tokens"};
  config.lora = lora;
  auto t = Make(config);
  ASSERT_NE(t, nullptr);
  const torch::Tensor q_before = model_->weights().layers[0].q_w.data.clone();
  std::vector<Sequence> batch;
  for (const auto& [en, de] : std::vector<std::pair<std::string, std::string>>{
           {"the dog", "der Hund"}, {"a cat", "eine Katze"}, {"the house", "das Haus"}}) {
    batch.push_back(*t->StreamingSequence(en, de));
  }
  const std::vector<int64_t>& tokens = batch[0].tokens;
  std::vector<int64_t> positions(tokens.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int64_t>(i);
  // B starts at zero (the embedding's A too): the untrained adapter is the base.
  const int64_t n = static_cast<int64_t>(tokens.size());
  model::DenseAttention base_attention({}, {}, model::DenseAttention::CausalMask(n));
  const torch::Tensor base = *model_->Forward(torch::tensor(tokens), torch::tensor(positions),
                                              torch::arange(n), base_attention);
  EXPECT_TRUE(torch::allclose(t->Logits(tokens, positions), base, 1e-5, 1e-5));
  const double before = *t->Loss(batch, false);
  ASSERT_NO_FATAL_FAILURE(Train(*t, batch, config.total_steps));
  const double after = *t->Loss(batch, false);
  EXPECT_LT(after, 0.7 * before) << "before " << before << " after " << after;
  EXPECT_TRUE(model_->weights().layers[0].q_w.data.equal(q_before));

  const std::string out = (dir_ / "lora").string();
  ASSERT_TRUE(t->Save(model_dir_, out).ok());
  EXPECT_TRUE(fs::exists(fs::path(out) / "adapter_config.json"));
  auto adapter = model::LoadAdapter(out, *model_, "trained");
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  model::DenseAttention attention({}, {}, model::DenseAttention::CausalMask(n));
  const std::vector<model::AdapterSpan> spans = {{adapter->get(), 0, n}};
  auto served = model_->Forward(torch::tensor(tokens), torch::tensor(positions), torch::arange(n),
                                attention, spans);
  ASSERT_TRUE(served.ok()) << served.status();
  const torch::Tensor trained = t->Logits(tokens, positions);
  EXPECT_TRUE(torch::allclose(trained, *served, 1e-4, 1e-4))
      << (trained - *served).abs().max().item<float>();
  EXPECT_FALSE(torch::allclose(trained, base, 1e-3, 1e-3));
  // The adapter carries the instruction it was trained with (prompt.json).
  ASSERT_TRUE((*adapter)->config.instruction.has_value());
  EXPECT_FALSE((*adapter)->config.instruction->empty());

  // --save_dtype bf16: half the bytes, the same adapter up to bf16 rounding.
  const std::string half = (dir_ / "lora-bf16").string();
  ASSERT_TRUE(t->Save(model_dir_, half, model::DType::kBF16).ok());
  const auto f32_bytes = fs::file_size(fs::path(out) / "adapter_model.safetensors");
  const auto bf16_bytes = fs::file_size(fs::path(half) / "adapter_model.safetensors");
  EXPECT_LT(bf16_bytes, f32_bytes * 6 / 10) << f32_bytes << " -> " << bf16_bytes;
  auto rounded = model::LoadAdapter(half, *model_, "bf16");
  ASSERT_TRUE(rounded.ok()) << rounded.status();
  model::DenseAttention half_attention({}, {}, model::DenseAttention::CausalMask(n));
  const std::vector<model::AdapterSpan> half_spans = {{rounded->get(), 0, n}};
  auto served_bf16 = model_->Forward(torch::tensor(tokens), torch::tensor(positions),
                                     torch::arange(n), half_attention, half_spans);
  ASSERT_TRUE(served_bf16.ok()) << served_bf16.status();
  // bf16 keeps 8 significant bits: within 2 % of the logits' scale.
  const float scale = served->abs().max().item<float>();
  EXPECT_LT((*served_bf16 - *served).abs().max().item<float>(), 0.02 * scale)
      << (*served_bf16 - *served).abs().max().item<float>() << " at logit scale " << scale;
  EXPECT_FALSE(torch::equal(*served_bf16, *served));
}

// LoRA training resumes exactly (the same seed gives the same initial adapter).
TEST_F(TrainerTest, LoraResumeIsExact) {
  TrainConfig config;
  config.lr = 1e-2;
  config.total_steps = 4;
  model::AdapterConfig lora;
  lora.r = 2;
  lora.target_list = {"all-linear"};
  config.lora = lora;
  auto whole = Make(config);
  std::vector<Sequence> batch = {*whole->BatchSequence("the dog", "der Hund")};
  ASSERT_NO_FATAL_FAILURE(Train(*whole, batch, 4));
  auto first = Make(config);
  ASSERT_NO_FATAL_FAILURE(Train(*first, batch, 2));
  const std::string dir = (dir_ / "lora-checkpoint-2").string();
  ASSERT_TRUE(first->SaveState(dir).ok());
  auto resumed = Make(config);
  ASSERT_TRUE(resumed->LoadState(dir).ok());
  ASSERT_NO_FATAL_FAILURE(Train(*resumed, batch, 2));
  EXPECT_TRUE(torch::allclose(resumed->Logits(batch[0].tokens, batch[0].positions),
                              whole->Logits(batch[0].tokens, batch[0].positions), 1e-6, 1e-6));
}

// Padded per-sequence attention equals one block-diagonal mask over the packed rows (grouped
// heads, uneven lengths, a streaming-like mask), values and gradients.
TEST(PaddedAttentionTest, EqualsBlockDiagonalAttention) {
  torch::manual_seed(3);
  const std::vector<int64_t> lengths = {5, 2, 7};
  const int64_t t = 14, heads = 4, kv_heads = 2, dim = 8, length = 7;
  const torch::Tensor q = torch::randn({t, heads, dim}, torch::requires_grad());
  const torch::Tensor k = torch::randn({t, kv_heads, dim}, torch::requires_grad());
  const torch::Tensor v = torch::randn({t, kv_heads, dim}, torch::requires_grad());
  torch::Tensor packed = torch::zeros({t, t}, torch::kBool);
  torch::Tensor rows = torch::full({3, length}, t, torch::kInt64);
  torch::Tensor allowed = torch::zeros({3, length, length}, torch::kBool);
  int64_t begin = 0;
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t r = 0; r < length; ++r) {
      if (r >= lengths[i]) {
        allowed[i][r][r] = true;
        continue;
      }
      rows[i][r] = begin + r;
      for (int64_t c = 0; c <= r; ++c) {
        const bool see = !(i == 2 && r >= 4 && c == 1);  // some rows skip a key, as streaming
        allowed[i][r][c] = see;
        packed[begin + r][begin + c] = see;
      }
    }
    begin += lengths[i];
  }
  model::PaddedAttention padded(rows, allowed);
  // Plain attention, then a windowed, soft-capped layer (Gemma 2's) with a window shorter than
  // the longest sequence.
  for (const model::LayerAttention spec :
       {model::LayerAttention{.layer = 0, .scale = 1 / std::sqrt(double(dim))},
        model::LayerAttention{.layer = 1, .scale = 0.3, .softcap = 0.5, .window = 3}}) {
    const torch::Tensor expected =
        model::ScaledDotProductAttention(q, k, v, model::WindowMask(packed, spec.window), spec);
    const torch::Tensor got = padded.Attend(spec, q, k, v);
    EXPECT_TRUE(torch::allclose(got, expected, 1e-5, 1e-5)) << "window " << spec.window;
    const torch::Tensor weights = torch::randn_like(expected);
    auto grads = [&](const torch::Tensor& out) {
      auto g = torch::autograd::grad({(out * weights).sum()}, {q, k, v});
      return torch::cat({g[0].flatten(), g[1].flatten(), g[2].flatten()});
    };
    EXPECT_TRUE(torch::allclose(grads(got), grads(expected), 1e-4, 1e-5))
        << "window " << spec.window;
  }
}

TEST_F(TrainerTest, UnknownModeRefused) {
  TrainConfig config;
  config.mode = "sideways";
  EXPECT_EQ(Trainer::Create(model_, profile_, config).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpeserve::train
