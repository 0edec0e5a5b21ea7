// Conversions between the API (proto/gpeserve/v1) and the engine, in one place: a request's
// SessionConfig into the engine's session configuration (validated against the server's limits),
// engine events into StreamResponses, and statuses into gRPC's.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "gpeserve/v1/gpeserve.pb.h"
#include "grpcpp/support/status.h"
#include "server/service_config.h"

namespace gpeserve::server {

// Same code and message.
grpc::Status ToGrpc(const absl::Status& status);

// A SessionConfig as engine session options with the server's defaults filled in, or
// INVALID_ARGUMENT naming the field. `batch`: Generate (the paradigm is batch whatever the config
// says).
absl::StatusOr<engine::SessionConfig> ToEngineConfig(const v1::SessionConfig& config,
                                                     const ServiceConfig& service, bool batch);

// A kTokens event as a TokenDelta response; the times are the server's wall clock and the time
// since the session opened, in microseconds.
v1::StreamResponse ToDeltaResponse(const engine::SessionEvent& event, int64_t server_time_us,
                                   int64_t session_time_us);

// A kSegment event as a SegmentDone response.
// A kWaiting event as a WaitingForSource response (times as ToDeltaResponse's).
v1::StreamResponse ToWaitingResponse(const engine::SessionEvent& event, int64_t server_time_us,
                                     int64_t session_time_us);
v1::StreamResponse ToSegmentResponse(const engine::SessionEvent& event);

// A kDone event as a SessionDone response; `delays_ms`: per target word, the milliseconds from
// the first source arrival to the word's completion.
v1::StreamResponse ToDoneResponse(const engine::SessionEvent& event,
                                  const std::vector<double>& delays_ms);

}  // namespace gpeserve::server
