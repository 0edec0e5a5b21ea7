// The gRPC service's refusals and early ends: every validation case with its status while a
// good session goes on, invalid UTF-8, too many sessions, client cancellation and deadlines
// freeing blocks, message size, sessions the server aborts and sessions that end before their
// source was read.
#include "tests/server/server_fixture.h"

namespace gpeserve::server {
namespace {

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
      {"compat REFERENCE with another paradigm",
       {ConfigRequest(with([](auto& c) {
         c.set_compat(v1::SessionConfig::COMPAT_REFERENCE);
         c.set_paradigm(v1::SessionConfig::PARADIGM_REENCODE);
       }))},
       grpc::StatusCode::INVALID_ARGUMENT,
       "does not apply to the reencode paradigm"},
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

}  // namespace
}  // namespace gpeserve::server
