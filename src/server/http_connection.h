#pragma once
// What the HTTP server and its connections share, on Boost.Asio and
// Boost.Beast: the server's state (HttpServer::Impl) and one connection's
// state machine (Connection). Included by http_server.cc and
// http_connection.cc only; http_server.h keeps the library out of sight.
//
// Each connection is a chain of asynchronous steps on its own strand:
//   wait for a byte (keep-alive timeout) -> read the head (header timeout, size
//   and count limits) -> route, method, key -> read the body (body limit, chunked
//   too) -> the Api on a handler thread -> the reply, or a GenerationJob whose
//   events wake the strand (set_on_ready) and are polled without waiting.
// Requests on one connection are answered one at a time, in order, so
// pipelined requests (already in the read buffer) get their answers in turn.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "server/api.h"
#include "server/http_framing.h"
#include "server/http_server.h"
#include "server/request_log.h"

namespace nanoserve::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

class Connection;

struct HttpServer::Impl {
  Impl(Api& api, HttpOptions options);
  ~Impl();

  void accept();
  void begin_stop();
  void drain(std::chrono::steady_clock::time_point deadline);
  Outcome run(Route route, std::string_view body, std::string_view path);

  Api& api;
  const HttpOptions options;
  const std::optional<CorsPolicy> cors;
  std::atomic<bool> stopping{false};
  std::atomic<int> num_connections{0};
  std::atomic<int> num_large_bodies{0};
  std::mutex mu;  // guards connections and next_id
  std::unordered_map<uint64_t, std::weak_ptr<Connection>> connections;
  uint64_t next_id = 0;
  bool bound = false;

  // Destroyed in reverse: the handler pool (whose tasks hold connections) first, the io_context last.
  asio::io_context ioc;
  tcp::acceptor acceptor;
  asio::steady_timer retry_timer;
  asio::steady_timer drain_timer;
  asio::thread_pool handlers;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpServer::Impl& server, tcp::socket socket, uint64_t id);
  ~Connection();

  void start();
  // Any thread: the server is stopping.
  void shutdown();

 private:
  enum class State { kIdle, kHead, kBody, kHandling, kClosing };

  // A reset or an error on the socket, seen while anything is pending. End of
  // stream is not one: a client may send its request, then shut its write side.
  // A wake is checked against the socket itself before the connection is cut:
  // the reactor can hand a new socket an event of the closed one whose
  // descriptor it reuses (seen as about 1 in 4,000 fresh connections closed
  // unanswered under connection churn), and a wait op does not look at the fd.
  void watch_peer();
  void wait_for_request();
  // While a non-streaming job runs nothing is written or read: this notices a client that
  // leaves (end of stream, then a probe; or a reset), so that its request is aborted.
  void watch_eof();
  void read_head();
  void on_read_error(const error_code& ec);
  void on_head();
  void read_body();

  // The Api runs on a handler thread; its outcome comes back to the strand.
  void dispatch();
  void release_large_body();
  void on_outcome(Outcome outcome);

  // The request's CORS headers (from its Origin), or its preflight answered; true when answered.
  bool handle_cors();
  // The request log line (server/request_log.h) of the request answered with `status`.
  void log_request(int status);

  // Takes what the job has (never waits) and writes it; one write in flight at a time.
  void pump();
  void end_job();
  void send_error(const ApiError& e, const Headers& extra = {});
  void send_reply(const Reply& reply, const Headers& extra = {});
  void flush();
  void end_of_response();

  // Half-closes, then reads and drops what the client still sends for a while, so
  // that closing with unread bytes does not reset the connection under the reply.
  void close_after_linger();
  void linger();
  void on_server_stop();
  void close_now();

  HttpServer::Impl& server_;
  const HttpOptions& opt_;
  const uint64_t id_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  State state_ = State::kIdle;
  Route route_ = Route::kHealth;
  std::string path_;      // the request's target without its query
  Headers cors_headers_;  // added to every response to this request
  RequestRecord record_;  // what the request log line says
  unsigned version_ = 11;
  bool first_request_ = true;
  bool keep_alive_ = true;
  bool head_only_ = false;
  bool chunked_ = true;
  bool stop_requested_ = false;
  bool closed_ = false;
  bool holds_large_body_ = false;
  std::unique_ptr<GenerationJob> job_;
  uint64_t job_generation_ = 0;  // watch_eof's wake belongs to the job it was armed for
  std::shared_ptr<std::atomic<bool>> pump_posted_ = std::make_shared<std::atomic<bool>>(false);
  std::string out_;      // bytes queued, not yet handed to a write
  std::string writing_;  // bytes of the write in flight
  bool write_in_flight_ = false;
  bool response_complete_ = false;  // the reply's last bytes are queued or written
  char discard_[4096];
};

}  // namespace nanoserve::server
