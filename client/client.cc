#include "client/client.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace gpeserve::client {

using Clock = std::chrono::steady_clock;

std::shared_ptr<grpc::Channel> Connect(const ConnectOptions& options) {
  grpc::ChannelArguments arguments;
  if (!options.tls_server_name.empty()) {
    arguments.SetSslTargetNameOverride(options.tls_server_name);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_ca;
    credentials = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(options.server, credentials, arguments);
}

void Authorize(const ConnectOptions& options, grpc::ClientContext* context) {
  if (!options.auth_token.empty()) {
    context->AddMetadata("authorization", "Bearer " + options.auth_token);
  }
}

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::StatusOr<SessionTrace> RunSession(
    v1::Gpeserve::Stub& stub, const ConnectOptions& options, const v1::SessionConfig& config,
    const std::vector<std::string>& words, double words_per_second,
    const std::function<void(const v1::TokenDelta&)>& on_delta) {
  grpc::ClientContext context;
  Authorize(options, &context);
  auto stream = stub.Stream(&context);
  const Clock::time_point start = Clock::now();
  v1::StreamRequest first;
  *first.mutable_config() = config;
  // The writer paces the source; this thread reads.
  std::thread writer([&] {
    if (!stream->Write(first)) return;
    const auto gap = words_per_second > 0 ? std::chrono::duration<double>(1.0 / words_per_second)
                                          : std::chrono::duration<double>(0);
    if (words_per_second <= 0 && !words.empty()) {
      v1::StreamRequest chunk;
      for (const std::string& word : words) chunk.mutable_chunk()->add_words(word);
      if (!stream->Write(chunk)) return;
    } else {
      for (size_t i = 0; i < words.size(); ++i) {
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(gap * i));
        v1::StreamRequest chunk;
        chunk.mutable_chunk()->add_words(words[i]);
        if (!stream->Write(chunk)) return;
      }
    }
    v1::StreamRequest end;
    end.mutable_end();
    if (stream->Write(end)) stream->WritesDone();
  });
  SessionTrace trace;
  bool done = false;
  v1::StreamResponse response;
  while (stream->Read(&response)) {
    if (response.has_delta()) {
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      for (int i = 0; i < response.delta().ids_size(); ++i) trace.token_ms.push_back(ms);
      if (trace.first_token_ms < 0 && response.delta().ids_size() > 0) trace.first_token_ms = ms;
      if (on_delta) on_delta(response.delta());
    } else if (response.has_done()) {
      trace.done = response.done();
      done = true;
    }
  }
  const grpc::Status status = stream->Finish();
  writer.join();
  if (!status.ok()) return FromGrpc(status);
  if (!done) return absl::InternalError("the stream ended without a SessionDone");
  return trace;
}

absl::StatusOr<bool> CheckHealth(const ConnectOptions& options, double timeout_seconds) {
  auto channel = Connect(options);
  grpc::ClientContext context;
  Authorize(options, &context);
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  // grpc.health.v1.Health/Check with HealthCheckRequest{service: ""}: an empty message.
  grpc::GenericStub generic(channel);
  grpc::ByteBuffer request, response;
  {
    grpc::Slice empty;
    request = grpc::ByteBuffer(&empty, 1);
  }
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  grpc::Status status;
  generic.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status s) {
                      std::lock_guard<std::mutex> lock(mu);
                      status = std::move(s);
                      finished = true;
                      cv.notify_all();
                    });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return finished; });
  if (!status.ok()) return FromGrpc(status);
  // HealthCheckResponse{status = 1 (field 1, varint)}: SERVING is the bytes 08 01.
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::InternalError("unreadable health response");
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes == std::string("\x08\x01", 2);
}

}  // namespace gpeserve::client
