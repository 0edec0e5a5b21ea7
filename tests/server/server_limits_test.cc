// The per-client limits a hostile client cannot get around (issue 22): sessions per connection,
// source bytes per session, the idle timeout and unread source units. Each refuses or ends only
// the offending session, with a status that names its flag, counts it in
// gpeserve:limit_refusals_total, and leaves other sessions intact and every KV block free.
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "tests/server/server_fixture.h"

namespace gpeserve::server {
namespace {

// limit_refusals_total{limit="..."} in a scrape.
double LimitCount(Metrics& metrics, const std::string& limit) {
  const std::string text = metrics.Render();
  const std::string key = "limit=\"" + limit + "\"";
  for (const absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, "gpeserve:limit_refusals_total{") && absl::StrContains(line, key)) {
      return std::stod(std::string(line.substr(line.rfind(' ') + 1)));
    }
  }
  return -1;
}

// A session that completes: all its words, then the end; its SessionDone.
bool Completes(v1::Gpeserve::Stub& stub, const std::vector<std::string>& words) {
  std::vector<v1::StreamResponse> responses;
  const grpc::Status s =
      Exchange(stub, {ConfigRequest({}), WordsRequest(words), EndRequest()}, &responses);
  return s.ok() && !responses.empty() && responses.back().has_done();
}

// A stub on a connection of its own (gRPC shares one between channels to the same address).
std::unique_ptr<v1::Gpeserve::Stub> OwnConnection(const std::string& server) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return v1::Gpeserve::NewStub(
      grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), arguments));
}

// Reads a stream to its end; its final status.
grpc::Status Close(grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>& stream) {
  stream.Write(EndRequest());
  stream.WritesDone();
  v1::StreamResponse response;
  while (stream.Read(&response)) {
  }
  return stream.Finish();
}

TEST_F(ServerTest, SessionsPerConnection) {
  ServiceConfig config;
  config.max_sessions_per_connection = 2;
  Start(config);
  auto first = OwnConnection(connect_.server);
  // Two sessions that wait for source hold the connection's places.
  grpc::ClientContext c1, c2;
  auto s1 = first->Stream(&c1);
  auto s2 = first->Stream(&c2);
  for (auto* s : {s1.get(), s2.get()}) {
    ASSERT_TRUE(s->Write(ConfigRequest({})));
    ASSERT_TRUE(s->Write(WordsRequest({"the"})));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const grpc::Status third = Exchange(*first, {ConfigRequest({}), WordsRequest({"x"})});
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << third.error_message();
  EXPECT_TRUE(absl::StrContains(third.error_message(), "--max_sessions_per_connection"))
      << third.error_message();
  v1::GenerateRequest generate;
  generate.set_text("the dog");
  {
    grpc::ClientContext context;
    auto reader = first->Generate(&context, generate);
    v1::StreamResponse r;
    while (reader->Read(&r)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  // Another connection is not affected.
  EXPECT_TRUE(Completes(*OwnConnection(connect_.server), {"a", "cat"}));
  // Once one of the two ends, the connection takes a session again.
  EXPECT_TRUE(Close(*s1).ok());
  EXPECT_TRUE(Completes(*first, {"a", "dog"}));
  EXPECT_TRUE(Close(*s2).ok());
  EXPECT_EQ(LimitCount(*metrics_, "max_sessions_per_connection"), 2);
  EXPECT_TRUE(AllBlocksFree());
}

TEST_F(ServerTest, SourceBytesPerSession) {
  ServiceConfig config;
  config.max_session_source_bytes = 40;
  Start(config);
  grpc::ClientContext other_context;
  auto other = stub_->Stream(&other_context);  // a session running meanwhile
  ASSERT_TRUE(other->Write(ConfigRequest({})));
  ASSERT_TRUE(other->Write(WordsRequest({"the", "dog"})));
  // 10 chunks of 5 bytes: the ninth passes 40.
  std::vector<v1::StreamRequest> requests = {ConfigRequest({})};
  for (int i = 0; i < 10; ++i) requests.push_back(TextRequest("abcd "));
  requests.push_back(EndRequest());
  const grpc::Status s = Exchange(*stub_, requests);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "45 bytes")) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "--max_session_source_bytes"));
  // Within the limit: fine; the other session is intact.
  EXPECT_TRUE(Completes(*stub_, {"abcd", "efgh"}));
  EXPECT_TRUE(Close(*other).ok());
  EXPECT_EQ(LimitCount(*metrics_, "max_session_source_bytes"), 1);
  EXPECT_TRUE(AllBlocksFree());
}

TEST_F(ServerTest, IdleSessionsEnd) {
  tune_engine_ = [](engine::EngineConfig& c) { c.session_idle_seconds = 2.0; };
  Start();
  metrics_->SetStatsSource([this] { return engine_->stats(); });  // as gpeserve's main does
  grpc::ClientContext quiet_context;
  auto quiet = stub_->Stream(&quiet_context);
  ASSERT_TRUE(quiet->Write(ConfigRequest({})));
  ASSERT_TRUE(quiet->Write(WordsRequest({"the", "dog"})));
  // A session that keeps sending (every 0.3 s for 3 s) is not idle.
  std::thread steady([this] {
    grpc::ClientContext context;
    auto stream = stub_->Stream(&context);
    stream->Write(ConfigRequest({}));
    for (int i = 0; i < 10; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      stream->Write(WordsRequest({"a"}));
    }
    EXPECT_TRUE(Close(*stream).ok());
  });
  const auto start = std::chrono::steady_clock::now();
  v1::StreamResponse response;
  while (quiet->Read(&response)) {
  }
  const grpc::Status s = quiet->Finish();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  steady.join();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "--session_idle_seconds")) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "source units")) << s.error_message();
  EXPECT_GE(waited, 1.9);  // not before its time (the upper side is the test's timeout)
  EXPECT_EQ(LimitCount(*metrics_, "session_idle_seconds"), 1);
  EXPECT_TRUE(AllBlocksFree());
}

TEST_F(ServerTest, UnreadSourceUnits) {
  tune_engine_ = [](engine::EngineConfig& c) { c.max_unread_source_units = 6; };
  Start();
  metrics_->SetStatsSource([this] { return engine_->stats(); });  // as gpeserve's main does
  std::vector<std::string> many(12, "dog");
  const grpc::Status s = Exchange(*stub_, {ConfigRequest({}), WordsRequest(many), EndRequest()});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "12 source units received and not yet read"))
      << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "--max_unread_source_units"));
  // Within it: the same words sent four at a time, each chunk once the session has read the
  // one before (report_waiting), complete.
  v1::SessionConfig config;
  config.set_report_waiting(true);
  config.set_max_new_tokens(40);
  grpc::ClientContext context;
  auto stream = stub_->Stream(&context);
  ASSERT_TRUE(stream->Write(ConfigRequest(config)));
  v1::StreamResponse r;
  bool done = false;
  size_t sent = 0;
  while (!done && stream->Read(&r)) {
    done = r.has_done();
    if (r.has_waiting()) {
      if (sent < many.size()) {
        stream->Write(WordsRequest({many.begin() + sent, many.begin() + sent + 4}));
        sent += 4;
      } else {
        stream->Write(EndRequest());
        stream->WritesDone();
      }
    }
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_TRUE(done);
  EXPECT_EQ(LimitCount(*metrics_, "max_unread_source_units"), 1);
  EXPECT_TRUE(AllBlocksFree());
}

}  // namespace
}  // namespace gpeserve::server
