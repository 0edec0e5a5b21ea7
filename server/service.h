// The gRPC service (proto/gpeserve/v1/gpeserve.proto) on top of the engine: one callback
// reactor per call, never blocking in a reaction, one read and one write in flight. Engine
// events are queued per session (bounded: a client that stops reading gets its session
// cancelled with RESOURCE_EXHAUSTED; the engine never waits for it) and drained into writes.
//
// Thread-safety: the service is used by gRPC's threads and the engine's loop thread; its
// public methods are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "engine/engine.h"
#include "gpeserve/v1/gpeserve.grpc.pb.h"
#include "server/metrics.h"
#include "server/service_config.h"

namespace gpeserve::server {

class Service final : public gpeserve::v1::Gpeserve::CallbackService {
 public:
  Service(std::shared_ptr<engine::Engine> engine, Metrics* metrics, ServiceConfig config);
  ~Service() override;

  grpc::ServerBidiReactor<v1::StreamRequest, v1::StreamResponse>* Stream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerWriteReactor<v1::StreamResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;

  // New sessions are refused with UNAVAILABLE from now on; running ones go on.
  void StopAccepting();
  // Ends every running session early with `status` (e.g. UNAVAILABLE when the server drains);
  // each one's message says how many source units it left unread.
  void AbortAll(const absl::Status& status);
  // Calls whose reactor has not finished yet.
  int64_t active_calls() const;

  // UNAUTHENTICATED unless the call carries the token (when one is configured).
  grpc::Status Authenticate(const grpc::CallbackServerContext& context) const;

  // Call bookkeeping for reactors (internal).
  struct CallRegistry;
  std::shared_ptr<CallRegistry> registry() const { return registry_; }
  const ServiceConfig& config() const { return config_; }
  engine::Engine& engine() const { return *engine_; }
  Metrics* metrics() const { return metrics_; }
  bool accepting() const { return accepting_.load(); }

 private:
  std::shared_ptr<engine::Engine> engine_;
  Metrics* metrics_;
  ServiceConfig config_;
  std::atomic<bool> accepting_{true};
  std::shared_ptr<CallRegistry> registry_;
};

// Text chunks may cut a UTF-8 character: appends `text` to *carry (the incomplete character the
// previous chunk ended with) and returns what ends on a character boundary, leaving a trailing
// incomplete character (at most 3 bytes) in *carry. InvalidArgument when the bytes are not
// UTF-8 (an incomplete character that cannot be completed counts as not UTF-8).
absl::StatusOr<std::string> TakeWholeCharacters(std::string_view text, std::string* carry);

}  // namespace gpeserve::server
