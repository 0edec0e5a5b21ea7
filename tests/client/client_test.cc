// The client library (client/client.h) against a real in-process gRPC server on loopback
// (ephemeral port) that serves gpeserve.v1.Gpeserve with a scripted fake, not the engine: what
// RunSession sends and in which order, what it returns (the SessionDone, each token's arrival in
// order, the call's error status), the bearer token; CheckHealth against gRPC's default health
// service, a server without one, and servers that cannot answer.
#include "client/client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"

namespace gpeserve::client {
namespace {

using ServerStream = grpc::ServerReaderWriter<v1::StreamResponse, v1::StreamRequest>;

// The service side of the tests: records every request and the call's `authorization`
// metadata, then runs the test's script (by default: one TokenDelta per chunk, two tokens per
// word, and a SessionDone after EndOfSource).
class FakeGpeserve final : public v1::Gpeserve::Service {
 public:
  using Script = std::function<grpc::Status(FakeGpeserve&, ServerStream*)>;

  explicit FakeGpeserve(Script script) : script_(std::move(script)) {}

  grpc::Status Stream(grpc::ServerContext* context, ServerStream* stream) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto& metadata = context->client_metadata();
      const auto it = metadata.find("authorization");
      authorization_ =
          it == metadata.end() ? "<none>" : std::string(it->second.data(), it->second.size());
    }
    return script_(*this, stream);
  }

  // Reads one request and records it.
  bool Read(ServerStream* stream, v1::StreamRequest* request) {
    if (!stream->Read(request)) return false;
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(*request);
    return true;
  }

  std::vector<v1::StreamRequest> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  std::string authorization() {
    std::lock_guard<std::mutex> lock(mu_);
    return authorization_;
  }

 private:
  Script script_;
  std::mutex mu_;
  std::vector<v1::StreamRequest> requests_;
  std::string authorization_ = "<no call>";
};

// The ids the default script gives word `i` of the session (two tokens, so that tokens and
// deltas differ in number).
std::vector<int32_t> WordIds(int i) { return {100 + i, 200 + i}; }

// The default script: after EndOfSource, a SessionDone whose text is the words joined, whose
// ids are all the tokens, and whose delays count the words.
grpc::Status EchoScript(FakeGpeserve& fake, ServerStream* stream) {
  v1::StreamRequest request;
  v1::SessionDone done;
  int word = 0;
  while (fake.Read(stream, &request)) {
    if (request.has_chunk()) {
      v1::StreamResponse response;
      v1::TokenDelta* delta = response.mutable_delta();
      for (const std::string& w : request.chunk().words()) {
        for (int32_t id : WordIds(word)) {
          delta->add_ids(id);
          done.add_ids(id);
        }
        delta->set_text(delta->text() + w);
        done.set_text(done.text().empty() ? w : done.text() + " " + w);
        done.add_delays(++word);
      }
      delta->set_source_units_read(word);
      if (!stream->Write(response)) return grpc::Status::CANCELLED;
    } else if (request.has_end()) {
      break;
    }
  }
  done.set_source_units(word + 1);
  done.set_finish_reason("end_of_sequence");
  done.mutable_counters()->set_forward_tokens(42);
  v1::StreamResponse response;
  *response.mutable_done() = done;
  stream->Write(response);
  return grpc::Status::OK;
}

// A loopback port nothing listens on (bound, then released).
int UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t size = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  close(fd);
  return ntohs(address.sin_port);
}

class ClientTest : public ::testing::Test {
 protected:
  // Serves `script` on 127.0.0.1, an ephemeral port; `health`: gRPC's default health service
  // (a process-wide switch read when a server is built, so every test sets it).
  void Start(FakeGpeserve::Script script = EchoScript, bool health = true) {
    fake_ = std::make_unique<FakeGpeserve>(std::move(script));
    grpc::EnableDefaultHealthCheckService(health);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(fake_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    options_.server = "127.0.0.1:" + std::to_string(port);
    stub_ = v1::Gpeserve::NewStub(Connect(options_));
  }

  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }

  std::unique_ptr<FakeGpeserve> fake_;
  std::unique_ptr<grpc::Server> server_;
  ConnectOptions options_;
  std::unique_ptr<v1::Gpeserve::Stub> stub_;
};

v1::SessionConfig SomeConfig() {
  v1::SessionConfig config;
  config.set_profile("qwen2.5");
  config.set_wait_k(2);
  config.set_max_new_tokens(17);
  config.set_paradigm(v1::SessionConfig::PARADIGM_REENCODE);
  return config;
}

// Paced: the SessionConfig first (as sent), then one SourceChunk per word in order, then
// EndOfSource and nothing after; the result is the server's SessionDone, one arrival time per
// token (in arrival order), and every delta passed to on_delta in order.
TEST_F(ClientTest, PacedSessionSendsConfigThenOneChunkPerWordThenEnd) {
  Start();
  const std::vector<std::string> words = {"the", "dog", "東京", "naïve", "sees"};
  std::vector<std::string> delta_texts;
  std::vector<int32_t> delta_ids;
  auto trace = RunSession(*stub_, options_, SomeConfig(), words, /*words_per_second=*/500,
                          [&](const v1::TokenDelta& d) {
                            delta_texts.push_back(d.text());
                            delta_ids.insert(delta_ids.end(), d.ids().begin(), d.ids().end());
                          });
  ASSERT_TRUE(trace.ok()) << trace.status();

  const std::vector<v1::StreamRequest> requests = fake_->requests();
  ASSERT_EQ(requests.size(), words.size() + 2);
  ASSERT_TRUE(requests.front().has_config());
  EXPECT_EQ(requests.front().config().SerializeAsString(), SomeConfig().SerializeAsString());
  for (size_t i = 0; i < words.size(); ++i) {
    ASSERT_TRUE(requests[i + 1].has_chunk()) << i;
    ASSERT_EQ(requests[i + 1].chunk().words_size(), 1) << i;
    EXPECT_EQ(requests[i + 1].chunk().words(0), words[i]) << i;
    EXPECT_TRUE(requests[i + 1].chunk().text().empty()) << i;
  }
  EXPECT_TRUE(requests.back().has_end());

  EXPECT_EQ(delta_texts, words);  // one delta per chunk, in order
  std::vector<int32_t> expected_ids;
  for (int i = 0; i < static_cast<int>(words.size()); ++i) {
    for (int32_t id : WordIds(i)) expected_ids.push_back(id);
  }
  EXPECT_EQ(delta_ids, expected_ids);
  EXPECT_EQ(std::vector<int32_t>(trace->done.ids().begin(), trace->done.ids().end()), expected_ids);
  EXPECT_EQ(trace->done.text(), "the dog 東京 naïve sees");
  EXPECT_EQ(trace->done.delays_size(), 5);
  EXPECT_EQ(trace->done.source_units(), 6);
  EXPECT_EQ(trace->done.finish_reason(), "end_of_sequence");
  EXPECT_EQ(trace->done.counters().forward_tokens(), 42);

  ASSERT_EQ(trace->token_ms.size(), expected_ids.size());  // per token, not per delta
  EXPECT_TRUE(std::is_sorted(trace->token_ms.begin(), trace->token_ms.end()));
  EXPECT_GE(trace->token_ms.front(), 0.0);
  EXPECT_EQ(trace->first_token_ms, trace->token_ms.front());
}

// Unpaced (words_per_second 0): all the words in one chunk, in order, between the config and
// EndOfSource.
TEST_F(ClientTest, UnpacedSessionSendsAllWordsInOneChunk) {
  Start();
  const std::vector<std::string> words = {"a", "big", "red", "house"};
  auto trace = RunSession(*stub_, options_, SomeConfig(), words, /*words_per_second=*/0);
  ASSERT_TRUE(trace.ok()) << trace.status();
  const std::vector<v1::StreamRequest> requests = fake_->requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_TRUE(requests[0].has_config());
  ASSERT_TRUE(requests[1].has_chunk());
  EXPECT_EQ(std::vector<std::string>(requests[1].chunk().words().begin(),
                                     requests[1].chunk().words().end()),
            words);
  EXPECT_TRUE(requests[2].has_end());
  EXPECT_EQ(trace->done.text(), "a big red house");
  EXPECT_EQ(trace->token_ms.size(), 8u);
}

// No words: the config, then EndOfSource, no chunk (paced or not); a session without tokens
// has no first token.
TEST_F(ClientTest, NoWordsSendsNoChunk) {
  Start();
  for (double words_per_second : {0.0, 100.0}) {
    SCOPED_TRACE(words_per_second);
    const size_t before = fake_->requests().size();
    auto trace = RunSession(*stub_, options_, SomeConfig(), {}, words_per_second);
    ASSERT_TRUE(trace.ok()) << trace.status();
    const std::vector<v1::StreamRequest> requests = fake_->requests();
    ASSERT_EQ(requests.size(), before + 2);
    EXPECT_TRUE(requests[before].has_config());
    EXPECT_TRUE(requests[before + 1].has_end());
    EXPECT_TRUE(trace->token_ms.empty());
    EXPECT_EQ(trace->first_token_ms, -1);
    EXPECT_EQ(trace->done.source_units(), 1);
  }
}

// The call's error status comes back with its code and message, after the deltas sent before
// it reached on_delta.
TEST_F(ClientTest, TheCallsErrorStatusComesBack) {
  Start([](FakeGpeserve& fake, ServerStream* stream) {
    v1::StreamRequest request;
    fake.Read(stream, &request);  // the config
    v1::StreamResponse response;
    response.mutable_delta()->add_ids(9);
    stream->Write(response);
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "the client did not read its events fast enough");
  });
  int deltas = 0;
  auto trace = RunSession(*stub_, options_, SomeConfig(), {"a", "b", "c"}, 1000,
                          [&](const v1::TokenDelta& d) { ++deltas; });
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(trace.status().message(), "the client did not read its events fast enough");
  EXPECT_EQ(deltas, 1);
}

// A server that refuses before reading anything (as gpeserve does without a token): the
// error, and RunSession returns although its writes fail.
TEST_F(ClientTest, ARefusalBeforeAnyReadComesBack) {
  Start([](FakeGpeserve&, ServerStream*) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "this server needs a token");
  });
  const std::vector<std::string> words(50, "word");
  auto trace = RunSession(*stub_, options_, SomeConfig(), words, 5000);
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(trace.status().message(), "this server needs a token");
}

// A stream that ends OK without a SessionDone is an error, not an empty session.
TEST_F(ClientTest, AStreamWithoutSessionDoneIsAnError) {
  Start([](FakeGpeserve& fake, ServerStream* stream) {
    v1::StreamRequest request;
    while (fake.Read(stream, &request)) {
    }
    v1::StreamResponse response;
    response.mutable_delta()->add_ids(1);
    stream->Write(response);
    return grpc::Status::OK;
  });
  auto trace = RunSession(*stub_, options_, SomeConfig(), {"x"}, 0);
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(trace.status().message(), "the stream ended without a SessionDone");
}

// The token travels as `authorization: Bearer <token>` when set, and no authorization header
// is sent without one.
TEST_F(ClientTest, SendsTheBearerTokenWhenSet) {
  Start();
  ASSERT_TRUE(RunSession(*stub_, options_, SomeConfig(), {"a"}, 0).ok());
  EXPECT_EQ(fake_->authorization(), "<none>");

  options_.auth_token = "s3cret-token";
  ASSERT_TRUE(RunSession(*stub_, options_, SomeConfig(), {"a"}, 0).ok());
  EXPECT_EQ(fake_->authorization(), "Bearer s3cret-token");

  // Authorize alone, on a call made by hand.
  grpc::ClientContext context;
  Authorize(options_, &context);
  auto stream = stub_->Stream(&context);
  v1::StreamRequest end;
  end.mutable_end();
  stream->Write(end);
  stream->WritesDone();
  v1::StreamResponse response;
  while (stream->Read(&response)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(fake_->authorization(), "Bearer s3cret-token");
}

// A server that cannot be reached: UNAVAILABLE, not a hang.
TEST_F(ClientTest, RunSessionAgainstNoServerIsUnavailable) {
  options_.server = "127.0.0.1:" + std::to_string(UnusedPort());
  auto stub = v1::Gpeserve::NewStub(Connect(options_));
  auto trace = RunSession(*stub, options_, SomeConfig(), {"a", "b"}, 1000);
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kUnavailable) << trace.status();
}

// Every gRPC code maps to the absl code of the same number, with the same message.
TEST(FromGrpcTest, KeepsCodeAndMessage) {
  EXPECT_TRUE(FromGrpc(grpc::Status::OK).ok());
  for (int code = 1; code <= 16; ++code) {
    SCOPED_TRACE(code);
    const std::string message = "message " + std::to_string(code);
    const absl::Status s = FromGrpc(grpc::Status(static_cast<grpc::StatusCode>(code), message));
    EXPECT_EQ(static_cast<int>(s.code()), code);
    EXPECT_EQ(s.message(), message);
  }
  // The numbering is the same in both: spot checks by name.
  EXPECT_EQ(FromGrpc(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "")).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(FromGrpc(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "")).code(),
            absl::StatusCode::kResourceExhausted);
}

// grpc.health.v1 through gRPC's default health service: SERVING is true, NOT_SERVING false,
// following the server's status as it changes.
TEST_F(ClientTest, CheckHealthFollowsTheServingStatus) {
  Start();
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  ASSERT_NE(health, nullptr);
  auto serving = CheckHealth(options_, 5);
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);

  health->SetServingStatus(false);
  serving = CheckHealth(options_, 5);
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_FALSE(*serving);

  health->SetServingStatus(true);
  serving = CheckHealth(options_, 5);
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
}

// A server without a health service: the call's error (UNIMPLEMENTED), not false.
TEST_F(ClientTest, CheckHealthWithoutAHealthServiceIsAnError) {
  Start(EchoScript, /*health=*/false);
  auto serving = CheckHealth(options_, 5);
  ASSERT_FALSE(serving.ok());
  EXPECT_EQ(serving.status().code(), absl::StatusCode::kUnimplemented) << serving.status();
}

// Nothing listening: an error (the connection is refused, or the short timeout passes).
TEST(CheckHealthTest, AnUnreachableServerIsAnError) {
  ConnectOptions options;
  options.server = "127.0.0.1:" + std::to_string(UnusedPort());
  auto serving = CheckHealth(options, 0.5);
  ASSERT_FALSE(serving.ok());
  EXPECT_TRUE(serving.status().code() == absl::StatusCode::kUnavailable ||
              serving.status().code() == absl::StatusCode::kDeadlineExceeded)
      << serving.status();
}

// A peer that takes the TCP connection and never speaks HTTP/2: the timeout ends the check
// with DEADLINE_EXCEEDED (without it, the call would wait for the connection attempt).
TEST(CheckHealthTest, ASilentServerHitsTheTimeout) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(fd, 8), 0);  // the kernel completes handshakes; nothing is ever accepted
  socklen_t size = sizeof(address);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size), 0);
  ConnectOptions options;
  options.server = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  auto serving = CheckHealth(options, 0.3);
  close(fd);
  ASSERT_FALSE(serving.ok());
  EXPECT_EQ(serving.status().code(), absl::StatusCode::kDeadlineExceeded) << serving.status();
}

}  // namespace
}  // namespace gpeserve::client
