// The gRPC service on loopback (in-process server, ephemeral port) over a tiny model: live
// sessions and compat sessions equal offline runs, cut words and characters stay whole,
// Generate, auth, and a metrics scrape consistent with what ran. Refusals and early ends:
// server_errors_test.cc.
#include "engine/kv/block_allocator.h"
#include "tests/server/server_fixture.h"

namespace gpeserve::server {
namespace {

// Invariant 3 over the network: concurrent live sessions with random pacing (the gpe and
// reencode paradigms, and compat REFERENCE sessions, whose text starts with the header's)
// produce exactly what each produces offline, alone; the streamed deltas add up to the final
// output.
TEST_F(ServerTest, LiveSessionsEqualOfflineRuns) {
  Start();
  std::mt19937 rng(3);
  const int sessions = 9;
  std::vector<std::vector<std::string>> sources;
  std::vector<v1::SessionConfig> configs;
  for (int i = 0; i < sessions; ++i) {
    sources.push_back(RandomWords(rng, 1 + static_cast<int>(rng() % 9)));
    v1::SessionConfig c;
    c.set_wait_k(1 + i % 3);
    c.set_max_new_tokens(10 + i);
    if (i % 3 == 2) c.set_paradigm(v1::SessionConfig::PARADIGM_REENCODE);
    if (i % 3 == 1) c.set_compat(v1::SessionConfig::COMPAT_REFERENCE);
    configs.push_back(c);
  }
  std::vector<absl::StatusOr<client::SessionTrace>> results(sessions, absl::UnknownError(""));
  std::vector<std::vector<int32_t>> streamed(sessions);
  std::vector<std::thread> threads;
  for (int i = 0; i < sessions; ++i) {
    threads.emplace_back([&, i] {
      results[i] = client::RunSession(
          *stub_, connect_, configs[i], sources[i],
          /*words_per_second=*/200 + 150 * i, [&, i](const v1::TokenDelta& d) {
            streamed[i].insert(streamed[i].end(), d.ids().begin(), d.ids().end());
          });
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < sessions; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    const v1::SessionDone& done = results[i]->done;
    const session::SessionResult alone = Alone(configs[i], sources[i]);
    EXPECT_EQ(std::vector<int32_t>(done.ids().begin(), done.ids().end()), alone.output) << i;
    EXPECT_EQ(std::vector<int64_t>(done.delays().begin(), done.delays().end()), alone.delays) << i;
    EXPECT_EQ(done.text(), alone.text) << i;
    EXPECT_EQ(absl::StartsWith(done.text(), "assistant\n"), i % 3 == 1) << done.text();
    EXPECT_EQ(streamed[i], alone.output) << i;
    EXPECT_EQ(done.delays_ms_size(), done.delays_size());
    // Units the session had when it ended (it may end before the whole source arrived).
    EXPECT_LE(done.source_units(), static_cast<int64_t>(sources[i].size()) + 1);
  }
  EXPECT_TRUE(AllBlocksFree());
}

// Text chunks are split on whitespace; a word, and a UTF-8 character, cut across two chunks
// stays whole; a text that ends inside a character is refused.
TEST_F(ServerTest, TextChunksKeepCutWordsAndCharactersWhole) {
  Start();
  v1::SessionConfig config;
  config.set_wait_k(2);
  const std::vector<std::pair<std::vector<v1::StreamRequest>, std::vector<std::string>>> cases = {
      {{TextRequest("the do"), TextRequest("g sees "), TextRequest("a\tbig\n"), TextRequest("cat")},
       {"the", "dog", "sees", "a", "big", "cat"}},
      // "naïve café 東京": ï, é and 東 each cut inside their bytes.
      {{TextRequest("na\xc3"), TextRequest("\xafve caf\xc3"), TextRequest("\xa9 \xe6"),
        TextRequest("\x9d"), TextRequest("\xb1\xe4\xba\xac")},
       {"naïve", "café", "東京"}},
  };
  for (const auto& [chunks, words] : cases) {
    std::vector<v1::StreamRequest> requests = {ConfigRequest(config)};
    requests.insert(requests.end(), chunks.begin(), chunks.end());
    requests.push_back(EndRequest());
    std::vector<v1::StreamResponse> responses;
    const grpc::Status status = Exchange(*stub_, requests, &responses);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_FALSE(responses.empty());
    ASSERT_TRUE(responses.back().has_done());
    const v1::SessionDone& done = responses.back().done();
    EXPECT_EQ(std::vector<int32_t>(done.ids().begin(), done.ids().end()),
              Alone(config, words).output);
    EXPECT_EQ(done.source_units(), static_cast<int64_t>(words.size()) + 1);
  }
  for (const auto& requests : std::vector<std::vector<v1::StreamRequest>>{
           {ConfigRequest(config), TextRequest("caf\xc3"), EndRequest()},
           {ConfigRequest(config), TextRequest("caf\xc3"), WordsRequest({"x"})},
           {ConfigRequest(config), TextRequest("caf\xc3")}}) {
    const grpc::Status cut = Exchange(*stub_, requests);
    EXPECT_EQ(cut.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << cut.error_message();
    EXPECT_NE(cut.error_message().find("inside a UTF-8 character"), std::string::npos)
        << cut.error_message();
  }
  // Bytes that can never complete a character: refused at once.
  const grpc::Status bad =
      Exchange(*stub_, {ConfigRequest(config), TextRequest("caf\xc3"), TextRequest("(")});
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("not valid UTF-8"), std::string::npos);
  EXPECT_TRUE(AllBlocksFree());
}

// A long-form session over the API: segments cut by a sentence mark, by a client boundary (on
// a text chunk whose last word is cut: the boundary ends it), by max_segment_words, and by the
// end; each SegmentDone equals a separate session with its words; the deltas carry their
// segment; the metrics count the segments; bad long-form input is refused precisely.
TEST_F(ServerTest, LongFormSessionsOverTheApi) {
  Start();
  v1::SessionConfig config;
  config.set_wait_k(2);
  config.mutable_long_form()->set_enabled(true);
  config.mutable_long_form()->set_max_segment_words(4);
  v1::StreamRequest boundary = TextRequest("hou");
  boundary.mutable_chunk()->set_boundary(true);
  const std::vector<v1::StreamRequest> requests = {
      ConfigRequest(config),
      WordsRequest({"the", "dog", "sees."}),
      TextRequest("a big "),
      boundary,
      WordsRequest({"the", "cat", "runs", "to", "school"}),
      EndRequest()};
  const std::vector<std::vector<std::string>> segments = {
      {"the", "dog", "sees."}, {"a", "big", "hou"}, {"the", "cat", "runs", "to"}, {"school"}};
  const std::vector<std::string> cuts = {"sentence_mark", "boundary", "max_words", "end_of_source"};
  std::vector<v1::StreamResponse> responses;
  const grpc::Status status = Exchange(*stub_, requests, &responses);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_TRUE(responses.back().has_done());
  const v1::SessionDone& done = responses.back().done();
  EXPECT_EQ(done.finish_reason(), "end_of_source");
  EXPECT_EQ(done.segments(), 4);
  EXPECT_EQ(done.source_units(), 11 + 4);
  EXPECT_GT(done.counters().kv_blocks_high_water(), 0);
  std::vector<v1::SegmentDone> finished;
  std::vector<std::vector<int32_t>> streamed(segments.size());
  for (const v1::StreamResponse& r : responses) {
    if (r.has_segment()) finished.push_back(r.segment());
    if (r.has_delta()) {
      ASSERT_EQ(r.delta().segment(), static_cast<int64_t>(finished.size()));
      streamed[r.delta().segment()].insert(streamed[r.delta().segment()].end(),
                                           r.delta().ids().begin(), r.delta().ids().end());
    }
  }
  ASSERT_EQ(finished.size(), segments.size());
  int64_t first_word = 0;
  for (size_t k = 0; k < segments.size(); ++k) {
    v1::SessionConfig sentence = config;
    sentence.clear_long_form();
    const session::SessionResult alone = Alone(sentence, segments[k]);
    const v1::SegmentDone& s = finished[k];
    EXPECT_EQ(s.index(), static_cast<int64_t>(k));
    EXPECT_EQ(std::vector<int32_t>(s.ids().begin(), s.ids().end()), alone.output) << k;
    EXPECT_EQ(std::vector<int64_t>(s.delays().begin(), s.delays().end()), alone.delays) << k;
    EXPECT_EQ(s.text(), alone.text);
    EXPECT_EQ(streamed[k], alone.output);
    EXPECT_EQ(s.cut(), cuts[k]);
    EXPECT_EQ(s.first_word(), first_word);
    EXPECT_EQ(s.words(), static_cast<int64_t>(segments[k].size()));
    EXPECT_EQ(s.lags_ms_size(), s.delays_size());
    first_word += s.words();
  }
  EXPECT_NE(metrics_->Render().find("gpeserve:segments_total{adapter=\"base\",model=\"tiny\"} 4"),
            std::string::npos)
      << metrics_->Render();

  // Refusals, each precise.
  v1::SessionConfig sentence;
  v1::StreamRequest bare_boundary = WordsRequest({});
  bare_boundary.mutable_chunk()->set_boundary(true);
  v1::StreamRequest word_boundary = WordsRequest({"the"});
  word_boundary.mutable_chunk()->set_boundary(true);
  v1::SessionConfig bad_marks = config;
  bad_marks.mutable_long_form()->add_sentence_marks("\xff");
  v1::SessionConfig spaced_mark = config;
  spaced_mark.mutable_long_form()->add_sentence_marks("a b");
  v1::SessionConfig too_many = config;
  too_many.mutable_long_form()->set_max_segment_words(5000);
  v1::SessionConfig context = config;
  context.mutable_long_form()->set_context_segments(9);
  v1::SessionConfig disabled;
  disabled.mutable_long_form()->set_max_segment_words(10);
  const std::vector<std::tuple<std::vector<v1::StreamRequest>, grpc::StatusCode, std::string>>
      cases = {
          {{ConfigRequest(sentence), word_boundary},
           grpc::StatusCode::INVALID_ARGUMENT,
           "sentence session"},
          {{ConfigRequest(config), WordsRequest({"a", "dog."}), word_boundary, bare_boundary},
           grpc::StatusCode::INVALID_ARGUMENT,
           "no words since the last boundary"},
          {{ConfigRequest(bad_marks)}, grpc::StatusCode::INVALID_ARGUMENT, "not valid UTF-8"},
          {{ConfigRequest(spaced_mark)}, grpc::StatusCode::INVALID_ARGUMENT, "sentence_marks"},
          {{ConfigRequest(too_many)}, grpc::StatusCode::INVALID_ARGUMENT, "max_segment_words"},
          {{ConfigRequest(context)}, grpc::StatusCode::INVALID_ARGUMENT, "context_segments"},
          {{ConfigRequest(disabled)}, grpc::StatusCode::INVALID_ARGUMENT, "enabled"},
      };
  for (const auto& [reqs, code, message] : cases) {
    const grpc::Status s = Exchange(*stub_, reqs);
    EXPECT_EQ(s.error_code(), code) << message << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(message), std::string::npos) << s.error_message();
  }
  // Generate is batch mode: no long-form.
  grpc::ClientContext context_generate;
  v1::GenerateRequest generate;
  *generate.mutable_config() = config;
  generate.set_text("the dog sees.");
  auto reader = stub_->Generate(&context_generate, generate);
  v1::StreamResponse ignored;
  while (reader->Read(&ignored)) {
  }
  const grpc::Status g = reader->Finish();
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(g.error_message().find("Generate"), std::string::npos) << g.error_message();
  EXPECT_TRUE(AllBlocksFree());
}

// Generate is batch mode: the same as an offline batch session.
TEST_F(ServerTest, GenerateEqualsOfflineBatch) {
  Start();
  v1::GenerateRequest request;
  request.set_text("the dog sees a big cat");
  grpc::ClientContext context;
  auto reader = stub_->Generate(&context, request);
  v1::StreamResponse r, last;
  while (reader->Read(&r)) last = r;
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_TRUE(last.has_done());
  const session::SessionResult alone =
      Alone({}, {"the", "dog", "sees", "a", "big", "cat"}, /*batch=*/true);
  EXPECT_EQ(std::vector<int32_t>(last.done().ids().begin(), last.done().ids().end()), alone.output);
  // Nothing to translate: refused, not answered with invented output.
  for (const std::string& text : {std::string(), std::string(" \t\n ")}) {
    v1::GenerateRequest empty;
    empty.set_text(text);
    grpc::ClientContext empty_context;
    auto empty_reader = stub_->Generate(&empty_context, empty);
    bool answered = false;
    while (empty_reader->Read(&r)) answered = true;
    const grpc::Status status = empty_reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find("the text is empty"), std::string::npos);
    EXPECT_FALSE(answered);
  }
}

TEST_F(ServerTest, AuthToken) {
  ServiceConfig config;
  config.auth_token = "s3cret";
  Start(config);
  const grpc::Status missing = Exchange(*stub_, {ConfigRequest({}), EndRequest()});
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const grpc::Status wrong = Exchange(*stub_, {ConfigRequest({}), EndRequest()}, nullptr, "nope");
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const grpc::Status right =
      Exchange(*stub_, {ConfigRequest({}), WordsRequest({"hi"}), EndRequest()}, nullptr, "s3cret");
  EXPECT_TRUE(right.ok()) << right.error_message();
  grpc::ClientContext context;
  v1::ListModelsResponse models;
  EXPECT_EQ(stub_->ListModels(&context, {}, &models).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

// A scrape holds every metric family, with values consistent with the sessions run (read from
// the engine at scrape time, the baseline excluded), and refused calls by status code.
TEST_F(ServerTest, MetricsAreConsistent) {
  Start();
  v1::SessionConfig before;
  before.set_max_new_tokens(4);
  auto first = client::RunSession(*stub_, connect_, before, {"a", "cat"}, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  metrics_->SetStatsSource([this] { return engine_->stats(); });  // that session: baseline
  v1::SessionConfig bad;
  bad.set_wait_k(5000);
  EXPECT_EQ(Exchange(*stub_, {ConfigRequest(bad), EndRequest()}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  int64_t generated = 0;
  for (int i = 0; i < 3; ++i) {
    v1::SessionConfig config;
    config.set_max_new_tokens(5 + i);
    auto result = client::RunSession(*stub_, connect_, config, {"the", "dog", "sees"}, 0);
    ASSERT_TRUE(result.ok()) << result.status();
    generated += result->done.ids_size();
  }
  ASSERT_TRUE(AllBlocksFree());
  const std::string text = metrics_->Render();
  auto value = [&](const std::string& series) {
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (absl::StartsWith(line, series + " ")) {
        return std::stod(std::string(line.substr(series.size() + 1)));
      }
    }
    ADD_FAILURE() << "no series " << series << " in\n" << text;
    return -1.0;
  };
  const std::string m = "{model=\"tiny\"}";
  for (const char* family :
       {"time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_session_latency_seconds",
        "queue_time_seconds", "iteration_tokens", "word_lag_words", "word_lag_seconds"}) {
    EXPECT_NE(text.find(std::string("# TYPE gpeserve:") + family + " histogram"), std::string::npos)
        << family;
  }
  EXPECT_EQ(value("gpeserve:request_errors_total{code=\"INVALID_ARGUMENT\",model=\"tiny\"}"), 1);
  // Per-session series carry the adapter ("base": the model alone).
  const std::string sm = "{adapter=\"base\",model=\"tiny\"}";
  EXPECT_EQ(value("gpeserve:e2e_session_latency_seconds_count" + sm), 4);
  EXPECT_EQ(value("gpeserve:time_to_first_token_seconds_count" + sm), 4);
  EXPECT_EQ(value("gpeserve:queue_time_seconds_count" + sm), 4);
  EXPECT_EQ(value("gpeserve:inter_token_latency_seconds_count" + sm),
            generated - 3 + first->done.ids_size() - 1);
  EXPECT_EQ(value("gpeserve:generation_tokens_total" + m), generated);
  EXPECT_GT(value("gpeserve:source_tokens_total" + m), 0);
  EXPECT_EQ(
      value("gpeserve:session_finished_total{adapter=\"base\",model=\"tiny\",reason=\"max_new_"
            "tokens\"}") +
          value("gpeserve:session_finished_total{adapter=\"base\",model=\"tiny\",reason=\"end_of_"
                "sequence\"}") +
          value("gpeserve:session_finished_total{adapter=\"base\",model=\"tiny\",reason=\"max_"
                "lag\"}"),
      4);
  EXPECT_EQ(value("gpeserve:num_sessions_running" + m), 0);
  EXPECT_EQ(value("gpeserve:num_sessions_waiting" + m), 0);
  EXPECT_EQ(value("gpeserve:kv_cache_usage_perc" + m), 0);
  // The sessions' prompts stay cached after them (free, but findable by later sessions).
  EXPECT_GT(value("gpeserve:kv_cache_cached_blocks" + m), 0);
  EXPECT_EQ(value("gpeserve:num_preemptions_total" + m), 0);
  // In tokens: whole blocks of the default size; later sessions find the first's prompt.
  const double queries = value("gpeserve:prefix_cache_queries_total" + m);
  const double hits = value("gpeserve:prefix_cache_hits_total" + m);
  const int block_size = kv::KvCacheConfig{}.block_size;
  EXPECT_GE(queries, hits);
  EXPECT_GT(hits, 0);
  EXPECT_EQ(static_cast<int64_t>(hits) % block_size, 0);
  EXPECT_EQ(static_cast<int64_t>(queries) % block_size, 0);
  EXPECT_GT(value("gpeserve:iteration_tokens_count" + m), 0);
  EXPECT_GT(value("gpeserve:iteration_tokens_sum" + m), 0);
}

// A session's instruction: its own, else its adapter's (prompt.json), else the profile's; the
// merged adapter's applies to every session, which then runs the model as loaded.
TEST(ConvertTest, InstructionComesFromSessionAdapterOrProfile) {
  ServiceConfig service;
  service.default_profile = "qwen2.5";
  service.profiles["qwen2.5"] = *policy::LoadProfile("qwen2.5");
  const std::string profile_instruction = service.profiles["qwen2.5"].instruction;
  service.adapters = {{.name = "de-en", .instruction = "German to English"}, {.name = "plain"}};
  auto instruction = [&](const std::string& adapter, std::optional<std::string> own) {
    v1::SessionConfig config;
    config.set_adapter(adapter);
    if (own) config.set_instruction(*own);
    auto converted = ToEngineConfig(config, service, /*batch=*/false);
    EXPECT_TRUE(converted.ok()) << converted.status();
    return converted.ok() ? converted->options.profile.instruction : std::string();
  };
  EXPECT_EQ(instruction("de-en", std::nullopt), "German to English");
  EXPECT_EQ(instruction("de-en", "mine"), "mine");
  EXPECT_EQ(instruction("plain", std::nullopt), profile_instruction);
  EXPECT_EQ(instruction("", std::nullopt), profile_instruction);

  service.adapters = {{.name = "de-en", .instruction = "German to English", .merged = true}};
  EXPECT_EQ(instruction("", std::nullopt), "German to English");
  EXPECT_EQ(instruction("", "mine"), "mine");
  v1::SessionConfig merged;
  merged.set_adapter("de-en");
  auto converted = ToEngineConfig(merged, service, /*batch=*/false);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->adapter, "");
  EXPECT_EQ(converted->options.profile.instruction, "German to English");
}

}  // namespace
}  // namespace gpeserve::server
