// A small client library over the gpeserve API: channels with the server's TLS and token
// options, and one live session driven at a given pace.
//
// Thread-safety: functions are thread-safe; a Stub may be shared.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpeserve/v1/gpeserve.grpc.pb.h"
#include "grpcpp/channel.h"

namespace gpeserve::client {

struct ConnectOptions {
  std::string server = "127.0.0.1:50051";
  std::string auth_token;       // sent as "authorization: Bearer <token>" when non-empty
  std::string tls_ca;           // PEM root certificates: TLS when non-empty
  std::string tls_server_name;  // override of the name checked in the certificate
};

std::shared_ptr<grpc::Channel> Connect(const ConnectOptions& options);
// Adds the token to a call.
void Authorize(const ConnectOptions& options, grpc::ClientContext* context);
absl::Status FromGrpc(const grpc::Status& status);

struct SessionTrace {
  v1::SessionDone done;
  double first_token_ms = -1;    // from the config's send to the first token
  std::vector<double> token_ms;  // arrival of each token, from the config's send
};

// What a long-form session adds to RunSession: where the client cuts the stream, and a
// callback for each finished segment.
struct LongFormStream {
  // Word counts after which a boundary goes (SourceChunk.boundary on the chunk that ends
  // there), ascending.
  std::vector<size_t> boundaries;
  std::function<void(const v1::SegmentDone&)> on_segment;  // on the calling thread
};

// Every response as it arrives, with the source words the client had sent by then and the
// client's time (Unix microseconds, and milliseconds since the config was sent).
struct ResponseSeen {
  const v1::StreamResponse& response;
  int64_t words_sent = 0;
  int64_t client_time_us = 0;
  double client_elapsed_ms = 0;
};
using ResponseCallback = std::function<void(const ResponseSeen&)>;

// Runs one live session: sends `config`, then `words` (one chunk per word, `words_per_second`
// apart; 0: all at once), then EndOfSource. `on_delta` sees every TokenDelta as it arrives (on
// the calling thread), `on_response` every response. Returns the SessionDone, or the call's
// status. Token times are kept only for sessions that are not long-form (`long_form` null).
absl::StatusOr<SessionTrace> RunSession(
    v1::Gpeserve::Stub& stub, const ConnectOptions& options, const v1::SessionConfig& config,
    const std::vector<std::string>& words, double words_per_second,
    const std::function<void(const v1::TokenDelta&)>& on_delta = nullptr,
    const LongFormStream* long_form = nullptr, const ResponseCallback& on_response = nullptr);

// grpc.health.v1 status of the server ("" service): true when SERVING.
absl::StatusOr<bool> CheckHealth(const ConnectOptions& options, double timeout_seconds);

}  // namespace gpeserve::client
