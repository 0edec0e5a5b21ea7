#include "engine/session/stream_session.h"

#include <filesystem>
#include <fstream>
#include <random>

#include "engine/model/make_model.h"
#include "gtest/gtest.h"
#include "tests/engine/tokenizer/test_tokenizers.h"

namespace gpeserve::session {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<const model::Model> TinyModel(uint64_t seed) {
  const fs::path dir = fs::path(::testing::TempDir()) / "gpe_stream_session_test";
  fs::create_directories(dir / "tok");
  std::ofstream((dir / "tok" / "tokenizer.json").string())
      << tokenizer::testing::ByteLevelJson(
             {}, {},
             nlohmann::json::array({tokenizer::testing::Added(256, "<|im_start|>", true),
                                    tokenizer::testing::Added(257, "<|im_end|>", true)}))
             .dump();
  std::ofstream((dir / "tok" / "tokenizer_config.json").string())
      << R"({"eos_token": "<|im_end|>"})";
  model::MakeModelOptions o;
  o.arch = "qwen2";
  o.tokenizer_dir = (dir / "tok").string();
  o.seed = seed;
  o.init_std = 0.3;
  const std::string out = (dir / ("model" + std::to_string(seed))).string();
  EXPECT_TRUE(model::MakeModel(o, out).ok());
  auto m = model::Model::Load(out, {.threads = 2});
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

struct NaiveResult {
  std::vector<int32_t> output;
  std::vector<int64_t> delays;
};

// The same policy driven by a model that recomputes everything at every step: one full
// forward with the group-position-encoding mask, no cache.
NaiveResult NaiveRun(const model::Model& m, const SessionOptions& options,
                     const std::vector<std::vector<int32_t>>& segments) {
  const tokenizer::Tokenizer& tok = *m.tokenizer();
  std::set<int32_t> eos = {257};
  policy::PolicyConfig config = options.policy;
  const bool batch = options.paradigm == Paradigm::kBatch;
  if (batch) config.wait_k = 1 << 30;
  policy::WaitKPolicy p(config, tok, *tok.Encode(options.profile.assistant), eos,
                        options.profile.end);
  for (size_t u = 1; u + 1 < segments.size(); ++u) p.AddSourceUnit();
  p.EndSource();
  std::vector<int64_t> source, target, seen;
  while (true) {
    const auto action = p.Next();
    if (action.step == policy::WaitKPolicy::Step::kDone) break;
    if (action.step == policy::WaitKPolicy::Step::kRead) {
      source.insert(source.end(), segments[action.unit].begin(), segments[action.unit].end());
      p.OnRead();
      continue;
    }
    for (int32_t t : action.feed) {
      target.push_back(t);
      seen.push_back(static_cast<int64_t>(source.size()));
    }
    const int64_t ns = source.size(), nt = target.size();
    std::vector<int64_t> tokens = source, positions;
    tokens.insert(tokens.end(), target.begin(), target.end());
    for (int64_t i = 0; i < ns; ++i) positions.push_back(i);
    for (int64_t j = 0; j < nt; ++j) positions.push_back((batch ? ns : options.profile.phi) + j);
    torch::Tensor allowed = torch::zeros({ns + nt, ns + nt}, torch::kBool);
    allowed.slice(0, 0, ns).slice(1, 0, ns).copy_(model::DenseAttention::CausalMask(ns));
    for (int64_t j = 0; j < nt; ++j) {
      allowed[ns + j].slice(0, 0, seen[j]).fill_(true);
      allowed[ns + j].slice(0, ns, ns + j + 1).fill_(true);
    }
    model::DenseAttention attention({}, {}, allowed);
    auto logits = m.Forward(torch::tensor(tokens), torch::tensor(positions),
                            torch::tensor({ns + nt - 1}), attention);
    const auto outcome = p.OnToken(static_cast<int32_t>(logits->argmax(-1).item<int64_t>()));
    if (outcome.kv_rollback) {
      target.pop_back();
      seen.pop_back();
    }
  }
  return {p.output(), p.delays()};
}

// Invariant 1 at session level: the paged, incremental session produces exactly what full
// recomputation with the GPE positions and mask produces (greedy), for many random models,
// sources and wait-k values; and every block is returned.
TEST(StreamSessionTest, PagedSessionEqualsFullRecompute) {
  auto profile = policy::LoadProfile("qwen2.5");
  ASSERT_TRUE(profile.ok());
  std::mt19937 rng(3);
  const std::vector<std::string> vocabulary = {"the", "cat",     "sat", "on",  "a",
                                               "mat", "quickly", "and", "dog", "ran"};
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    auto m = TinyModel(seed);
    ASSERT_NE(m, nullptr);
    kv::BlockAllocator allocator({.block_size = 4, .num_blocks = 128});
    auto pool =
        kv::KvPool::Create({.block_size = 4, .num_blocks = 128},
                           {m->config().num_layers, m->config().num_kv_heads, m->config().head_dim},
                           m->dtype(), m->device());
    ASSERT_TRUE(pool.ok());
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<std::string> words;
      for (int i = 0, n = rng() % 6; i < n; ++i)
        words.push_back(vocabulary[rng() % vocabulary.size()]);
      SessionOptions options;
      options.profile = *profile;
      options.profile.phi = trial % 2 == 0 ? 0 : 5;
      options.policy.wait_k = 1 + static_cast<int>(rng() % 3);
      options.policy.max_new_tokens = 12;
      options.policy.split = trial == 3 ? policy::SplitMode::kToken : policy::SplitMode::kWord;
      options.paradigm = seed == 4 ? Paradigm::kBatch : Paradigm::kGpe;
      auto session = StreamSession::Create(m, options, words);
      ASSERT_TRUE(session.ok()) << session.status();
      const auto segments = (*session)->segments();
      auto result = (*session)->RunToCompletion(*pool, allocator);
      ASSERT_TRUE(result.ok()) << result.status();
      const NaiveResult naive = NaiveRun(*m, options, segments);
      EXPECT_EQ(result->output, naive.output) << "seed " << seed << " trial " << trial;
      EXPECT_EQ(result->delays, naive.delays) << "seed " << seed << " trial " << trial;
      EXPECT_FALSE(result->output.empty());
      EXPECT_EQ(result->source_units, static_cast<int64_t>(segments.size()) - 1);
      EXPECT_EQ(allocator.free_blocks(), 128);  // invariant 4
    }
  }
}

}  // namespace
}  // namespace gpeserve::session
