// The gRPC service on loopback (in-process server, ephemeral port) over a tiny model: live
// sessions equal offline runs, every validation case gets its status while other sessions go
// on, cancellation frees blocks, auth, Generate, and a metrics scrape consistent with what ran.
#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "engine/kv/kv_pool.h"
#include "engine/session/runner.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/service.h"
#include "tests/engine/test_models.h"

namespace gpeserve::server {
namespace {

using client::ConnectOptions;

class ServerTest : public ::testing::Test {
 protected:
  void Start(ServiceConfig config = {}, int max_sessions = 64, int64_t kv_blocks = 2048,
             int max_message_bytes = 4 << 20) {
    model_ = testing::TinyChatModel(7);
    engine::EngineConfig engine_config;
    engine_config.block_size = 4;
    engine_config.kv_blocks = kv_blocks;
    engine_config.max_sessions = max_sessions;
    engine_config.on_step = [this](int64_t tokens) { metrics_->ObserveStep(tokens); };
    metrics_ = std::make_unique<Metrics>("tiny");
    auto engine = engine::Engine::Create(model_, engine_config);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *engine;
    config.model_name = "tiny";
    config.default_profile = "qwen2.5";
    config.profiles["qwen2.5"] = *policy::LoadProfile("qwen2.5");
    config.default_max_new_tokens = 12;
    config.max_message_bytes = max_message_bytes;
    service_ = std::make_unique<Service>(engine_, metrics_.get(), config);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    builder.SetMaxReceiveMessageSize(4 * max_message_bytes);  // as gpeserve sets it
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    connect_.server = "127.0.0.1:" + std::to_string(port_);
    stub_ = v1::Gpeserve::NewStub(client::Connect(connect_));
  }

  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (engine_) engine_->Shutdown();
  }

  // What the session produces alone, offline (greedy).
  session::SessionResult Alone(const v1::SessionConfig& config,
                               const std::vector<std::string>& words, bool batch = false) {
    auto engine_config = service_->ToEngineConfig(config, batch);
    EXPECT_TRUE(engine_config.ok()) << engine_config.status();
    const model::ModelConfig& c = model_->config();
    kv::BlockAllocator allocator({.block_size = 4, .num_blocks = 512});
    auto pool = kv::KvPool::Create({.block_size = 4, .num_blocks = 512},
                                   {c.num_layers, c.num_kv_heads, c.head_dim}, model_->dtype(),
                                   model_->device());
    auto session = session::CreateOfflineSession(*model_, engine_config->options, words);
    auto result = session::RunToCompletion(*model_, **session, *pool, allocator);
    EXPECT_TRUE(result.ok()) << result.status();
    return *result;
  }

  // Waits until every KV block is free again (sessions end asynchronously).
  bool AllBlocksFree() {
    for (int i = 0; i < 200; ++i) {
      const engine::EngineStats s = engine_->stats();
      if (s.kv.free_blocks == s.kv.total_blocks && s.sessions_running == 0 &&
          s.sessions_waiting == 0) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  std::shared_ptr<const model::Model> model_;
  std::unique_ptr<Metrics> metrics_;
  std::shared_ptr<engine::Engine> engine_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  ConnectOptions connect_;
  std::unique_ptr<v1::Gpeserve::Stub> stub_;
};

std::vector<std::string> RandomWords(std::mt19937& rng, int n) {
  static const std::vector<std::string> vocabulary = {"the", "dog",    "sees", "a",     "cat",
                                                      "in",  "big",    "red",  "house", "runs",
                                                      "to",  "school", "Ü",    "naïve", "東京"};
  std::vector<std::string> words;
  for (int i = 0; i < n; ++i) words.push_back(vocabulary[rng() % vocabulary.size()]);
  return words;
}

// Sends raw requests and returns the call's final status (and the responses before it).
grpc::Status Exchange(v1::Gpeserve::Stub& stub, const std::vector<v1::StreamRequest>& requests,
                      std::vector<v1::StreamResponse>* responses = nullptr,
                      const std::string& token = "") {
  grpc::ClientContext context;
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  auto stream = stub.Stream(&context);
  for (const v1::StreamRequest& r : requests) {
    if (!stream->Write(r)) break;
  }
  stream->WritesDone();
  v1::StreamResponse response;
  while (stream->Read(&response)) {
    if (responses != nullptr) responses->push_back(response);
  }
  return stream->Finish();
}

v1::StreamRequest ConfigRequest(const v1::SessionConfig& config) {
  v1::StreamRequest r;
  *r.mutable_config() = config;
  return r;
}
v1::StreamRequest WordsRequest(const std::vector<std::string>& words) {
  v1::StreamRequest r;
  for (const std::string& w : words) r.mutable_chunk()->add_words(w);
  return r;
}
v1::StreamRequest TextRequest(const std::string& text) {
  v1::StreamRequest r;
  r.mutable_chunk()->set_text(text);
  return r;
}
v1::StreamRequest EndRequest() {
  v1::StreamRequest r;
  r.mutable_end();
  return r;
}

// Invariant 3 over the network: concurrent live sessions with random pacing produce exactly
// what each produces offline, alone; the streamed deltas add up to the final output.
TEST_F(ServerTest, LiveSessionsEqualOfflineRuns) {
  Start();
  std::mt19937 rng(3);
  const int sessions = 6;
  std::vector<std::vector<std::string>> sources;
  std::vector<v1::SessionConfig> configs;
  for (int i = 0; i < sessions; ++i) {
    sources.push_back(RandomWords(rng, 1 + static_cast<int>(rng() % 9)));
    v1::SessionConfig c;
    c.set_wait_k(1 + i % 3);
    c.set_max_new_tokens(10 + i);
    if (i % 3 == 2) c.set_paradigm(v1::SessionConfig::PARADIGM_REENCODE);
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
    EXPECT_EQ(streamed[i], alone.output) << i;
    EXPECT_EQ(done.delays_ms_size(), done.delays_size());
    // Units the session had when it ended (it may end before the whole source arrived).
    EXPECT_LE(done.source_units(), static_cast<int64_t>(sources[i].size()) + 1);
  }
  EXPECT_TRUE(AllBlocksFree());
}

// Compat sessions (the reference code's rules) run live beside method sessions and equal their
// offline runs; SessionDone's text is then the header and output decoded together.
TEST_F(ServerTest, CompatReferenceSessionsEqualOfflineRuns) {
  Start();
  std::mt19937 rng(8);
  std::vector<std::thread> threads;
  std::vector<absl::StatusOr<client::SessionTrace>> results(4, absl::UnknownError(""));
  std::vector<v1::SessionConfig> configs(4);
  std::vector<std::vector<std::string>> sources;
  for (int i = 0; i < 4; ++i) {
    sources.push_back(RandomWords(rng, 3 + i));
    configs[i].set_wait_k(1 + i % 2);
    configs[i].set_max_new_tokens(14);
    if (i % 2 == 0) configs[i].set_compat(v1::SessionConfig::COMPAT_REFERENCE);
  }
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back(
        [&, i] { results[i] = client::RunSession(*stub_, connect_, configs[i], sources[i], 300); });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    const v1::SessionDone& done = results[i]->done;
    const session::SessionResult alone = Alone(configs[i], sources[i]);
    EXPECT_EQ(std::vector<int32_t>(done.ids().begin(), done.ids().end()), alone.output) << i;
    EXPECT_EQ(std::vector<int64_t>(done.delays().begin(), done.delays().end()), alone.delays) << i;
    EXPECT_EQ(done.text(), alone.text) << i;
    EXPECT_EQ(absl::StartsWith(done.text(), "assistant\n"), i % 2 == 0) << done.text();
  }
  v1::SessionConfig reencode;
  reencode.set_compat(v1::SessionConfig::COMPAT_REFERENCE);
  reencode.set_paradigm(v1::SessionConfig::PARADIGM_REENCODE);
  const grpc::Status refused = Exchange(*stub_, {ConfigRequest(reencode), EndRequest()});
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("gpe paradigm"), std::string::npos);
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

// Every bad request gets its status and message; a good session running meanwhile is intact.
TEST_F(ServerTest, ValidationErrorsAndOthersUnaffected) {
  // The prompt counts against max_source_tokens: room for it and 40 tokens of source.
  const policy::Profile profile = *policy::LoadProfile("qwen2.5");
  const auto tokenizer = testing::TinyChatModel(7)->tokenizer();
  const int64_t prompt = static_cast<int64_t>(tokenizer->Encode(profile.Prefix())->size() +
                                              tokenizer->Encode(profile.end)->size());
  ServiceConfig config;
  config.max_chunk_words = 5;
  config.max_source_tokens = prompt + 40;
  config.max_new_tokens_limit = 100;
  config.max_instruction_bytes = 1000;
  Start(config);
  // A good session, paced slowly, while the bad ones come and go.
  std::mt19937 rng(5);
  const std::vector<std::string> good_words = RandomWords(rng, 8);
  v1::SessionConfig good;
  good.set_wait_k(2);
  absl::StatusOr<client::SessionTrace> good_result = absl::UnknownError("");
  std::thread good_thread(
      [&] { good_result = client::RunSession(*stub_, connect_, good, good_words, 40); });

  v1::SessionConfig ok_config;
  auto with = [](auto edit) {
    v1::SessionConfig c;
    edit(c);
    return c;
  };
  struct Case {
    std::string name;
    std::vector<v1::StreamRequest> requests;
    grpc::StatusCode code;
    std::string message;  // a part of the message
  };
  const std::vector<Case> cases = {
      {"first not a config",
       {WordsRequest({"hello"})},
       grpc::StatusCode::INVALID_ARGUMENT,
       "must be a SessionConfig"},
      {"empty request",
       {v1::StreamRequest()},
       grpc::StatusCode::INVALID_ARGUMENT,
       "empty StreamRequest"},
      {"no config at all", {}, grpc::StatusCode::INVALID_ARGUMENT, "before a SessionConfig"},
      {"two configs",
       {ConfigRequest(ok_config), ConfigRequest(ok_config)},
       grpc::StatusCode::INVALID_ARGUMENT,
       "second SessionConfig"},
      {"wait_k too large",
       {ConfigRequest(with([](auto& c) { c.set_wait_k(5000); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "wait_k is 5000"},
      {"unknown profile",
       {ConfigRequest(with([](auto& c) { c.set_profile("klingon"); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "unknown profile 'klingon'; this server has: qwen2.5"},
      {"profile as a path",
       {ConfigRequest(with([](auto& c) { c.set_profile("/etc/passwd"); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "unknown profile '/etc/passwd'"},
      {"unknown paradigm",
       {ConfigRequest(
           with([](auto& c) { c.set_paradigm(static_cast<v1::SessionConfig::Paradigm>(9)); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "unknown paradigm 9"},
      {"negative temperature",
       {ConfigRequest(with([](auto& c) { c.mutable_sampling()->set_temperature(-1); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "sampling: "},
      {"top_p above 1",
       {ConfigRequest(with([](auto& c) { c.mutable_sampling()->set_top_p(2); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "sampling: "},
      {"max_new_tokens above the limit",
       {ConfigRequest(with([](auto& c) { c.set_max_new_tokens(101); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "at most 100"},
      {"empty prompt strings",
       {ConfigRequest(with([](auto& c) { c.mutable_prompt(); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "prompt.assistant"},
      {"too many words in a chunk",
       {ConfigRequest(ok_config), WordsRequest({"a", "b", "c", "d", "e", "f"})},
       grpc::StatusCode::INVALID_ARGUMENT,
       "6 words; the limit is 5"},
      {"empty word",
       {ConfigRequest(ok_config), WordsRequest({"a", ""})},
       grpc::StatusCode::INVALID_ARGUMENT,
       "empty"},
      {"word with whitespace",
       {ConfigRequest(ok_config), WordsRequest({"a b"})},
       grpc::StatusCode::INVALID_ARGUMENT,
       "whitespace"},
      {"words and text",
       {ConfigRequest(ok_config),
        [] {
          v1::StreamRequest r = WordsRequest({"a"});
          r.mutable_chunk()->set_text("b");
          return r;
        }()},
       grpc::StatusCode::INVALID_ARGUMENT,
       "both words and text"},
      {"chunk after end",
       {ConfigRequest(ok_config), EndRequest(), WordsRequest({"late"})},
       grpc::StatusCode::FAILED_PRECONDITION,
       "after EndOfSource"},
      {"end twice",
       {ConfigRequest(ok_config), EndRequest(), EndRequest()},
       grpc::StatusCode::FAILED_PRECONDITION,
       "EndOfSource twice"},
      {"source too long",
       {ConfigRequest(ok_config), WordsRequest({"the", "dog", "sees", "a", "cat"}),
        WordsRequest({"the", "dog", "sees", "a", "cat"}),
        WordsRequest({"the", "dog", "sees", "a", "cat"}),
        WordsRequest({"the", "dog", "sees", "a", "cat"}),
        WordsRequest({"the", "dog", "sees", "a", "cat"})},
       grpc::StatusCode::INVALID_ARGUMENT,
       absl::StrCat("longer than ", prompt + 40, " tokens")},
      {"instruction over its byte limit",
       {ConfigRequest(with([](auto& c) { c.set_instruction(std::string(1 << 20, 'x')); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "has 1048576 bytes; this server allows at most 1000 (gpeserve --max_instruction_bytes)"},
      {"custom prompt over the byte limit",
       {ConfigRequest(with([](auto& c) {
         c.mutable_prompt()->set_instruct(std::string(999, 'x'));
         c.mutable_prompt()->set_assistant("A:");
         c.mutable_prompt()->set_end("\n");
       }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "max_instruction_bytes"},
      {"instruction within bytes, prompt over max_source_tokens",
       {ConfigRequest(with([](auto& c) { c.set_instruction(std::string(900, 'y')); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "max_source_tokens"},
      {"phi beyond the model's positions",
       {ConfigRequest(with([](auto& c) { c.set_phi(4294967295u); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "phi is 4294967295"},
      {"unknown compat",
       {ConfigRequest(
           with([](auto& c) { c.set_compat(static_cast<v1::SessionConfig::Compat>(7)); }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "unknown compat 7"},
  };
  for (const Case& c : cases) {
    const grpc::Status status = Exchange(*stub_, c.requests);
    EXPECT_EQ(status.error_code(), c.code) << c.name << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(c.message), std::string::npos)
        << c.name << ": " << status.error_message();
  }
  good_thread.join();
  ASSERT_TRUE(good_result.ok()) << good_result.status();
  const session::SessionResult alone = Alone(good, good_words);
  EXPECT_EQ(std::vector<int32_t>(good_result->done.ids().begin(), good_result->done.ids().end()),
            alone.output);
  EXPECT_TRUE(AllBlocksFree());
}

// Invalid UTF-8 in a text chunk, in a word, or in Generate's text: INVALID_ARGUMENT; the server
// goes on.
TEST_F(ServerTest, InvalidUtf8IsRefused) {
  Start();
  const std::string bad = "bad \xff\xfe word";
  for (const v1::StreamRequest& chunk : {TextRequest(bad), WordsRequest({"ok", "\xc3\x28"})}) {
    const grpc::Status status = Exchange(*stub_, {ConfigRequest({}), chunk, EndRequest()});
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find("not valid UTF-8"), std::string::npos)
        << status.error_message();
  }
  v1::GenerateRequest request;
  request.set_text(bad);
  grpc::ClientContext context;
  auto reader = stub_->Generate(&context, request);
  v1::StreamResponse r;
  while (reader->Read(&r)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto after = client::RunSession(*stub_, connect_, {}, {"the", "dog"}, 0);
  EXPECT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(AllBlocksFree());
}

// More sessions than the engine admits: RESOURCE_EXHAUSTED with a message; the others finish.
TEST_F(ServerTest, TooManySessions) {
  Start({}, /*max_sessions=*/2);
  // Two sessions that wait for more source hold both places.
  grpc::ClientContext c1, c2;
  auto s1 = stub_->Stream(&c1);
  auto s2 = stub_->Stream(&c2);
  ASSERT_TRUE(s1->Write(ConfigRequest({})));
  ASSERT_TRUE(s2->Write(ConfigRequest({})));
  ASSERT_TRUE(s1->Write(WordsRequest({"the"})));
  ASSERT_TRUE(s2->Write(WordsRequest({"a"})));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const grpc::Status third = Exchange(*stub_, {ConfigRequest({}), WordsRequest({"x"})});
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << third.error_message();
  EXPECT_NE(third.error_message().find("max_sessions"), std::string::npos);
  for (auto* s : {s1.get(), s2.get()}) {
    ASSERT_TRUE(s->Write(EndRequest()));
    s->WritesDone();
    v1::StreamResponse r;
    bool done = false;
    while (s->Read(&r)) done = done || r.has_done();
    EXPECT_TRUE(s->Finish().ok());
    EXPECT_TRUE(done);
  }
  EXPECT_TRUE(AllBlocksFree());
}

// A client that cancels mid-read or mid-write: the session's blocks are freed.
TEST_F(ServerTest, ClientCancelFreesBlocks) {
  Start();
  for (int mode = 0; mode < 2; ++mode) {
    grpc::ClientContext context;
    auto stream = stub_->Stream(&context);
    v1::SessionConfig config;
    config.set_wait_k(2);
    config.set_max_new_tokens(200);
    ASSERT_TRUE(stream->Write(ConfigRequest(config)));
    ASSERT_TRUE(stream->Write(WordsRequest({"the", "dog", "sees", "a", "cat"})));
    if (mode == 1) {  // wait until it writes
      v1::StreamResponse r;
      ASSERT_TRUE(stream->Read(&r));
    }
    bool holding = false;  // the session holds blocks (reading, writing or waiting for words)
    for (int i = 0; i < 400 && !holding; ++i) {
      const engine::EngineStats s = engine_->stats();
      holding = s.kv.free_blocks < s.kv.total_blocks;
      if (!holding) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_TRUE(holding);
    context.TryCancel();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_TRUE(AllBlocksFree()) << "mode " << mode;
  }
}

// A deadline that passes while the session waits for source cancels it and frees its blocks;
// a message over the size limit is refused with RESOURCE_EXHAUSTED.
TEST_F(ServerTest, DeadlineAndMessageSize) {
  Start({}, 64, 2048, /*max_message_bytes=*/1024);
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    auto stream = stub_->Stream(&context);
    v1::SessionConfig config;
    config.set_wait_k(3);  // it reads the prompt and the word, then waits for more words
    ASSERT_TRUE(stream->Write(ConfigRequest(config)));
    ASSERT_TRUE(stream->Write(WordsRequest({"the"})));
    v1::StreamResponse r;
    while (stream->Read(&r)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_TRUE(AllBlocksFree());
  }
  // Over the limit: refused by the service, with the flag named.
  const grpc::Status big =
      Exchange(*stub_, {ConfigRequest({}), TextRequest(std::string(2000, 'a')), EndRequest()});
  EXPECT_EQ(big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << big.error_message();
  EXPECT_NE(big.error_message().find("limit of 1024 bytes (gpeserve --max_message_bytes)"),
            std::string::npos)
      << big.error_message();
  v1::GenerateRequest generate;
  generate.set_text(std::string(1500, 'b'));
  grpc::ClientContext generate_context;
  auto reader = stub_->Generate(&generate_context, generate);
  v1::StreamResponse ignored;
  while (reader->Read(&ignored)) {
  }
  const grpc::Status big_generate = reader->Finish();
  EXPECT_EQ(big_generate.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(big_generate.error_message().find("--max_message_bytes"), std::string::npos)
      << big_generate.error_message();
  auto after = client::RunSession(*stub_, connect_, {}, {"the", "dog"}, 0);
  EXPECT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(AllBlocksFree());
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

// A server that ends sessions early (a drain that ran out of time) ends each with UNAVAILABLE
// and says how much of its source was never read; the blocks come back.
TEST_F(ServerTest, AbortedSessionsEndUnavailableWithUnreadUnits) {
  Start();
  grpc::ClientContext context;
  auto stream = stub_->Stream(&context);
  v1::SessionConfig config;
  config.set_wait_k(5);  // three words: it reads them and waits for more
  ASSERT_TRUE(stream->Write(ConfigRequest(config)));
  ASSERT_TRUE(stream->Write(WordsRequest({"the", "dog", "sees"})));
  bool holding = false;  // the session has started reading
  for (int i = 0; i < 400 && !holding; ++i) {
    const engine::EngineStats s = engine_->stats();
    holding = s.kv.free_blocks < s.kv.total_blocks;
    if (!holding) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(holding);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // it reads all three words
  service_->AbortAll(absl::UnavailableError("the server shut down"));
  v1::StreamResponse r;
  while (stream->Read(&r)) {
  }
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_NE(status.error_message().find("the server shut down (0 of 3 source units received "
                                        "were not read)"),
            std::string::npos)
      << status.error_message();
  EXPECT_TRUE(AllBlocksFree());
}

// A session that ends (here on its token limit) while source is still coming says how many
// units it received and never read.
TEST_F(ServerTest, EarlyEndReportsUnreadSourceUnits) {
  Start();
  v1::SessionConfig config;
  config.set_wait_k(1);
  config.set_max_new_tokens(1);
  std::vector<v1::StreamResponse> responses;
  const grpc::Status status =
      Exchange(*stub_,
               {ConfigRequest(config), WordsRequest({"the", "dog", "sees", "a", "cat"}),
                WordsRequest({"in", "the", "big", "red", "house"})},
               &responses);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_TRUE(responses.back().has_done());
  const v1::SessionDone& done = responses.back().done();
  EXPECT_EQ(done.finish_reason(), "max_new_tokens");
  int64_t read = 0;
  for (const v1::StreamResponse& response : responses) {
    if (response.has_delta()) read = response.delta().source_units_read();
  }
  EXPECT_EQ(read, 1);
  EXPECT_GE(done.source_units(), 5);  // the first chunk at least had arrived
  EXPECT_EQ(done.source_units_unread(), done.source_units() - read);
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
  EXPECT_EQ(value("gpeserve:e2e_session_latency_seconds_count" + m), 4);
  EXPECT_EQ(value("gpeserve:time_to_first_token_seconds_count" + m), 4);
  EXPECT_EQ(value("gpeserve:queue_time_seconds_count" + m), 4);
  EXPECT_EQ(value("gpeserve:inter_token_latency_seconds_count" + m),
            generated - 3 + first->done.ids_size() - 1);
  EXPECT_EQ(value("gpeserve:generation_tokens_total" + m), generated);
  EXPECT_GT(value("gpeserve:source_tokens_total" + m), 0);
  EXPECT_EQ(
      value("gpeserve:session_finished_total{model=\"tiny\",reason=\"max_new_tokens\"}") +
          value("gpeserve:session_finished_total{model=\"tiny\",reason=\"end_of_sequence\"}") +
          value("gpeserve:session_finished_total{model=\"tiny\",reason=\"max_lag\"}"),
      4);
  EXPECT_EQ(value("gpeserve:num_sessions_running" + m), 0);
  EXPECT_EQ(value("gpeserve:num_sessions_waiting" + m), 0);
  EXPECT_EQ(value("gpeserve:kv_cache_usage_perc" + m), 0);
  EXPECT_EQ(value("gpeserve:num_preemptions_total" + m), 0);
  EXPECT_GE(value("gpeserve:prefix_cache_queries_total" + m),
            value("gpeserve:prefix_cache_hits_total" + m));
  EXPECT_GT(value("gpeserve:iteration_tokens_count" + m), 0);
  EXPECT_GT(value("gpeserve:iteration_tokens_sum" + m), 0);
}

}  // namespace
}  // namespace gpeserve::server
