#pragma once
// HTTP/1.1 transport for the Api, on Boost.Beast (parsing) and Boost.Asio
// (sockets). Event-driven: a few I/O threads serve every connection, so an
// open stream or an idle keep-alive connection costs memory, not a thread.
// This header keeps the library out of sight: only http_server.cc and
// http_connection.cc (through http_connection.h) include it.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "server/api.h"
#include "server/cors.h"

namespace nanoserve::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (bind() returns it)
  // I/O threads: they read requests and write responses, never block.
  int num_threads = 4;
  // Handler threads: the Api's endpoints (JSON parse, tokenization, the parse
  // budget's wait) run here, so a large body never stalls the I/O threads.
  int num_handler_threads = 4;
  size_t max_body_bytes = size_t{4} << 20;         // larger bodies (chunked too) get 413
  size_t max_header_bytes = size_t{16} << 10;      // request line + header lines: beyond, 431
  size_t max_header_line_bytes = size_t{8} << 10;  // one header line: beyond, 431
  size_t max_target_bytes = size_t{8} << 10;       // the request target: beyond, 414
  int max_headers = 100;                           // header lines: beyond, 431
  int max_connections = 8192;                      // open connections; more are closed at once
  // Bodies over 64 KiB (or chunked) received or handled at once; more get 503 + Retry-After.
  // Bounds the memory of bodies in flight (about 7 MiB resident per 4 MiB body) to about 450 MiB.
  int max_large_bodies = 64;
  // A request head must arrive whole within this of its first byte (or of the connect).
  int header_timeout_ms = 10000;
  int keep_alive_timeout_ms = 5000;  // an idle connection between requests is closed after this
  int body_timeout_ms = 60000;       // the body must arrive within this of the head
  int write_timeout_ms = 60000;      // a client that reads nothing for this long is gone
  // At stop(): how long in-flight responses get to finish before connections are cut.
  int shutdown_grace_ms = 5000;
  // Cross-origin requests (server/cors.h); nullopt: no CORS headers and no preflight answers.
  // serve always sets it, to vLLM's defaults unless its flags say otherwise.
  std::optional<CorsOptions> cors;
  // One log line per request (serve's default; --disable-log-requests turns it off).
  bool log_requests = false;
};

class HttpServer {
 public:
  HttpServer(Api& api, HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket (SO_REUSEADDR, never SO_REUSEPORT: a busy port
  // is an error naming host:port); returns the port.
  StatusOr<int> bind();
  // Serves until stop() and the drain that follows; returns at once if bind()
  // did not succeed or stop() came first.
  void serve();
  // Thread-safe, idempotent, valid before serve(): stops accepting, closes idle
  // connections and lets in-flight responses finish (shutdown_grace_ms at most).
  void stop();

  struct Impl;  // defined in http_connection.h, with the connections it serves

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nanoserve::server
