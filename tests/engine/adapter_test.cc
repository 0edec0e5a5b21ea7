// LoRA adapters in the engine: one step mixing three adapters and the base gives each session
// exactly what it gets alone; prompt-prefix blocks are never shared across adapters; a merged
// adapter equals the unmerged one; loading errors name the file and the field or tensor.
// (Logits against PEFT itself: tests/reference/adapter_reference_test.py.)
#include "engine/model/adapter.h"

#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "engine/engine.h"
#include "engine/model/paged_attention.h"
#include "engine/session/runner.h"
#include "engine/util/remove_tree.h"
#include "gtest/gtest.h"
#include "tests/engine/test_models.h"

namespace gpeserve {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("gpe_adapter_test_" + std::to_string(::getpid())) / name;
  EXPECT_TRUE(model::RemoveTree(dir).ok());
  fs::create_directories(dir);
  return dir;
}

// A random adapter of `config` written as a PEFT folder and loaded.
std::shared_ptr<const model::Adapter> RandomAdapter(const model::Model& m,
                                                    model::AdapterConfig config, uint64_t seed,
                                                    const std::string& name) {
  const fs::path dir = TempDir(name);
  auto tensors = model::RandomAdapterTensors(m, config, seed, 0.3);
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_TRUE(model::WriteAdapterFolder(dir.string(), config, *tensors).ok());
  auto adapter = model::LoadAdapter(dir.string(), m, name);
  EXPECT_TRUE(adapter.ok()) << adapter.status();
  return adapter.ok() ? *adapter : nullptr;
}

model::AdapterConfig Lora(std::vector<std::string> targets, int64_t r = 4) {
  model::AdapterConfig c;
  c.r = r;
  c.lora_alpha = 2.0 * static_cast<double>(r);
  c.target_list = std::move(targets);
  return c;
}

// Three adapters of different shapes: attention only, every projection with rslora, and one
// that changes the embeddings and replaces the LM head.
std::vector<std::shared_ptr<const model::Adapter>> ThreeAdapters(const model::Model& m) {
  const bool fused = m.config().fused_projections;
  model::AdapterConfig second =
      fused
          ? Lora({"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}, 8)
          : Lora({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, 8);
  second.use_rslora = true;
  model::AdapterConfig third = Lora({"embed_tokens", fused ? "qkv_proj" : "v_proj"}, 2);
  third.modules_to_save = {"lm_head"};
  return {RandomAdapter(m, Lora({fused ? "qkv_proj" : "q_proj", "o_proj"}), 1, "a"),
          RandomAdapter(m, second, 2, "b"), RandomAdapter(m, third, 3, "c")};
}

class Collector {
 public:
  engine::EventCallback Callback() {
    return [this](const engine::SessionEvent& e) {
      std::lock_guard<std::mutex> lock(mu_);
      if (e.kind != engine::SessionEvent::Kind::kTokens) {
        final_ = e;
        done_.notify_all();
      }
      return true;
    };
  }
  engine::SessionEvent Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return final_.has_value(); });
    return *final_;
  }

 private:
  std::mutex mu_;
  std::condition_variable done_;
  std::optional<engine::SessionEvent> final_;
};

session::SessionResult Alone(const model::Model& m, session::SessionOptions options,
                             const model::Adapter* adapter, const std::vector<std::string>& words) {
  options.adapter = adapter;
  kv::BlockAllocator allocator({.block_size = 4, .num_blocks = 512});
  auto pool = kv::KvPool::Create(
      {.block_size = 4, .num_blocks = 512},
      {m.config().num_layers, m.config().num_kv_heads, m.config().head_dim}, m.dtype(), m.device());
  auto session = session::CreateOfflineSession(m, options, words);
  EXPECT_TRUE(session.ok()) << session.status();
  auto result = session::RunToCompletion(m, **session, *pool, allocator);
  EXPECT_TRUE(result.ok()) << result.status();
  return *result;
}

// Live sessions of the base and three adapters, arriving and pushing words at random times and
// batched into shared steps (with prompt-prefix sharing on), each produce exactly the tokens
// and delays they produce alone; the adapters do change the output.
TEST(AdapterEngineTest, MixedAdaptersInOneStepEqualEachAlone) {
  for (const model::MakeModelOptions& family :
       {model::MakeModelOptions{.arch = "qwen2"}, model::MakeModelOptions{.arch = "phi3"}}) {
    auto m = testing::TinyChatModel(5, family);
    ASSERT_NE(m, nullptr);
    auto adapters = ThreeAdapters(*m);
    for (const auto& a : adapters) ASSERT_NE(a, nullptr);
    engine::EngineConfig config;
    config.block_size = 4;
    config.kv_blocks = 2048;
    config.scheduler.max_batch_tokens = 96;
    config.scheduler.max_sessions_per_step = 16;
    auto engine = engine::Engine::Create(m, config, adapters);
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_EQ((*engine)->info().adapters, (std::vector<std::string>{"a", "b", "c"}));

    session::SessionOptions options;
    options.profile = *policy::LoadProfile("qwen2.5");
    options.policy.wait_k = 2;
    options.policy.max_new_tokens = 10;
    const std::vector<std::string> names = {"", "a", "b", "c"};
    const std::vector<std::string> words = {"the", "cat", "sat", "on", "a", "mat"};
    const int n = 12;
    std::vector<Collector> collectors(n);
    std::vector<std::thread> feeders;
    for (int i = 0; i < n; ++i) {
      engine::SessionConfig sc{.options = options, .adapter = names[i % 4]};
      auto handle = (*engine)->Open(sc, collectors[i].Callback());
      ASSERT_TRUE(handle.ok()) << handle.status();
      feeders.emplace_back([h = *handle, &words, i] {
        std::mt19937 rng(100 + i);
        for (const std::string& w : words) {
          std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
          h->Push({w});
        }
        h->EndSource();
      });
    }
    for (auto& t : feeders) t.join();
    std::vector<std::vector<int32_t>> alone_outputs(4);
    for (int i = 0; i < n; ++i) {
      const engine::SessionEvent done = collectors[i].Wait();
      ASSERT_EQ(done.kind, engine::SessionEvent::Kind::kDone) << done.status;
      const model::Adapter* adapter = i % 4 == 0 ? nullptr : adapters[i % 4 - 1].get();
      const session::SessionResult alone = Alone(*m, options, adapter, words);
      EXPECT_EQ(done.output, alone.output)
          << family.arch << " session " << i << " adapter '" << names[i % 4] << "'";
      EXPECT_EQ(done.delays, alone.delays) << family.arch << " session " << i;
      alone_outputs[i % 4] = alone.output;
    }
    int differing = 0;
    for (int a = 1; a < 4; ++a) differing += alone_outputs[a] != alone_outputs[0];
    EXPECT_GE(differing, 2) << family.arch << ": the adapters should change the output";
    const engine::EngineStats stats = (*engine)->stats();
    EXPECT_EQ(stats.kv.free_blocks, stats.kv.total_blocks);
    EXPECT_GT(stats.kv.prefix_hits, 0) << "sessions of one adapter share their prompt";
    EXPECT_GT(stats.fused_pieces, 0) << "reads and writes fused across adapters";
  }
}

// Sessions one after another, the prefix cache on: a prompt block cached by one adapter's (or
// the base's) session is found again by a later session of the same adapter and never by one of
// another: each adapter's first session shares nothing, its later ones share their prompt, and
// every session produces what it produces alone.
TEST(AdapterEngineTest, ThePrefixCacheNeverCrossesAdapters) {
  auto m = testing::TinyChatModel(7);
  ASSERT_NE(m, nullptr);
  auto adapters = ThreeAdapters(*m);
  for (const auto& a : adapters) ASSERT_NE(a, nullptr);
  engine::EngineConfig config;
  config.block_size = 4;
  config.kv_blocks = 512;
  config.prefix_cache = true;
  auto engine = engine::Engine::Create(m, config, adapters);
  ASSERT_TRUE(engine.ok()) << engine.status();
  session::SessionOptions options;
  options.profile = *policy::LoadProfile("qwen2.5");
  options.policy.wait_k = 2;
  options.policy.max_new_tokens = 6;
  const std::vector<std::string> words = {"the", "cat", "sat"};
  std::set<std::string> seen;
  for (const std::string name : {"", "a", "a", "b", "", "c", "b", "c"}) {
    Collector collector;
    auto handle = (*engine)->Open({.options = options, .adapter = name}, collector.Callback());
    ASSERT_TRUE(handle.ok()) << handle.status();
    (*handle)->Push(words);
    (*handle)->EndSource();
    const engine::SessionEvent done = collector.Wait();
    ASSERT_EQ(done.kind, engine::SessionEvent::Kind::kDone) << done.status;
    const model::Adapter* adapter = nullptr;
    for (const auto& a : adapters) {
      if (a->name == name) adapter = a.get();
    }
    EXPECT_EQ(done.output, Alone(*m, options, adapter, words).output) << "adapter '" << name << "'";
    if (seen.insert(name).second) {
      EXPECT_EQ(done.counters.shared_tokens, 0) << "first session of adapter '" << name << "'";
    } else {
      EXPECT_GT(done.counters.shared_tokens, 0) << "later session of adapter '" << name << "'";
    }
  }
  const engine::EngineStats stats = (*engine)->stats();
  EXPECT_EQ(stats.kv.free_blocks, stats.kv.total_blocks);
  EXPECT_GT(stats.kv.cached_blocks, 0);
}

// One forward step over pieces of the base and three adapters (several tokens each, mixed
// order) gives each piece the logits it gets alone.
TEST(AdapterEngineTest, RunWorksMixingAdaptersEqualsEachAlone) {
  auto m = testing::TinyChatModel(6);
  auto adapters = ThreeAdapters(*m);
  const model::ModelConfig& c = m->config();
  auto pool =
      kv::KvPool::Create({.block_size = 4, .num_blocks = 64},
                         {c.num_layers, c.num_kv_heads, c.head_dim}, m->dtype(), m->device());
  ASSERT_TRUE(pool.ok());
  std::vector<session::Work> works;
  const std::vector<const model::Adapter*> order = {adapters[2].get(), nullptr, adapters[0].get(),
                                                    adapters[1].get(), adapters[0].get()};
  int64_t slot = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    session::Work w;
    for (int64_t j = 0; j < 3 + static_cast<int64_t>(i); ++j) {
      w.tokens.push_back(static_cast<int32_t>(10 + 7 * i + j));
      w.positions.push_back(j);
      w.slots.push_back(slot++);
    }
    w.sample = true;
    w.adapter = order[i];
    works.push_back(w);
  }
  works[3].sample = false;  // a piece that samples nothing keeps the rows in order
  auto together = session::RunWorks(*m, *pool, works);
  ASSERT_TRUE(together.ok()) << together.status();
  ASSERT_EQ(together->size(0), 4);
  int64_t row = 0;
  for (const session::Work& w : works) {
    if (!w.sample) continue;
    auto alone = session::RunWorks(*m, *pool, {&w, 1});
    ASSERT_TRUE(alone.ok());
    EXPECT_LT(((*together)[row] - (*alone)[0]).abs().max().item<float>(), 1e-4) << "row " << row;
    ++row;
  }
}

// The merged model's logits equal base + adapter unmerged; the base model is unchanged.
TEST(AdapterModelTest, MergedEqualsUnmerged) {
  auto m = testing::TinyChatModel(7, {.arch = "llama", .tie_word_embeddings = true});
  auto adapters = ThreeAdapters(*m);
  const torch::Tensor tokens = torch::tensor({3, 50, 7, 99, 12}, torch::kInt64);
  const torch::Tensor positions = torch::arange(5);
  auto logits = [&](const model::Model& model, const model::Adapter* adapter) {
    model::DenseAttention attention({}, {}, model::DenseAttention::CausalMask(5));
    std::vector<model::AdapterSpan> spans;
    if (adapter != nullptr) spans.push_back({adapter, 0, 5});
    auto out = model.Forward(tokens, positions, torch::arange(5), attention, spans);
    EXPECT_TRUE(out.ok()) << out.status();
    return *out;
  };
  const torch::Tensor base = logits(*m, nullptr);
  for (const auto& adapter : adapters) {
    auto merged = m->WithMergedAdapter(*adapter);
    ASSERT_TRUE(merged.ok()) << merged.status();
    const torch::Tensor unmerged = logits(*m, adapter.get());
    const torch::Tensor folded = logits(**merged, nullptr);
    const double scale = unmerged.abs().max().item<double>();
    EXPECT_LT((folded - unmerged).abs().max().item<double>() / scale, 1e-5) << adapter->name;
    EXPECT_GT((unmerged - base).abs().max().item<double>() / scale, 1e-3) << adapter->name;
    // The adapter touching the embedding or the head unties them.
    EXPECT_EQ((*merged)->config().tie_word_embeddings,
              !adapter->touches_embedding() && !adapter->touches_lm_head());
  }
  EXPECT_TRUE(logits(*m, nullptr).equal(base));
}

void WriteFile(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

// Loading errors name the file and the field or tensor.
TEST(AdapterModelTest, LoadErrorsNameFileAndField) {
  auto m = testing::TinyChatModel(8);
  const fs::path good = TempDir("good");
  auto tensors = model::RandomAdapterTensors(*m, Lora({"q_proj"}), 1, 0.1);
  ASSERT_TRUE(tensors.ok());
  ASSERT_TRUE(model::WriteAdapterFolder(good.string(), Lora({"q_proj"}), *tensors).ok());
  auto expect_error = [&](const fs::path& dir, const std::vector<std::string>& parts) {
    auto loaded = model::LoadAdapter(dir.string(), *m);
    ASSERT_FALSE(loaded.ok()) << dir;
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(loaded.status().message()).find(part), std::string::npos)
          << loaded.status().message() << " lacks '" << part << "'";
    }
  };
  expect_error(TempDir("empty"), {"adapter_config.json"});
  // Fields gpeserve does not compute.
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, std::string>>{{"use_dora", "true"},
                                                        {"bias", "\"all\""},
                                                        {"peft_type", "\"IA3\""},
                                                        {"r", "0"},
                                                        {"target_modules", "[]"},
                                                        {"layer_replication", "[[0, 1]]"}}) {
    const fs::path dir = TempDir("field_" + field);
    fs::copy(good, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    nlohmann::json config = model::AdapterConfig(Lora({"q_proj"})).ToJson();
    config[field] = nlohmann::json::parse(value);
    WriteFile(dir / "adapter_config.json", config.dump());
    expect_error(dir, {"adapter_config.json", field});
  }
  // The config's rank does not fit the tensors.
  {
    const fs::path dir = TempDir("rank");
    fs::copy(good, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    WriteFile(dir / "adapter_config.json", Lora({"q_proj"}, 5).ToJson().dump());
    expect_error(dir, {"adapter_model.safetensors", "lora_A", "rank 5"});
  }
  // Targets the file lacks, and tensors no target claims.
  {
    const fs::path dir = TempDir("missing");
    fs::copy(good, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    WriteFile(dir / "adapter_config.json", Lora({"q_proj", "v_proj"}).ToJson().dump());
    expect_error(dir, {"v_proj.lora_A.weight", "missing"});
    WriteFile(dir / "adapter_config.json", Lora({"k_proj"}).ToJson().dump());
    expect_error(dir, {"k_proj"});
  }
  {
    const fs::path dir = TempDir("unused");
    auto more = model::RandomAdapterTensors(*m, Lora({"q_proj", "v_proj"}), 1, 0.1);
    ASSERT_TRUE(model::WriteAdapterFolder(dir.string(), Lora({"q_proj", "v_proj"}), *more).ok());
    WriteFile(dir / "adapter_config.json", Lora({"q_proj"}).ToJson().dump());
    expect_error(dir, {"v_proj", "belongs to no module"});
  }
  // A target that matches nothing, and one that matches a norm.
  {
    const fs::path dir = TempDir("nothing");
    fs::copy(good, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    WriteFile(dir / "adapter_config.json", Lora({"query"}).ToJson().dump());
    expect_error(dir, {"target_modules", "matches no module"});
    WriteFile(dir / "adapter_config.json", Lora({"q_proj", "input_layernorm"}).ToJson().dump());
    expect_error(dir, {"input_layernorm", "neither a linear"});
  }
  // A pickle instead of safetensors, and a corrupt file.
  {
    const fs::path dir = TempDir("pickle");
    WriteFile(dir / "adapter_config.json", Lora({"q_proj"}).ToJson().dump());
    WriteFile(dir / "adapter_model.bin", "not read");
    expect_error(dir, {"adapter_model.bin", "safe_serialization"});
    WriteFile(dir / "adapter_model.safetensors", "garbage");
    expect_error(dir, {"adapter_model.safetensors"});
  }
  // A session asking for an adapter the engine lacks.
  auto engine = engine::Engine::Create(m, {.kv_blocks = 64});
  ASSERT_TRUE(engine.ok());
  engine::SessionConfig sc;
  sc.options.profile = *policy::LoadProfile("qwen2.5");
  sc.adapter = "de-en";
  auto handle = (*engine)->Open(sc, [](const engine::SessionEvent&) { return true; });
  ASSERT_FALSE(handle.ok());
  EXPECT_EQ(handle.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(handle.status().message()).find("de-en"), std::string::npos);
  // Two adapters of one name.
  auto a = RandomAdapter(*m, Lora({"q_proj"}), 1, "same");
  auto b = RandomAdapter(*m, Lora({"v_proj"}), 2, "same");
  EXPECT_FALSE(engine::Engine::Create(m, {.kv_blocks = 64}, {a, b}).ok());
}

}  // namespace
}  // namespace gpeserve
