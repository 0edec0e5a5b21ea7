// gpe-client's --log FILE.jsonl: one JSON line per response of every session, with the source the
// client had sent by then and the server's and the client's clocks, for computation-aware
// evaluation (`gpe score --latency FILE.jsonl` reads it; docs/server.md has the line format).
//
// Thread-safety: thread-safe (the sessions of gpe-client eval write from their own threads).
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"

namespace gpeserve::client {

class ResponseLog {
 public:
  // Creates (truncates) `path`.
  static absl::StatusOr<std::unique_ptr<ResponseLog>> Open(const std::string& path);

  // A session's first line: its source, pace and source unit.
  void Start(int64_t session, const std::vector<std::string>& words, double words_per_second,
             const v1::SessionConfig& config);
  // One response of the session.
  void Response(int64_t session, const ResponseSeen& seen);
  // The session failed with `status` (its last line).
  void Error(int64_t session, const absl::Status& status);

 private:
  explicit ResponseLog(std::ofstream out) : out_(std::move(out)) {}
  void Write(const std::string& line);

  std::mutex mu_;
  std::ofstream out_;
};

}  // namespace gpeserve::client
