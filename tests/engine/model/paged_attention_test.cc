#include "engine/model/paged_attention.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "cli/make_model.h"
#include "engine/kv/block_table.h"
#include "engine/model/model.h"
#include "engine/util/remove_tree.h"
#include "gtest/gtest.h"
#include "tests/engine/tokenizer/test_tokenizers.h"

namespace gpeserve::model {
namespace {

namespace fs = std::filesystem;

// A tiny random model of `o.arch` (a byte-level vocabulary).
std::shared_ptr<const Model> TinyModel(MakeModelOptions o = {.arch = "llama"}) {
  // Per process: ctest runs this binary three times at once (paged_attention_test_libtorch,
  // _scalar).
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("gpe_paged_attention_test_" + std::to_string(::getpid()) + "_" + o.arch);
  EXPECT_TRUE(model::RemoveTree(dir).ok());
  fs::create_directories(dir / "tok");
  std::ofstream((dir / "tok" / "tokenizer.json").string())
      << tokenizer::testing::ByteLevelJson({}, {}).dump();
  o.tokenizer_dir = (dir / "tok").string();
  o.seed = 11;
  o.init_std = 0.2;
  EXPECT_TRUE(MakeModel(o, (dir / "model").string()).ok());
  auto m = Model::Load((dir / "model").string(), {.threads = 2});
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

// One session of the group-streaming layout: a source group and a target group, each in its
// own block table, target positions starting at phi.
struct Session {
  int64_t phi = 0;
  kv::BlockTable source, target;
  std::vector<int64_t> source_tokens, target_tokens;
  std::vector<int64_t> source_seen;  // per target token: source tokens it saw when computed
  std::vector<torch::Tensor> source_logits, target_logits;  // latest computation of each token
};

// A read or a write of one session in a batch.
struct Op {
  Session* session;
  bool write;
  std::vector<int64_t> tokens;
};

class PagedRun {
 public:
  // kv_dtype: the pool's elements (Undefined: the model's activation dtype).
  PagedRun(const Model& model, int block_size, int blocks,
           torch::ScalarType kv_dtype = torch::ScalarType::Undefined)
      : model_(model),
        allocator_({.block_size = block_size, .num_blocks = blocks}),
        pool_(*kv::KvPool::Create(
            {.block_size = block_size, .num_blocks = blocks},
            {model.config().num_layers, model.config().num_kv_heads, model.config().head_dim},
            kv_dtype == torch::ScalarType::Undefined ? model.dtype() : kv_dtype, model.device())) {}

  // Runs the ops as one batched forward pass.
  void Step(const std::vector<Op>& ops) {
    const int bs = allocator_.block_size();
    std::vector<int64_t> tokens, positions;
    std::vector<AttentionSegment> segments;
    for (const Op& op : ops) {
      Session& s = *op.session;
      const int64_t n = static_cast<int64_t>(op.tokens.size());
      AttentionSegment seg;
      seg.begin = static_cast<int64_t>(tokens.size());
      seg.length = n;
      seg.context_slots = s.source.Slots(0, s.source.num_tokens(), bs);
      kv::BlockTable& table = op.write ? s.target : s.source;
      const int64_t before = table.num_tokens();
      if (op.write) {
        const auto target_slots = s.target.Slots(0, before, bs);
        seg.context_slots.insert(seg.context_slots.end(), target_slots.begin(), target_slots.end());
      }
      ASSERT_TRUE(table.Append(n, allocator_).ok());
      seg.new_slots = table.Slots(before, before + n, bs);
      for (int64_t i = 0; i < n; ++i) {
        tokens.push_back(op.tokens[i]);
        positions.push_back((op.write ? s.phi : 0) + before + i);
      }
      segments.push_back(std::move(seg));
    }
    PagedAttention attention(pool_, segments);
    const int64_t t = static_cast<int64_t>(tokens.size());
    auto logits = model_.Forward(torch::tensor(tokens), torch::tensor(positions), torch::arange(t),
                                 attention);
    ASSERT_TRUE(logits.ok()) << logits.status();
    int64_t row = 0;
    for (const Op& op : ops) {
      Session& s = *op.session;
      for (int64_t token : op.tokens) {
        if (op.write) {
          s.target_tokens.push_back(token);
          s.source_seen.push_back(s.source.num_tokens());
          s.target_logits.push_back((*logits)[row++]);
        } else {
          s.source_tokens.push_back(token);
          s.source_logits.push_back((*logits)[row++]);
        }
      }
    }
  }

  // Drops the last n target tokens (the roll-back of GPE.md 4).
  void RollBack(Session& s, int64_t n) {
    s.target.Truncate(n, allocator_);
    for (int64_t i = 0; i < n; ++i) {
      s.target_tokens.pop_back();
      s.source_seen.pop_back();
      s.target_logits.pop_back();
    }
  }

  void Release(Session& s) {
    s.source.Release(allocator_);
    s.target.Release(allocator_);
  }
  const kv::BlockAllocator& allocator() const { return allocator_; }

 private:
  const Model& model_;
  kv::BlockAllocator allocator_;
  kv::KvPool pool_;
};

// The session's logits from one full forward with the group-position-encoding mask.
torch::Tensor FullForward(const Model& model, const Session& s) {
  const int64_t ns = static_cast<int64_t>(s.source_tokens.size());
  const int64_t nt = static_cast<int64_t>(s.target_tokens.size());
  std::vector<int64_t> tokens = s.source_tokens, positions;
  tokens.insert(tokens.end(), s.target_tokens.begin(), s.target_tokens.end());
  for (int64_t i = 0; i < ns; ++i) positions.push_back(i);
  for (int64_t j = 0; j < nt; ++j) positions.push_back(s.phi + j);
  torch::Tensor allowed = torch::zeros({ns + nt, ns + nt}, torch::kBool);
  allowed.slice(0, 0, ns).slice(1, 0, ns).copy_(DenseAttention::CausalMask(ns));
  for (int64_t j = 0; j < nt; ++j) {
    allowed[ns + j].slice(0, 0, s.source_seen[j]).fill_(true);  // source read at the time
    allowed[ns + j].slice(0, ns, ns + j + 1).fill_(true);       // target, causal
  }
  DenseAttention attention({}, {}, allowed);
  return *model.Forward(torch::tensor(tokens), torch::tensor(positions), torch::arange(ns + nt),
                        attention);
}

// The largest error of the session's logits against one full forward, relative to the logit
// scale (max |logit|).
double ErrorAgainstFullForward(const Model& model, const Session& s) {
  const torch::Tensor full = FullForward(model, s);
  const int64_t ns = static_cast<int64_t>(s.source_tokens.size());
  const double scale = full.abs().max().item<double>();
  double error = 0;
  for (int64_t i = 0; i < ns; ++i) {
    error = std::max(error, (s.source_logits[i] - full[i]).abs().max().item<double>() / scale);
  }
  for (size_t j = 0; j < s.target_logits.size(); ++j) {
    error = std::max(error, (s.target_logits[j] - full[ns + j]).abs().max().item<double>() / scale);
  }
  return error;
}

void ExpectMatchesFullForward(const Model& model, const Session& s, const std::string& name) {
  EXPECT_LT(ErrorAgainstFullForward(model, s), 1e-5) << name;
}

// The families' tiny test models, windows shorter than the sessions' contexts (so that the
// window cuts source and target keys), soft-capping active, longrope switching factors within
// a session.
std::vector<MakeModelOptions> Families() {
  return {
      {.arch = "llama"},
      {.arch = "mistral", .sliding_window = 3},
      {.arch = "gemma2",
       .sliding_window = 4,
       .attn_logit_softcapping = 0.5,
       .final_logit_softcapping = 2.0},
      {.arch = "qwen3", .sliding_window = 3, .max_window_layers = 1},
      {.arch = "gemma3",
       .num_layers = 3,
       .rope_scaling = "linear",
       .sliding_window = 3,
       .sliding_window_pattern = 2},
      {.arch = "phi3",
       .rope_scaling = "longrope",
       .sliding_window = 5,
       .partial_rotary_factor = 0.5,
       .original_max_position_embeddings = 12},
  };
}

// The session script of the tests below: reads, writes, roll-backs, two sessions interleaved.
void RunScript(PagedRun& run, Session& a, Session& b) {
  a.phi = 0;
  b.phi = 10;
  run.Step({{&a, false, {11, 12, 13, 40, 41}}, {&b, false, {11, 12, 13, 70}}});
  run.Step({{&a, true, {20, 21, 22}}, {&b, false, {71}}});
  run.Step({{&a, true, {50}}, {&b, true, {20, 21}}});
  run.RollBack(a, 1);  // the token before the new word is fed again after the next read
  run.Step({{&a, false, {42}}, {&b, true, {80}}});
  run.Step({{&b, true, {81}}, {&a, true, {50}}});
  run.Step({{&a, true, {51, 52}}});
  run.RollBack(b, 1);
  run.Step({{&b, false, {72, 73}}});
  run.Step({{&b, true, {81}}, {&a, false, {43}}});
}

// Each row keeps its last `window` allowed keys, whatever the mask's shape.
TEST(PagedAttentionTest, WindowMaskKeepsTheLastVisibleKeysOfEachRow) {
  const torch::Tensor allowed = torch::rand({7, 11}) > 0.4;
  for (int64_t window : {0, 1, 3, 20}) {
    const torch::Tensor got = WindowMask(allowed, window);
    for (int64_t r = 0; r < 7; ++r) {
      int64_t seen = 0;
      for (int64_t c = 10; c >= 0; --c) {
        const bool visible = allowed[r][c].item<bool>();
        seen += visible;
        EXPECT_EQ(got[r][c].item<bool>(), visible && (window == 0 || seen <= window))
            << "window " << window << " row " << r << " key " << c;
      }
    }
  }
}

// Invariant 1: reads, writes and roll-backs of two sessions batched over the paged cache give
// the logits of one full forward per session with the GPE positions and mask (a windowed layer
// sees the last W keys of its row in cache order: source, then target), for every family.
TEST(PagedAttentionTest, IncrementalGroupStreamingEqualsFullForward) {
  for (const MakeModelOptions& family : Families()) {
    auto model = TinyModel(family);
    ASSERT_NE(model, nullptr);
    for (int block_size : {1, 2, 16}) {
      PagedRun run(*model, block_size, 64);
      Session a, b;
      RunScript(run, a, b);
      const std::string name = family.arch + ", block size " + std::to_string(block_size);
      ExpectMatchesFullForward(*model, a, "session a, " + name);
      ExpectMatchesFullForward(*model, b, "session b, " + name);
      // Invariant 4: after the sessions end, the pool is full again.
      run.Release(a);
      run.Release(b);
      EXPECT_EQ(run.allocator().free_blocks(), 64);
    }
  }
}

// A 16-bit KV cache (--kv_cache_dtype bf16|fp16): keys and values rounded once when stored,
// attention in fp32. Within 3e-2 (bf16: 8 bits of mantissa) and 4e-3 (fp16: 11) of the logit
// scale of the exact full forward on every family, and not equal to it (the rounding is there).
TEST(PagedAttentionTest, SixteenBitKvStaysWithinItsRounding) {
  for (const MakeModelOptions& family : Families()) {
    auto model = TinyModel(family);
    ASSERT_NE(model, nullptr);
    for (const auto& [dtype, bound] :
         {std::pair{torch::kBFloat16, 3e-2}, std::pair{torch::kHalf, 4e-3}}) {
      PagedRun run(*model, 2, 64, dtype);
      Session a, b;
      RunScript(run, a, b);
      const double error =
          std::max(ErrorAgainstFullForward(*model, a), ErrorAgainstFullForward(*model, b));
      EXPECT_LT(error, bound) << family.arch << " " << torch::toString(dtype);
      EXPECT_GT(error, 1e-7) << family.arch << " " << torch::toString(dtype);
      std::cout << family.arch << " " << torch::toString(dtype) << " KV: max error / scale "
                << error << "\n";
    }
  }
}

}  // namespace
}  // namespace gpeserve::model
