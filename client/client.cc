#include "client/client.h"

#include <algorithm>
#include <atomic>
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

absl::StatusOr<SessionTrace> RunSession(v1::Gpeserve::Stub& stub, const ConnectOptions& options,
                                        const v1::SessionConfig& config,
                                        const std::vector<std::string>& words,
                                        double words_per_second,
                                        const std::function<void(const v1::TokenDelta&)>& on_delta,
                                        const LongFormStream* long_form,
                                        const ResponseCallback& on_response) {
  // Chunk boundaries: after every word when paced; otherwise only where the client cuts.
  std::vector<size_t> cuts;
  size_t next_cut = 0;
  if (long_form != nullptr) cuts = long_form->boundaries;
  std::atomic<int64_t> words_sent{0};
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
    // A chunk of words [from, to), with a boundary when the client cuts there.
    auto send = [&](size_t from, size_t to) {
      v1::StreamRequest chunk;
      for (size_t i = from; i < to; ++i) chunk.mutable_chunk()->add_words(words[i]);
      while (next_cut < cuts.size() && cuts[next_cut] < to) ++next_cut;
      if (next_cut < cuts.size() && cuts[next_cut] == to) {
        chunk.mutable_chunk()->set_boundary(true);
        ++next_cut;
      }
      words_sent = static_cast<int64_t>(to);  // before the write: a response may beat its return
      return stream->Write(chunk);
    };
    if (words_per_second <= 0) {
      // At once, in chunks of at most 500 words (the server's max_chunk_words is 1000).
      size_t from = 0;
      for (size_t cut = 0; from < words.size();) {
        while (cut < cuts.size() && cuts[cut] <= from) ++cut;
        size_t to = std::min(words.size(), from + 500);
        if (cut < cuts.size()) to = std::min(to, cuts[cut]);
        if (!send(from, to)) return;
        from = to;
      }
    } else {
      for (size_t i = 0; i < words.size(); ++i) {
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(gap * i));
        if (!send(i, i + 1)) return;
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
    if (on_response) {
      on_response({.response = response,
                   .words_sent = words_sent.load(),
                   .client_time_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count(),
                   .client_elapsed_ms =
                       std::chrono::duration<double, std::milli>(Clock::now() - start).count()});
    }
    if (response.has_delta()) {
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      if (long_form == nullptr) {
        for (int i = 0; i < response.delta().ids_size(); ++i) trace.token_ms.push_back(ms);
      }
      if (trace.first_token_ms < 0 && response.delta().ids_size() > 0) trace.first_token_ms = ms;
      if (on_delta) on_delta(response.delta());
    } else if (response.has_segment()) {
      if (long_form != nullptr && long_form->on_segment) long_form->on_segment(response.segment());
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
