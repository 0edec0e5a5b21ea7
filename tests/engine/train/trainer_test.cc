#include "engine/train/trainer.h"

#include <unistd.h>

#include <filesystem>

#include "engine/model/attention.h"
#include "gtest/gtest.h"
#include "tests/engine/test_models.h"

namespace gpeserve::train {
namespace {

namespace fs = std::filesystem;

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
  void TearDown() override { fs::remove_all(dir_); }

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
  for (int step = 0; step < config.total_steps; ++step) {
    ASSERT_TRUE(t->Loss(batch, /*backward=*/true).ok());
    t->OptimizerStep();
  }
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
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(t->Loss(batch, true).ok());
    t->OptimizerStep();
  }
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
  EXPECT_TRUE(torch::allclose(ours, *logits, 1e-5, 1e-5));
  // And they differ from the initial model's: training changed the weights.
  model::DenseAttention again({}, {}, model::DenseAttention::CausalMask(n));
  auto initial =
      model_->Forward(torch::tensor(tokens), torch::tensor(positions), torch::arange(n), again);
  EXPECT_FALSE(torch::allclose(ours, *initial, 1e-3, 1e-3));
}

TEST_F(TrainerTest, StreamingModeIsRefusedUntilBuilt) {
  TrainConfig config;
  config.mode = "streaming";
  auto t = Trainer::Create(model_, profile_, config);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace gpeserve::train
