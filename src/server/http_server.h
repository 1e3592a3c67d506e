#pragma once
// HTTP transport for the Api, on cpp-httplib. This header keeps httplib out of
// sight: only http_server.cc includes it.

#include <cstddef>
#include <memory>
#include <string>

#include "core/status.h"
#include "server/api.h"

namespace nanoserve::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (bind() returns it)
  // One thread per open connection (streams hold theirs until done), so this caps concurrent clients.
  int num_threads = 128;
  size_t max_body_bytes = size_t{4} << 20;  // larger bodies get 413
  // How often a waiting request checks that its client is still connected.
  int liveness_poll_ms = 10;
};

class HttpServer {
 public:
  HttpServer(Api& api, HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port.
  StatusOr<int> bind();
  // Serves until stop(); returns at once if bind() did not succeed.
  void serve();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nanoserve::server
