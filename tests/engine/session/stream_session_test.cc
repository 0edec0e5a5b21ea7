#include "engine/session/stream_session.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "engine/eval/latency.h"
#include "engine/session/runner.h"
#include "gtest/gtest.h"
#include "tests/engine/test_models.h"

namespace gpeserve::session {
namespace {

using testing::TinyChatModel;

struct NaiveResult {
  std::vector<int32_t> output;
  std::vector<int64_t> delays;
  int64_t forward_tokens = 0;  // what a naive re-encode computes: the whole target per write
};

// The same policy driven by a model that recomputes everything at every write: one full
// forward over all tokens with the paradigm's positions and mask (docs/GPE.md 3 and 5), no
// cache. `forward_tokens` counts, for re-encode, what re-encoding the target at each write
// after a read costs.
NaiveResult NaiveRun(const model::Model& m, const SessionOptions& options,
                     const std::vector<std::vector<int32_t>>& segments) {
  const tokenizer::Tokenizer& tok = *m.tokenizer();
  std::set<int32_t> eos = {257};
  policy::PolicyConfig config = options.policy;
  const Paradigm paradigm = options.paradigm;
  if (paradigm == Paradigm::kBatch) config.wait_k = 1 << 30;
  const std::vector<int32_t> header = *tok.Encode(options.profile.assistant);
  // The reference code feeds its header as one block without a mask (docs/GPE.md 8 rule 1).
  const int64_t block =
      options.policy.compat == policy::Compat::kReference ? static_cast<int64_t>(header.size()) : 0;
  policy::WaitKPolicy p(config, tok, header, eos, options.profile.end);
  for (size_t u = 1; u + 1 < segments.size(); ++u) p.AddSourceUnit();
  p.EndSource();
  std::vector<int64_t> source, target, seen;
  std::vector<int64_t> sequence;  // interleaved: everything in arrival order
  while (true) {
    const auto action = p.Next();
    if (action.step == policy::WaitKPolicy::Step::kDone) break;
    if (action.step == policy::WaitKPolicy::Step::kRead) {
      source.insert(source.end(), segments[action.unit].begin(), segments[action.unit].end());
      sequence.insert(sequence.end(), segments[action.unit].begin(), segments[action.unit].end());
      p.OnRead();
      continue;
    }
    std::vector<int64_t> tokens, positions;
    torch::Tensor allowed;
    if (paradigm == Paradigm::kInterleaved) {
      sequence.insert(sequence.end(), action.feed.begin(), action.feed.end());
      tokens = sequence;
      for (size_t i = 0; i < tokens.size(); ++i) positions.push_back(static_cast<int64_t>(i));
      allowed = model::DenseAttention::CausalMask(static_cast<int64_t>(tokens.size()));
    } else {
      for (int32_t t : action.feed) {
        target.push_back(t);
        seen.push_back(static_cast<int64_t>(source.size()));
      }
      const int64_t ns = source.size(), nt = target.size();
      tokens = source;
      tokens.insert(tokens.end(), target.begin(), target.end());
      for (int64_t i = 0; i < ns; ++i) positions.push_back(i);
      const int64_t base = paradigm == Paradigm::kGpe ? options.profile.phi : ns;
      for (int64_t j = 0; j < nt; ++j) positions.push_back(base + j);
      allowed = torch::zeros({ns + nt, ns + nt}, torch::kBool);
      allowed.slice(0, 0, ns).slice(1, 0, ns).copy_(model::DenseAttention::CausalMask(ns));
      for (int64_t j = 0; j < nt; ++j) {
        // Re-encode: the whole target is recomputed and sees all the source read so far.
        allowed[ns + j].slice(0, 0, paradigm == Paradigm::kReencode ? ns : seen[j]).fill_(true);
        allowed[ns + j].slice(0, ns, ns + std::max(j + 1, j < block ? block : 0)).fill_(true);
      }
    }
    model::DenseAttention attention({}, {}, allowed);
    const auto n = static_cast<int64_t>(tokens.size());
    auto logits = m.Forward(torch::tensor(tokens), torch::tensor(positions), torch::tensor({n - 1}),
                            attention);
    const auto outcome = p.OnToken(static_cast<int32_t>(logits->argmax(-1).item<int64_t>()));
    if (outcome.kv_rollback) {
      if (paradigm == Paradigm::kInterleaved) {
        sequence.pop_back();
      } else {
        target.pop_back();
        seen.pop_back();
      }
    }
  }
  return {p.output(), p.delays()};
}

// The method's sessions and, for the gpe paradigm, the reference code's (compat).
struct Variant {
  Paradigm paradigm;
  policy::Compat compat = policy::Compat::kNone;
};
const std::vector<Variant> kVariants = {{Paradigm::kGpe},
                                        {Paradigm::kGpe, policy::Compat::kReference},
                                        {Paradigm::kReencode},
                                        {Paradigm::kInterleaved},
                                        {Paradigm::kBatch}};

struct Fixture {
  explicit Fixture(std::shared_ptr<const model::Model> model, int block_size = 4,
                   int num_blocks = 256)
      : m(std::move(model)), allocator({.block_size = block_size, .num_blocks = num_blocks}) {
    auto p =
        kv::KvPool::Create({.block_size = block_size, .num_blocks = num_blocks},
                           {m->config().num_layers, m->config().num_kv_heads, m->config().head_dim},
                           m->dtype(), m->device());
    EXPECT_TRUE(p.ok());
    pool = std::make_unique<kv::KvPool>(*std::move(p));
  }
  std::shared_ptr<const model::Model> m;
  kv::BlockAllocator allocator;
  std::unique_ptr<kv::KvPool> pool;
};

// Drives a session like RunToCompletion, but preempts it at random points (`preempt_chance`
// per step) and cuts work into random piece sizes up to `max_piece`.
absl::StatusOr<SessionResult> RunWithPreemption(Fixture& f, StreamSession& session,
                                                std::mt19937& rng, double preempt_chance,
                                                int max_piece) {
  std::uniform_real_distribution<double> coin(0, 1);
  while (session.state() == StreamSession::State::kRunnable) {
    if (coin(rng) < preempt_chance) session.Preempt(f.allocator);
    auto work = session.Prepare(1 + static_cast<int64_t>(rng() % max_piece), f.allocator);
    if (!work.ok()) return work.status();
    auto logits = RunWorks(*f.m, *f.pool, {&*work, 1});
    if (!logits.ok()) return logits.status();
    std::optional<int32_t> token;
    if (work->sample) token = static_cast<int32_t>(logits->argmax(-1).item<int64_t>());
    session.Complete(token, f.allocator);
  }
  session.Release(f.allocator);
  return ResultOf(session);
}

std::vector<std::string> RandomWords(std::mt19937& rng, int max_words) {
  static const std::vector<std::string> vocabulary = {"the", "cat",     "sat", "on",  "a",
                                                      "mat", "quickly", "and", "dog", "ran."};
  std::vector<std::string> words;
  for (int i = 0, n = static_cast<int>(rng() % (max_words + 1)); i < n; ++i) {
    words.push_back(vocabulary[rng() % vocabulary.size()]);
  }
  return words;
}

// Invariant 1 at session level, for every paradigm: the paged, incremental session produces
// exactly what full recomputation with the paradigm's positions and mask produces (greedy),
// for random models, sources, wait-k, split modes and phi; whether or not the work is cut
// into pieces and the session preempted; and every block is returned (invariant 4).
// A step libtorch cannot run (here: K/V slots beyond the pool) is an INTERNAL status for the
// caller to end the step's sessions with, not an exception; the pool still serves the next step
// with the same logits as before.
TEST(StreamSessionTest, AFailedForwardStepIsAnInternalStatus) {
  Fixture f(TinyChatModel(1), /*block_size=*/4, /*num_blocks=*/8);
  const Work good{.tokens = {5, 6, 7},
                  .positions = {0, 1, 2},
                  .context = {},
                  .slots = {0, 1, 2},
                  .sample = true};
  auto before = RunWorks(*f.m, *f.pool, {&good, 1});
  ASSERT_TRUE(before.ok()) << before.status();
  Work bad = good;
  bad.slots = {0, 1, 4 * 8 + 100};
  auto failed = RunWorks(*f.m, *f.pool, {&bad, 1});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal) << failed.status();
  auto after = RunWorks(*f.m, *f.pool, {&good, 1});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(torch::equal(*before, *after));
}

TEST(StreamSessionTest, PagedSessionEqualsFullRecomputeInEveryParadigm) {
  auto profile = policy::LoadProfile("qwen2.5");
  ASSERT_TRUE(profile.ok());
  std::mt19937 rng(3);
  // Three Qwen2 models, then one of each other family.
  std::vector<std::pair<uint64_t, model::MakeModelOptions>> models = {{1, {}}, {2, {}}, {3, {}}};
  for (const model::MakeModelOptions& family : testing::TestFamilies()) {
    if (family.arch != "qwen2") models.push_back({4, family});
  }
  for (const auto& [seed, family] : models) {
    Fixture f(TinyChatModel(seed, family));
    for (const Variant& variant : kVariants) {
      const Paradigm paradigm = variant.paradigm;
      for (int trial = 0; trial < 3; ++trial) {
        SessionOptions options;
        options.profile = *profile;
        options.profile.phi = trial == 1 ? 5 : 0;
        options.policy.wait_k = 1 + static_cast<int>(rng() % 3);
        options.policy.max_new_tokens = 12;
        options.policy.split = trial == 2 ? policy::SplitMode::kToken : policy::SplitMode::kWord;
        options.paradigm = paradigm;
        options.policy.compat = variant.compat;
        const std::vector<std::string> words = RandomWords(rng, 6);
        auto session = CreateOfflineSession(*f.m, options, words);
        ASSERT_TRUE(session.ok()) << session.status();
        const auto segments = (*session)->segments();
        // Trial 0 runs whole pieces without preemption; the others cut and preempt.
        auto result = trial == 0 ? RunToCompletion(*f.m, **session, *f.pool, f.allocator)
                                 : RunWithPreemption(f, **session, rng, 0.15, 7);
        ASSERT_TRUE(result.ok()) << result.status();
        const NaiveResult naive = NaiveRun(*f.m, options, segments);
        const std::string where =
            (family.arch.empty() ? "qwen2" : family.arch) + " seed " + std::to_string(seed) +
            " paradigm " + std::string(ParadigmName(paradigm)) + " compat " +
            policy::CompatName(variant.compat) + " trial " + std::to_string(trial);
        EXPECT_EQ(result->output, naive.output) << where;
        EXPECT_EQ((*session)->delays(), naive.delays) << where;
        EXPECT_FALSE(result->output.empty()) << where;
        EXPECT_EQ(result->source_units, static_cast<int64_t>(segments.size()) - 1);
        EXPECT_EQ(f.allocator.free_blocks(), f.allocator.total_blocks()) << where;
      }
    }
  }
}

// What each paradigm computes: GPE and batch compute every source token once and each target
// token once per feed; re-encode computes strictly more on a multi-word source; a preempted
// session computes more but outputs the same.
TEST(StreamSessionTest, ForwardTokenCountsShowTheParadigmsCost) {
  auto profile = policy::LoadProfile("qwen2.5");
  ASSERT_TRUE(profile.ok());
  Fixture f(TinyChatModel(7));
  const std::vector<std::string> words = {"the", "cat", "sat", "on", "a", "mat", "and", "ran"};
  SessionOptions options;
  options.profile = *profile;
  options.policy.wait_k = 1;
  options.policy.max_new_tokens = 20;
  options.share_prefix = false;
  std::map<Paradigm, SessionResult> results;
  int64_t source_tokens = 0;  // of the segments the GPE session read
  for (Paradigm paradigm : {Paradigm::kGpe, Paradigm::kReencode}) {
    options.paradigm = paradigm;
    auto session = CreateOfflineSession(*f.m, options, words);
    ASSERT_TRUE(session.ok());
    auto result = RunToCompletion(*f.m, **session, *f.pool, f.allocator);
    ASSERT_TRUE(result.ok()) << result.status();
    results[paradigm] = *result;
    if (paradigm == Paradigm::kGpe) {
      for (int64_t u = 0; u <= (*session)->units_read(); ++u) {
        source_tokens += static_cast<int64_t>((*session)->segments()[u].size());
      }
    }
  }
  const SessionResult& gpe = results[Paradigm::kGpe];
  // GPE: the source once, the header once, each generated token once (the last one may never
  // be fed), plus one recompute per roll-back (at most one per target word).
  EXPECT_EQ(gpe.counters.source_tokens, source_tokens);
  const auto header =
      static_cast<int64_t>(f.m->tokenizer()->Encode(options.profile.assistant)->size());
  const auto out = static_cast<int64_t>(gpe.output.size());
  EXPECT_GE(gpe.counters.forward_tokens, source_tokens + header + out - 1);
  EXPECT_LE(gpe.counters.forward_tokens,
            source_tokens + header + out + static_cast<int64_t>(gpe.delays.size()));
  if (results[Paradigm::kReencode].delays.size() >= 2) {
    EXPECT_GT(results[Paradigm::kReencode].counters.forward_tokens, gpe.counters.forward_tokens);
  }
}

// Prefix sharing: a second session with the same prompt prefix takes the first one's full
// prefix blocks instead of computing them, and its output equals an unshared run.
TEST(StreamSessionTest, PromptPrefixBlocksAreSharedAndOutputsUnchanged) {
  auto profile = policy::LoadProfile("qwen2.5");
  ASSERT_TRUE(profile.ok());
  Fixture f(TinyChatModel(5));
  const int bs = f.allocator.block_size();
  SessionOptions options;
  options.profile = *profile;
  options.policy.wait_k = 2;
  options.policy.max_new_tokens = 10;
  const std::vector<std::string> words = {"the", "dog", "ran", "on", "a", "mat"};

  for (Paradigm paradigm : {Paradigm::kGpe, Paradigm::kInterleaved}) {
    options.paradigm = paradigm;
    options.share_prefix = false;
    auto unshared = CreateOfflineSession(*f.m, options, words);
    ASSERT_TRUE(unshared.ok());
    auto expected = RunToCompletion(*f.m, **unshared, *f.pool, f.allocator);
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(expected->counters.shared_tokens, 0);

    // The first session reads its prefix and stays alive, holding the blocks.
    options.share_prefix = true;
    auto first = CreateOfflineSession(*f.m, options, {"a", "cat"});
    ASSERT_TRUE(first.ok());
    const int64_t prefix = static_cast<int64_t>((*first)->segments()[0].size());
    ASSERT_GE(prefix, 2 * bs);
    auto work = (*first)->Prepare(1 << 20, f.allocator);
    ASSERT_TRUE(work.ok());
    ASSERT_TRUE(RunWorks(*f.m, *f.pool, {&*work, 1}).ok());
    EXPECT_TRUE((*first)->Complete(std::nullopt, f.allocator).unit_read);
    const kv::KvStats before = f.allocator.stats();

    auto second = CreateOfflineSession(*f.m, options, words);
    ASSERT_TRUE(second.ok());
    auto shared = RunToCompletion(*f.m, **second, *f.pool, f.allocator);
    ASSERT_TRUE(shared.ok()) << shared.status();
    EXPECT_EQ(shared->output, expected->output);
    EXPECT_EQ(shared->delays, expected->delays);
    EXPECT_EQ(shared->counters.shared_tokens, prefix / bs * bs);
    EXPECT_EQ(shared->counters.forward_tokens,
              expected->counters.forward_tokens - prefix / bs * bs);
    const kv::KvStats after = f.allocator.stats();
    EXPECT_EQ(after.prefix_hits - before.prefix_hits, prefix / bs);

    // While both hold them, the prefix blocks are shared; when all end, the pool is full.
    (*first)->Release(f.allocator);
    EXPECT_EQ(f.allocator.free_blocks(), f.allocator.total_blocks());
  }
}

TEST(StreamSessionTest, LiveSourceWaitsAndMatchesOffline) {
  auto profile = policy::LoadProfile("qwen2.5");
  ASSERT_TRUE(profile.ok());
  Fixture f(TinyChatModel(2));
  SessionOptions options;
  options.profile = *profile;
  options.policy.wait_k = 2;
  options.policy.max_new_tokens = 16;
  const std::vector<std::string> words = {"the", "cat", "sat", "on", "the", "mat"};
  auto offline = CreateOfflineSession(*f.m, options, words);
  ASSERT_TRUE(offline.ok());
  auto expected = RunToCompletion(*f.m, **offline, *f.pool, f.allocator);
  ASSERT_TRUE(expected.ok());

  auto live = StreamSession::Create(f.m->tokenizer(), f.m->config().eos_token_ids, options);
  ASSERT_TRUE(live.ok());
  StreamSession& s = **live;
  size_t next_word = 0;
  std::mt19937 rng(11);
  while (s.state() != StreamSession::State::kDone) {
    if (s.state() == StreamSession::State::kWaiting || rng() % 3 == 0) {
      if (next_word < words.size()) {
        ASSERT_TRUE(s.AddWords({&words[next_word++], 1}).ok());
      } else {
        s.EndSource();
      }
      continue;
    }
    auto work = s.Prepare(1 << 20, f.allocator);
    ASSERT_TRUE(work.ok()) << work.status();
    auto logits = RunWorks(*f.m, *f.pool, {&*work, 1});
    ASSERT_TRUE(logits.ok());
    std::optional<int32_t> token;
    if (work->sample) token = static_cast<int32_t>(logits->argmax(-1).item<int64_t>());
    s.Complete(token, f.allocator);
  }
  s.Release(f.allocator);
  EXPECT_EQ(s.output(), expected->output);
  EXPECT_EQ(s.delays(), expected->delays);
  EXPECT_EQ(f.allocator.free_blocks(), f.allocator.total_blocks());
  EXPECT_EQ(s.AddWords(words).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(StreamSessionTest, SourceErrors) {
  auto profile = policy::LoadProfile("qwen2.5");
  ASSERT_TRUE(profile.ok());
  auto m = TinyChatModel(1);
  SessionOptions options;
  options.profile = *profile;
  auto s = StreamSession::Create(m->tokenizer(), {}, options);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->AddWords(std::vector<std::string>{"a", ""}).code(),
            absl::StatusCode::kInvalidArgument);
  (*s)->EndSource();
  EXPECT_EQ((*s)->AddWords(std::vector<std::string>{"b"}).code(),
            absl::StatusCode::kFailedPrecondition);
  options.policy.wait_k = 0;
  EXPECT_EQ(StreamSession::Create(m->tokenizer(), {}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.policy.wait_k = 1;
  options.profile.assistant = "";
  EXPECT_EQ(StreamSession::Create(m->tokenizer(), {}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseParadigm("reencode").value(), Paradigm::kReencode);
  EXPECT_EQ(ParseParadigm("nope").status().code(), absl::StatusCode::kInvalidArgument);
}

// Runs `session` with a scripted model: each sampled token is the next of `script` (then
// `eos`). Returns the `noncausal` of every piece, in order. Pieces are whole.
std::vector<int64_t> RunScripted(StreamSession& session, kv::BlockAllocator& allocator,
                                 const std::vector<int32_t>& script, int32_t eos) {
  std::vector<int64_t> noncausal;
  size_t next = 0;
  while (session.state() == StreamSession::State::kRunnable) {
    auto work = session.Prepare(1 << 20, allocator);
    EXPECT_TRUE(work.ok()) << work.status();
    if (!work.ok()) break;
    noncausal.push_back(work->noncausal);
    std::optional<int32_t> token;
    if (work->sample) token = next < script.size() ? script[next++] : eos;
    session.Complete(token, allocator);
  }
  session.Release(allocator);
  return noncausal;
}

// Compat reference, worked by hand at session level (qwen2.5 profile, byte-level tokens, k = 1,
// one word, max_write_tokens = 2): the header is one non-causal block; the cap counts since
// the last read (delays 1, then 2 and 2 past the cap once the source is complete, the end of
// turn included); the text is "assistant\n" + the output; the delays are cut to its 2 words,
// so AL = LAAL = (1 + (2 - 1)) / 2 = 1. The method records no delay at all here (its cap ends
// writes without one, and the end of turn follows a write that ended on the cap).
TEST(StreamSessionTest, ReferenceCompatSessionWorkedByHand) {
  auto profile = policy::LoadProfile("qwen2.5");
  ASSERT_TRUE(profile.ok());
  auto m = TinyChatModel(1);
  kv::BlockAllocator allocator({.block_size = 4, .num_blocks = 64});
  const std::vector<int32_t> script = {'a', 'b', 'c', 'd'};
  const int32_t eos = 257;  // <|im_end|>
  const auto header = static_cast<int64_t>(m->tokenizer()->Encode(profile->assistant)->size());
  for (const policy::Compat compat : {policy::Compat::kNone, policy::Compat::kReference}) {
    SessionOptions options;
    options.profile = *profile;
    options.policy = {.wait_k = 1, .max_write_tokens = 2, .compat = compat};
    options.share_prefix = false;
    auto session = CreateOfflineSession(*m, options, {"He"});
    ASSERT_TRUE(session.ok());
    const std::vector<int64_t> noncausal = RunScripted(**session, allocator, script, eos);
    // Reads: prefix, "He", end; writes: header, then one token each.
    ASSERT_GE(noncausal.size(), 3u);
    EXPECT_EQ(noncausal[2], compat == policy::Compat::kReference ? header : 0);
    for (size_t i = 3; i < noncausal.size(); ++i) EXPECT_EQ(noncausal[i], 0);
    EXPECT_EQ((*session)->output(), script);
    EXPECT_EQ(allocator.free_blocks(), allocator.total_blocks());
    if (compat == policy::Compat::kNone) {
      EXPECT_EQ((*session)->FinalText(), "abcd");
      EXPECT_TRUE((*session)->FinalDelays().empty());
      continue;
    }
    EXPECT_EQ((*session)->delays(), (std::vector<int64_t>{1, 2, 2}));
    EXPECT_EQ((*session)->FinalText(), "assistant\nabcd");
    const std::vector<int64_t> delays = (*session)->FinalDelays();
    EXPECT_EQ(delays, (std::vector<int64_t>{1, 2}));
    const std::vector<double> d(delays.begin(), delays.end());
    EXPECT_DOUBLE_EQ(eval::AverageLagging(d, 2, 2), 1.0);
    EXPECT_DOUBLE_EQ(eval::LengthAdaptiveAverageLagging(d, 2, 2), 1.0);
  }
  // Compat reference is for the gpe paradigm only.
  SessionOptions options;
  options.profile = *profile;
  options.policy.compat = policy::Compat::kReference;
  options.paradigm = Paradigm::kReencode;
  EXPECT_EQ(StreamSession::Create(m->tokenizer(), {}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpeserve::session
