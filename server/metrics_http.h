// The HTTP side of /metrics: a small HTTP/1.0 loop of our own (one thread, one request per
// connection, GET /metrics only) rather than prometheus-cpp's civetweb exposer: civetweb's worker
// threads have a fixed small stack that cannot hold the static TLS of libtorch's dependencies,
// so it fails to start in this process ("Cannot create first worker thread").
//
// Thread-safety: constructed and destroyed by one thread; `render` is called on the loop's
// thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace gpeserve::server {

class MetricsHttpServer {
 public:
  // Listens on `address` (IPv4 host:port; port 0 picks one) and answers GET /metrics with
  // render()'s text (other paths: 404, other methods: 405). Errors: a bad address
  // (InvalidArgument), the port in use (Unavailable).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address, std::function<std::string()> render);
  // Stops the loop (within 100 ms) and closes the socket.
  ~MetricsHttpServer();

  int port() const { return port_; }

 private:
  MetricsHttpServer(int fd, int port, std::function<std::string()> render);
  void Loop();
  // Reads one request from `client`, answers it and closes the connection.
  void Answer(int client);

  const int listen_fd_;
  const int port_;
  const std::function<std::string()> render_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace gpeserve::server
