// Long-form sessions (issue 20; docs/GPE.md 9) through the engine: each segment of one stream
// gives exactly what a separate session with its words gives (tokens, delays, stop reason),
// whatever the cuts (sentence marks, client boundaries, max_segment_words, the end), the
// chunking of the words, and the other sessions sharing the steps; the KV a session holds does
// not grow with the stream; bad input ends the session precisely and others go on.
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/session/runner.h"
#include "gtest/gtest.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/test_models.h"

namespace gpeserve::engine {
namespace {

SessionConfig Config(int wait_k, bool long_form, int max_new_tokens = 12) {
  SessionConfig c;
  c.options.profile = *policy::LoadProfile("qwen2.5");
  c.options.policy.wait_k = wait_k;
  c.options.policy.max_new_tokens = max_new_tokens;
  c.long_form.enabled = long_form;
  c.long_form.segmenter.max_segment_words = 9;
  return c;
}

// A stream of `n` sentences and how it must be cut: sentences ending in a mark, sentences the
// client ends with a boundary, and long ones that max_segment_words (9) cuts.
struct Stream {
  std::vector<std::string> words;
  std::vector<bool> boundary_after;                // per word: the client sends a boundary
  std::vector<std::vector<std::string>> segments;  // what each segment must hold
  std::vector<policy::CutReason> cuts;
};

Stream MakeStream(int n, uint64_t seed) {
  static const std::vector<std::string> vocabulary = {"the", "cat", "sat", "on",      "a",
                                                      "mat", "and", "dog", "quickly", "ran"};
  std::mt19937 rng(seed);
  Stream s;
  for (int i = 0; i < n; ++i) {
    const int kind = static_cast<int>(rng() % 4);  // 0, 1: mark; 2: boundary; 3: long
    const int length =
        kind == 3 ? 10 + static_cast<int>(rng() % 8) : 1 + static_cast<int>(rng() % 7);
    std::vector<std::string> sentence;
    for (int w = 0; w < length; ++w) sentence.push_back(vocabulary[rng() % vocabulary.size()]);
    if (kind <= 1) sentence.back() += i % 2 ? "." : "?\"";
    for (size_t w = 0; w < sentence.size(); ++w) {
      s.words.push_back(sentence[w]);
      s.boundary_after.push_back(kind == 2 && w + 1 == sentence.size());
    }
    for (size_t start = 0; start < sentence.size(); start += 9) {
      const size_t end = std::min(sentence.size(), start + 9);
      s.segments.emplace_back(sentence.begin() + start, sentence.begin() + end);
      if (end - start == 9 && (end < sentence.size() || kind == 3)) {
        s.cuts.push_back(policy::CutReason::kMaxWords);
      } else {
        s.cuts.push_back(kind <= 1 ? policy::CutReason::kSentenceMark
                                   : policy::CutReason::kBoundary);
      }
    }
    if (kind == 3 && sentence.size() % 9 != 0) {
      // The long sentence's rest is not cut by a mark: the next sentence's words join it, so
      // give it a boundary of its own.
      s.boundary_after.back() = true;
      s.cuts.back() = policy::CutReason::kBoundary;
    }
  }
  return s;
}

// `s` `copies` times over, one after another.
Stream Repeat(const Stream& s, int copies) {
  Stream out;
  for (int copy = 0; copy < copies; ++copy) {
    out.words.insert(out.words.end(), s.words.begin(), s.words.end());
    out.boundary_after.insert(out.boundary_after.end(), s.boundary_after.begin(),
                              s.boundary_after.end());
  }
  return out;
}

// Pushes the stream in random chunks, boundaries where due, then ends it.
void Feed(SessionHandle& handle, const Stream& s, uint64_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> chunk;
  for (size_t i = 0; i < s.words.size(); ++i) {
    chunk.push_back(s.words[i]);
    if (s.boundary_after[i] || rng() % 3 == 0) {
      handle.Push(std::move(chunk));
      chunk.clear();
      if (s.boundary_after[i]) handle.Boundary();
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    }
  }
  handle.Push(std::move(chunk));
  handle.EndSource();
}

// The most blocks (of 4 tokens) any one of `segments` needs on its own: its source group (the
// prompt, any context, its words and end as read) and its target group (the header, the output,
// and the token fed back before a roll-back).
int64_t LargestSegmentBlocks(const model::Model& m, const SessionConfig& config,
                             const std::vector<SessionEvent>& segments) {
  const int64_t header =
      static_cast<int64_t>(m.tokenizer()->Encode(config.options.profile.assistant, {})->size());
  int64_t largest = 0;
  for (const SessionEvent& e : segments) {
    const session::SegmentRecord& r = e.segment_record;
    const int64_t target = header + static_cast<int64_t>(r.output.size()) + 1;
    largest = std::max(largest, (r.counters.source_tokens + 3) / 4 + (target + 3) / 4);
  }
  return largest;
}

std::shared_ptr<Engine> MakeEngine(std::shared_ptr<const model::Model> m, int64_t kv_blocks) {
  EngineConfig config;
  config.block_size = 4;
  config.kv_blocks = kv_blocks;
  config.scheduler.max_batch_tokens = 64;
  config.scheduler.max_sessions_per_step = 6;
  auto engine = Engine::Create(std::move(m), config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return *engine;
}

// The acceptance property: per segment, exactly a separate session's tokens and delays; three
// long-form sessions and sentence sessions share the steps.
TEST(LongFormTest, SegmentsEqualSeparateSessions) {
  for (const model::MakeModelOptions& family : testing::TestFamilies()) {
    if (family.arch != "qwen2" && family.arch != "gemma2") continue;  // two families suffice
    auto m = testing::TinyChatModel(11, family);
    ASSERT_NE(m, nullptr);
    auto engine = MakeEngine(m, 1024);
    const int streams = 3;
    std::vector<Stream> sources;
    std::vector<SessionConfig> configs;
    std::vector<Collector> collectors(streams + 2);
    std::vector<std::thread> feeders;
    for (int i = 0; i < streams; ++i) {
      sources.push_back(MakeStream(12, 40 + i));
      configs.push_back(Config(1 + i, /*long_form=*/true));
    }
    for (int i = 0; i < streams; ++i) {
      auto handle = engine->Open(configs[i], collectors[i].Callback());
      ASSERT_TRUE(handle.ok()) << handle.status();
      feeders.emplace_back([h = *handle, &sources, i] { Feed(*h, sources[i], 7 + i); });
    }
    // Sentence sessions alongside.
    for (int j = 0; j < 2; ++j) {
      auto handle = engine->Open(Config(2, false), collectors[streams + j].Callback());
      ASSERT_TRUE(handle.ok());
      (*handle)->Push({"a", "dog", "sat", "on", "the", "mat"});
      (*handle)->EndSource();
    }
    for (auto& t : feeders) t.join();
    for (int i = 0; i < streams; ++i) {
      const SessionEvent done = collectors[i].Wait();
      ASSERT_EQ(done.kind, SessionEvent::Kind::kDone) << done.status;
      EXPECT_EQ(done.reason, FinishReason::kEndOfSource);
      const std::vector<SessionEvent> segments = collectors[i].Of(SessionEvent::Kind::kSegment);
      ASSERT_EQ(segments.size(), sources[i].segments.size()) << family.arch << " stream " << i;
      EXPECT_EQ(done.segments, static_cast<int64_t>(segments.size()));
      int64_t first_word = 0, units = 0, unread = 0;
      for (size_t k = 0; k < segments.size(); ++k) {
        const session::SegmentRecord& r = segments[k].segment_record;
        const session::SessionResult alone =
            RunAlone(*m, configs[i].options, sources[i].segments[k]);
        SCOPED_TRACE(testing::TestDevice() + " " + family.arch + " stream " + std::to_string(i) +
                     " segment " + std::to_string(k));
        EXPECT_EQ(r.index, static_cast<int64_t>(k));
        EXPECT_EQ(r.output, alone.output);
        EXPECT_EQ(r.delays, alone.delays);
        EXPECT_EQ(r.text, alone.text);
        EXPECT_EQ(r.reason, alone.reason);
        EXPECT_EQ(r.source_units, alone.source_units);
        EXPECT_EQ(r.cut, sources[i].cuts[k]);
        EXPECT_EQ(r.first_word, first_word);
        EXPECT_EQ(r.words, static_cast<int64_t>(sources[i].segments[k].size()));
        EXPECT_EQ(segments[k].lags_ms.size(), r.delays.size());
        first_word += r.words;
        units += r.source_units;
        unread += r.units_unread;
      }
      EXPECT_EQ(done.source_units, units);
      EXPECT_EQ(done.source_units_unread, unread);
      // Between segments the session keeps only the prompt prefix, and that is the cache's
      // copy, which every segment shares (three streams opened at once each computed one):
      // it never held more than its largest segment's own blocks.
      EXPECT_LE(done.counters.kv_blocks_high_water, LargestSegmentBlocks(*m, configs[i], segments));
      // The deltas carry their segment, in order, and add up to each segment's output.
      std::vector<std::vector<int32_t>> streamed(segments.size());
      int64_t last = 0;
      for (const SessionEvent& e : collectors[i].Of(SessionEvent::Kind::kTokens)) {
        ASSERT_GE(e.segment, last);
        ASSERT_LT(e.segment, static_cast<int64_t>(segments.size()));
        last = e.segment;
        streamed[e.segment].insert(streamed[e.segment].end(), e.ids.begin(), e.ids.end());
      }
      for (size_t k = 0; k < segments.size(); ++k) {
        EXPECT_EQ(streamed[k], segments[k].segment_record.output);
      }
    }
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ(collectors[streams + j].Wait().kind, SessionEvent::Kind::kDone);
    }
    const EngineStats stats = engine->stats();
    EXPECT_EQ(stats.kv.free_blocks, stats.kv.total_blocks);
    EXPECT_GT(stats.fused_pieces, 0) << "segments' reads and writes fused";
  }
}

// The KV a long-form session holds does not grow with the stream: its high-water mark over a
// stream and over ten copies of it is the same, and every block is free at the end.
TEST(LongFormTest, KvHighWaterDoesNotGrowWithTheStream) {
  auto m = testing::TinyChatModel(12);
  auto engine = MakeEngine(m, 1024);
  const Stream once = MakeStream(10, 3);
  const Stream ten = Repeat(once, 10);
  auto run = [&](const Stream& s) {
    Collector c;
    auto handle = engine->Open(Config(2, true), c.Callback());
    EXPECT_TRUE(handle.ok());
    Feed(**handle, s, 5);
    const SessionEvent done = c.Wait();
    EXPECT_EQ(done.kind, SessionEvent::Kind::kDone) << done.status;
    return done;
  };
  const SessionEvent a = run(once);
  const SessionEvent b = run(ten);
  EXPECT_EQ(b.segments, 10 * a.segments);
  EXPECT_GT(a.counters.kv_blocks_high_water, 0);
  EXPECT_EQ(a.counters.kv_blocks_high_water, b.counters.kv_blocks_high_water);
  // Shared prompt-prefix tokens: every segment after the first found the prefix kept.
  EXPECT_GT(b.counters.shared_tokens, 0);
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.kv.free_blocks, stats.kv.total_blocks);
}

// With context_segments = c, segment k reads the last c segments (their words and outputs,
// ContextTokens) after the prompt prefix: it equals a separate session given that context; the
// KV it holds is bounded by the prompt and c + 1 segments (the same over a stream and ten
// copies of it); a context that would take a segment over its limits drops its oldest pairs.
TEST(LongFormTest, ContextSegmentsEqualSessionsWithThatContext) {
  auto m = testing::TinyChatModel(15);
  auto engine = MakeEngine(m, 1024);
  const Stream once = MakeStream(8, 21);
  for (int c : {1, 2}) {
    SessionConfig config = Config(2, true);
    config.long_form.context_segments = c;
    Collector collector;
    auto handle = engine->Open(config, collector.Callback());
    ASSERT_TRUE(handle.ok()) << handle.status();
    Feed(**handle, once, 3);
    const SessionEvent done = collector.Wait();
    ASSERT_EQ(done.kind, SessionEvent::Kind::kDone) << done.status;
    const std::vector<SessionEvent> segments = collector.Of(SessionEvent::Kind::kSegment);
    ASSERT_EQ(segments.size(), once.segments.size());
    for (size_t k = 0; k < segments.size(); ++k) {
      std::vector<session::ContextPair> pairs;
      for (size_t j = k >= static_cast<size_t>(c) ? k - c : 0; j < k; ++j) {
        pairs.push_back({.words = once.segments[j], .output = segments[j].segment_record.output});
      }
      auto context = session::ContextTokens(*m->tokenizer(), config.options.profile, pairs);
      ASSERT_TRUE(context.ok());
      const session::SessionResult result =
          RunAlone(*m, config.options, once.segments[k], *context);
      SCOPED_TRACE("context " + std::to_string(c) + " segment " + std::to_string(k));
      EXPECT_EQ(segments[k].segment_record.output, result.output);
      EXPECT_EQ(segments[k].segment_record.delays, result.delays);
      // The context is recomputed: the segment's forward tokens include it.
      EXPECT_EQ(segments[k].segment_record.counters.source_tokens, result.counters.source_tokens);
      if (k > 0) {
        EXPECT_GT(segments[k].segment_record.counters.source_tokens,
                  static_cast<int64_t>(context->size()));
      }
    }
  }
  // Bounded: one stream and ten copies of it hold the same KV at most (context 1).
  const Stream ten = Repeat(once, 10);
  {
    SessionConfig config = Config(2, true);
    config.long_form.context_segments = 1;
    Collector collector;
    auto handle = engine->Open(config, collector.Callback());
    ASSERT_TRUE(handle.ok());
    Feed(**handle, ten, 4);
    const SessionEvent done = collector.Wait();
    ASSERT_EQ(done.kind, SessionEvent::Kind::kDone) << done.status;
    // Outputs chain through the context, so copies may differ a little; what must hold is that
    // the session never held more than its largest segment's own KV: the prompt and the
    // context (one earlier pair) in its source group, its header and output in its target
    // group (plus the token fed back before a roll-back).
    EXPECT_GT(done.counters.kv_blocks_high_water, 0);
    EXPECT_LE(done.counters.kv_blocks_high_water,
              LargestSegmentBlocks(*m, config, collector.Of(SessionEvent::Kind::kSegment)));
  }
  // A tight limit: the context is dropped rather than the segment refused.
  SessionConfig tight = Config(2, true);
  tight.long_form.context_segments = 8;
  tight.options.max_source_tokens = 400;
  Collector collector;
  auto handle = engine->Open(tight, collector.Callback());
  ASSERT_TRUE(handle.ok());
  Feed(**handle, once, 5);
  const SessionEvent done = collector.Wait();
  ASSERT_EQ(done.kind, SessionEvent::Kind::kDone) << done.status;
  for (const SessionEvent& e : collector.Of(SessionEvent::Kind::kSegment)) {
    EXPECT_LE(e.segment_record.counters.source_tokens, 400);
  }
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.kv.free_blocks, stats.kv.total_blocks);
}

// Between segments a session keeps the prompt prefix as the prefix cache holds it. Two sessions
// that computed the prefix at the same time each hold their own copy during their first
// segment; afterwards the second keeps the cache's (the first's) copy, which its next segment
// shares, not its own: it never holds two copies. Driven without a model (bookkeeping only).
TEST(LongFormTest, BetweenSegmentsASessionKeepsTheCachesPrefixCopy) {
  auto m = testing::TinyChatModel(16);
  kv::BlockAllocator allocator({.block_size = 4, .num_blocks = 256});
  const SessionConfig config = Config(1, true);
  auto make = [&] {
    auto s = session::SegmentedSession::Create(m->tokenizer(), m->config().eos_token_ids,
                                               config.options, config.long_form);
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  };
  auto a = make(), b = make();
  const std::vector<std::string> first = {"hi."}, second = {"yes."};
  ASSERT_TRUE(a->AddWords(first, 0).ok());
  ASSERT_TRUE(b->AddWords(first, 0).ok());
  // Both prepare their prompt prefix in one piece before either completes: both compute it, and
  // a's copy goes into the cache.
  ASSERT_TRUE(a->Prepare(1000, allocator).ok());
  ASSERT_TRUE(b->Prepare(1000, allocator).ok());
  a->Complete(std::nullopt, allocator);
  b->Complete(std::nullopt, allocator);
  const int32_t eos = 257;  // <|im_end|>: every write ends the target at once
  auto run = [&](session::SegmentedSession& s) {
    while (s.state() == session::SegmentedSession::State::kRunnable &&
           s.Advance(allocator).empty()) {
      auto work = s.Prepare(1000, allocator);
      ASSERT_TRUE(work.ok()) << work.status();
      s.Complete(work->sample ? std::optional<int32_t>(eos) : std::nullopt, allocator);
    }
  };
  run(*a);
  run(*b);
  const int64_t prefix_tokens =
      static_cast<int64_t>(m->tokenizer()->Encode(config.options.profile.Prefix(), {})->size());
  ASSERT_GE(prefix_tokens, 8);  // at least two full blocks to keep
  EXPECT_EQ(b->segments_finished(), 1);
  EXPECT_EQ(b->blocks_held(), prefix_tokens / 4);  // the full prefix blocks only
  // The next segment reads its prefix: from the cache, which b already holds.
  ASSERT_TRUE(b->AddWords(second, 1).ok());
  ASSERT_TRUE(b->Prepare(1000, allocator).ok());
  b->Complete(std::nullopt, allocator);
  EXPECT_EQ(b->blocks_held(), (prefix_tokens + 3) / 4);
  a->Release(allocator);
  b->Release(allocator);
  EXPECT_EQ(allocator.free_blocks(), allocator.total_blocks());
}

// A segment whose target ends before its source was all read says how many units it never
// read, and the next segment runs as usual.
TEST(LongFormTest, UnreadUnitsOfASegmentAreCounted) {
  auto m = testing::TinyChatModel(13);
  auto engine = MakeEngine(m, 1024);
  SessionConfig config = Config(1, true, /*max_new_tokens=*/2);
  Collector c;
  auto handle = engine->Open(config, c.Callback());
  ASSERT_TRUE(handle.ok());
  const std::vector<std::string> first = {"the", "cat", "sat", "on", "a", "mat", "and", "ran."};
  const std::vector<std::string> second = {"a", "dog", "sat."};
  // Word by word with pauses, so that the first segment's target ends while its words arrive.
  for (const std::string& w : first) {
    (*handle)->Push({w});
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  (*handle)->Push(second);
  (*handle)->EndSource();
  const SessionEvent done = c.Wait();
  ASSERT_EQ(done.kind, SessionEvent::Kind::kDone) << done.status;
  const std::vector<SessionEvent> segments = c.Of(SessionEvent::Kind::kSegment);
  ASSERT_EQ(segments.size(), 2u);
  const session::SegmentRecord& r = segments[0].segment_record;
  const session::SessionResult alone = RunAlone(*m, config.options, first);
  EXPECT_EQ(r.reason, alone.reason);
  EXPECT_NE(r.reason, policy::DoneReason::kNone);
  EXPECT_EQ(r.source_units, 9);
  EXPECT_GT(r.units_unread, 0);  // two tokens at wait-1 read at most a few of its 9 units
  EXPECT_EQ(r.output, alone.output);
  EXPECT_EQ(segments[1].segment_record.output, RunAlone(*m, config.options, second).output);
  EXPECT_EQ(done.source_units_unread, r.units_unread + segments[1].segment_record.units_unread);
}

// Bad input: a boundary with no words since the last boundary, a segment over the per-segment
// limit, long-form with the batch paradigm, context_segments; other sessions go on.
TEST(LongFormTest, BadInputEndsTheSessionPreciselyAndOthersGoOn) {
  auto m = testing::TinyChatModel(14);
  auto engine = MakeEngine(m, 1024);
  Collector good;
  auto good_handle = engine->Open(Config(2, true), good.Callback());
  ASSERT_TRUE(good_handle.ok());
  (*good_handle)->Push({"the", "cat", "sat."});

  {  // a boundary right after a mark's cut does nothing; right after a boundary it is an error
    Collector c;
    auto h = engine->Open(Config(2, true), c.Callback());
    ASSERT_TRUE(h.ok());
    (*h)->Push({"a", "dog."});
    (*h)->Boundary();
    (*h)->Push({"a", "cat"});
    (*h)->Boundary();
    (*h)->Boundary();
    const SessionEvent e = c.Wait();
    ASSERT_EQ(e.kind, SessionEvent::Kind::kError);
    EXPECT_EQ(e.status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(e.status.message().find("since the last boundary"), std::string::npos) << e.status;
    EXPECT_NE(e.status.message().find("source units received were not read"), std::string::npos)
        << e.status;
  }
  {  // a boundary in a sentence session
    Collector c;
    auto h = engine->Open(Config(2, false), c.Callback());
    ASSERT_TRUE(h.ok());
    (*h)->Push({"a"});
    (*h)->Boundary();
    const SessionEvent e = c.Wait();
    ASSERT_EQ(e.kind, SessionEvent::Kind::kError);
    EXPECT_EQ(e.status.code(), absl::StatusCode::kInvalidArgument);
  }
  {  // a segment over the per-segment token limit
    SessionConfig config = Config(2, true);
    config.long_form.segmenter.max_segment_words = 1000;
    config.options.max_source_tokens = 200;  // the prompt (byte tokens) and a few words
    Collector c;
    auto h = engine->Open(config, c.Callback());
    ASSERT_TRUE(h.ok());
    (*h)->Push({"short."});
    std::vector<std::string> many(60, "word");
    (*h)->Push(many);
    const SessionEvent e = c.Wait();
    ASSERT_EQ(e.kind, SessionEvent::Kind::kError);
    EXPECT_EQ(e.status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(e.status.message().find("segment 1"), std::string::npos) << e.status;
    EXPECT_NE(e.status.message().find("per segment"), std::string::npos) << e.status;
  }
  {  // the batch paradigm
    SessionConfig config = Config(2, true);
    config.options.paradigm = session::Paradigm::kBatch;
    Collector c;
    const auto h = engine->Open(config, c.Callback());
    ASSERT_FALSE(h.ok());
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(h.status().message().find("batch"), std::string::npos);
  }
  {  // too many context segments
    SessionConfig config = Config(2, true);
    config.long_form.context_segments = 9;
    Collector c;
    const auto h = engine->Open(config, c.Callback());
    ASSERT_FALSE(h.ok());
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  }
  (*good_handle)->Push({"a", "mat."});
  (*good_handle)->EndSource();
  const SessionEvent done = good.Wait();
  ASSERT_EQ(done.kind, SessionEvent::Kind::kDone) << done.status;
  EXPECT_EQ(done.segments, 2);
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.kv.free_blocks, stats.kv.total_blocks);
}

}  // namespace
}  // namespace gpeserve::engine
