// One connection's chain of asynchronous steps (http_connection.h), on its strand.

#include "server/http_connection.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>

namespace nanoserve::server {

namespace {

using std::chrono::milliseconds;

constexpr int kLingerMs = 2000;                 // after a closing reply: reading what the client still sends
constexpr size_t kReadChunk = 16384;            // bytes asked for by one read
constexpr uint64_t kLargeBodyBytes = 64 << 10;  // bodies above (or chunked) count against max_large_bodies
constexpr size_t kMaxLoggedPath = 256;          // a longer path is cut in the request log

std::string_view sv(beast::string_view s) {
  return {s.data(), s.size()};
}

std::string_view reason_of(int status) {
  return sv(http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status))));
}

// Whether the socket has really failed: a pending error, a hang-up (both
// directions shut, or a reset) or urgent data (which nothing here reads, so its
// wake would repeat). A half-close by the client is none of these.
bool peer_failed(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) return true;
  pollfd p{fd, POLLPRI, 0};
  if (poll(&p, 1, 0) < 0) return true;
  return (p.revents & (POLLERR | POLLHUP | POLLNVAL | POLLPRI)) != 0;
}

bool is_http_parse_error(const error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_method).category();
}

ApiError http_error(int status, std::string message, std::string code) {
  return ApiError{status, std::move(message), "invalid_request_error", {}, std::move(code)};
}

}  // namespace

Connection::Connection(HttpServer::Impl& server, tcp::socket socket, uint64_t id)
    : server_(server), opt_(server.options), id_(id), stream_(std::move(socket)) {
  server_.num_connections.fetch_add(1);
}

Connection::~Connection() {
  release_large_body();
  server_.num_connections.fetch_sub(1);
  std::lock_guard<std::mutex> lock(server_.mu);
  server_.connections.erase(id_);
}

void Connection::start() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] {
    self->watch_peer();
    self->wait_for_request();
  });
}

void Connection::shutdown() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] { self->on_server_stop(); });
}

void Connection::watch_peer() {
  stream_.socket().async_wait(tcp::socket::wait_error, [self = shared_from_this()](error_code ec) {
    if (ec == asio::error::operation_aborted || self->closed_) return;
    if (peer_failed(self->stream_.socket().native_handle())) return self->close_now();
    self->watch_peer();
  });
}

void Connection::watch_eof() {
  stream_.socket().async_wait(
      tcp::socket::wait_read, [self = shared_from_this(), generation = job_generation_](error_code ec) {
        if (ec || self->closed_ || !self->job_ || self->job_generation_ != generation) return;
        char byte;
        const ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n > 0) return;  // the next pipelined request: left in the socket for the reader
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return self->watch_eof();
        if (n < 0) return self->close_now();  // a reset: the client is gone
        // End of stream: a half-close (the client still reads) or a client that left. Only a
        // write tells them apart: an interim 100 Continue, which every HTTP/1.1 client must
        // accept before the final response; a socket closed for good answers it with a reset,
        // which watch_peer sees. HTTP/1.0 has no interim responses: there it stays a half-close.
        if (self->version_ == 11 && !self->write_in_flight_) {
          self->out_.append(kContinue.data(), kContinue.size());
          self->flush();
        }
      });
}

void Connection::wait_for_request() {
  if (closed_) return;
  state_ = State::kIdle;
  if (stop_requested_) return close_now();
  parser_.emplace();
  cors_headers_.clear();
  record_ = RequestRecord{};
  parser_->header_limit(static_cast<std::uint32_t>(opt_.max_header_bytes));
  parser_->body_limit(static_cast<std::uint64_t>(opt_.max_body_bytes));
  head_only_ = false;
  if (buffer_.size() > 0) return read_head();  // pipelined: the next request is already here
  stream_.expires_after(milliseconds(first_request_ ? opt_.header_timeout_ms : opt_.keep_alive_timeout_ms));
  stream_.async_read_some(buffer_.prepare(kReadChunk), [self = shared_from_this()](error_code ec, size_t n) {
    self->buffer_.commit(n);
    if (self->closed_) return;
    if (ec) return self->close_now();  // idle too long, or the client left between requests
    self->read_head();
  });
}

void Connection::read_head() {
  state_ = State::kHead;
  stream_.expires_after(milliseconds(opt_.header_timeout_ms));
  http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
    if (self->closed_) return;
    self->stream_.expires_never();
    if (ec) return self->on_read_error(ec);
    self->on_head();
  });
}

void Connection::on_read_error(const error_code& ec) {
  if (ec == http::error::header_limit) {
    // The parser consumes the request line and each whole header line as it goes. With the
    // request line parsed, its target is known; else the line is what the buffer starts with.
    // Only a target beyond its own limit is a 414; a long header line is a 431.
    size_t target_bytes = parser_->get().target().size();
    if (target_bytes == 0) {
      std::string_view data(static_cast<const char*>(buffer_.data().data()), buffer_.size());
      size_t eol = data.find('\n');
      target_bytes = eol == std::string_view::npos ? data.size() : eol;
    }
    if (target_bytes > opt_.max_target_bytes) {
      return send_error(http_error(
          414, "Request target is longer than " + std::to_string(opt_.max_target_bytes) + " bytes.",
          "uri_too_long"));
    }
    return send_error(http_error(
        431,
        "Request header fields are larger than " + std::to_string(opt_.max_header_bytes) + " bytes in all.",
        "header_too_large"));
  }
  if (ec == http::error::body_limit) return send_error(payload_too_large(opt_.max_body_bytes));
  if (ec == http::error::end_of_stream || ec == http::error::partial_message || !is_http_parse_error(ec)) {
    return close_now();  // timeout, reset, or the client left mid-request: no one to answer
  }
  send_error(bad_request("Malformed HTTP request: " + ec.message() + "."));
}

void Connection::on_head() {
  first_request_ = false;
  const auto& req = parser_->get();
  keep_alive_ = req.keep_alive();
  version_ = req.version();
  if (version_ != 10 && version_ != 11) {
    return send_error(http_error(505, "Only HTTP/1.0 and HTTP/1.1 are served.", "http_version"));
  }
  int n_headers = 0;
  for (const auto& field : req) {
    ++n_headers;
    if (field.name_string().size() + field.value().size() + 4 > opt_.max_header_line_bytes) {
      return send_error(http_error(431,
                                   "Header '" + quote_excerpt(std::string(sv(field.name_string()))) +
                                       "' is longer than " + std::to_string(opt_.max_header_line_bytes) +
                                       " bytes.",
                                   "header_too_large"));
    }
  }
  if (n_headers > opt_.max_headers) {
    return send_error(http_error(431, "More than " + std::to_string(opt_.max_headers) + " header lines.",
                                 "too_many_headers"));
  }
  std::string_view target = sv(req.target());
  if (target.size() > opt_.max_target_bytes) {
    return send_error(
        http_error(414, "Request target is longer than " + std::to_string(opt_.max_target_bytes) + " bytes.",
                   "uri_too_long"));
  }
  if (req.method() == http::verb::unknown) {
    return send_error(http_error(
        501, "Method '" + quote_excerpt(std::string(sv(req.method_string()))) + "' is not implemented.",
        "method_not_implemented"));
  }
  const std::string_view method = sv(req.method_string());
  path_ = std::string(target.substr(0, target.find('?')));
  record_.active = true;
  record_.start = RequestRecord::Clock::now();
  record_.method = std::string(method);
  record_.path = path_.size() <= kMaxLoggedPath ? path_ : path_.substr(0, kMaxLoggedPath) + "...";
  // A preflight is answered before routing and without the key, as vLLM's middleware does.
  if (handle_cors()) return;
  // Unknown paths are 404 before any key check; only known protected routes say 401.
  const RouteSpec* route = find_route(path_);
  if (route == nullptr) return send_error(from_http_status(404));
  switch (route->route) {
    case Route::kTokenize:
    case Route::kDetokenize:
    case Route::kChat:
    case Route::kCompletion:
    case Route::kMessages:
    case Route::kResponses: record_.api_endpoint = true; break;
    case Route::kHealth: record_.probe = true; break;
    default: break;
  }
  head_only_ = method == "HEAD" && route->method == "GET";
  if (method != route->method && !head_only_) {
    std::string allow = route->method == "GET" ? "GET, HEAD" : std::string(route->method);
    return send_error(http_error(405,
                                 "Method " + std::string(method) + " is not allowed on " +
                                     std::string(route->path) + "; allowed: " + allow + ".",
                                 "method_not_allowed"),
                      {{"Allow", allow}});
  }
  if (server_.api.needs_auth(route->route)) {
    auto [first, last] = req.equal_range(http::field::authorization);
    // Exactly one Authorization header, its bytes as received.
    const bool one = first != last && std::next(first) == last;
    auto [kfirst, klast] = req.equal_range("x-api-key");
    const bool one_key = kfirst != klast && std::next(kfirst) == klast;
    const bool ok = (one && server_.api.authorized(sv(first->value()))) ||
                    (first == last && one_key && server_.api.key_authorized(sv(kfirst->value())));
    if (!ok) {
      if (route->route == Route::kMessages) {
        keep_alive_ = keep_alive_ && parser_->is_done();
        return send_reply(Reply{401, anthropic_error_body(unauthorized())}, {{"WWW-Authenticate", "Bearer"}});
      }
      return send_error(unauthorized(), {{"WWW-Authenticate", "Bearer"}});
    }
  }
  route_ = route->route;
  if (parser_->is_done()) return dispatch();
  const auto length = parser_->content_length();
  if (!length || *length > kLargeBodyBytes) {
    if (server_.num_large_bodies.fetch_add(1) >= opt_.max_large_bodies) {
      server_.num_large_bodies.fetch_sub(1);
      return send_error(
          ApiError{503,
                   "The server is receiving too many large request bodies at once. Retry later.",
                   "service_unavailable",
                   {},
                   "too_many_large_bodies"});
    }
    holds_large_body_ = true;
  }
  if (version_ == 11 && beast::iequals(req[http::field::expect], "100-continue")) {
    stream_.expires_after(milliseconds(opt_.write_timeout_ms));
    asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                      [self = shared_from_this()](error_code ec, size_t) {
                        if (self->closed_) return;
                        if (ec) return self->close_now();
                        self->read_body();
                      });
    return;
  }
  read_body();
}

void Connection::read_body() {
  state_ = State::kBody;
  stream_.expires_after(milliseconds(opt_.body_timeout_ms));
  http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
    if (self->closed_) return;
    self->stream_.expires_never();
    if (ec) return self->on_read_error(ec);
    self->dispatch();
  });
}

void Connection::dispatch() {
  state_ = State::kHandling;
  std::string body = std::move(parser_->get().body());
  parser_.reset();
  asio::post(server_.handlers, [self = shared_from_this(), route = route_, body = std::move(body),
                                path = path_, guard = asio::make_work_guard(server_.ioc)]() mutable {
    Outcome outcome = self->server_.run(route, body, path);
    asio::post(self->stream_.get_executor(),
               [self, outcome = std::move(outcome), guard = std::move(guard)]() mutable {
                 self->on_outcome(std::move(outcome));
               });
  });
}

bool Connection::handle_cors() {
  if (!server_.cors) return false;
  const auto& req = parser_->get();
  const auto origin = req.find(http::field::origin);
  const auto method = req.find(http::field::access_control_request_method);
  if (origin != req.end() && req.method() == http::verb::options && method != req.end()) {
    const auto asked = req.find(http::field::access_control_request_headers);
    std::optional<std::string_view> headers;
    if (asked != req.end()) headers = sv(asked->value());
    const bool private_network = req.find("Access-Control-Request-Private-Network") != req.end();
    CorsPolicy::Preflight p =
        server_.cors->preflight(sv(origin->value()), sv(method->value()), headers, private_network);
    keep_alive_ = keep_alive_ && parser_->is_done();
    send_reply(Reply{p.status, std::move(p.body), "text/plain; charset=utf-8"}, p.headers);
    return true;
  }
  std::optional<std::string_view> o;
  if (origin != req.end()) o = sv(origin->value());
  cors_headers_ = server_.cors->response_headers(o);
  return false;
}

void Connection::log_request(int status) {
  if (!server_.options.log_requests) return;
  if (!record_.active && status < 400) return;  // nothing of this request was read: not one to log
  log_request_line(record_, status, RequestRecord::Clock::now());
  record_.active = false;
}

void Connection::release_large_body() {
  if (holds_large_body_) server_.num_large_bodies.fetch_sub(1);
  holds_large_body_ = false;
}

void Connection::on_outcome(Outcome outcome) {
  release_large_body();  // the body's bytes are gone (parsed or refused)
  if (closed_) return;   // a job dropped here aborts its choices
  if (auto* reply = std::get_if<Reply>(&outcome)) return send_reply(*reply);
  job_ = std::move(std::get<std::unique_ptr<GenerationJob>>(outcome));
  ++job_generation_;
  if (!job_->streaming()) watch_eof();
  if (job_->streaming()) {
    chunked_ = version_ == 11;  // HTTP/1.0 has no chunks: the stream ends with the connection
    if (!chunked_) keep_alive_ = false;
    keep_alive_ = keep_alive_ && !server_.stopping.load();
    Headers extra{{"Cache-Control", "no-cache"}};
    extra.insert(extra.end(), cors_headers_.begin(), cors_headers_.end());
    out_ += response_head(200, reason_of(200), "text/event-stream",
                          chunked_ ? Framing::kChunked : Framing::kClose, 0, keep_alive_, extra);
  }
  // Engine thread: cheap and non-blocking. One wake-up is in flight at a time.
  std::weak_ptr<Connection> weak = shared_from_this();
  auto executor = stream_.get_executor();
  auto posted = pump_posted_;
  job_->set_on_ready([weak, executor, posted] {
    if (posted->exchange(true)) return;
    asio::post(executor, [weak] {
      if (auto self = weak.lock()) self->pump();
    });
  });
  pump();
}

void Connection::pump() {
  pump_posted_->store(false);
  if (closed_ || !job_ || write_in_flight_) return;
  std::string sse;
  const bool done = job_->poll(&sse, milliseconds(0));
  if (!record_.first_token && job_->completion_tokens() > 0)
    record_.first_token = RequestRecord::Clock::now();
  if (done) {
    record_.id = job_->request_id();
    record_.prompt_tokens = job_->prompt_tokens();
    record_.output_tokens = job_->completion_tokens();
  }
  if (job_->streaming()) {
    if (!sse.empty()) out_ += chunked_ ? chunk_frame(sse) : sse;
    if (done) {
      if (chunked_) out_ += kLastChunk;
      end_job();
      log_request(200);
    }
    return flush();
  }
  if (!done) return;
  Reply reply{job_->final_status(), job_->final_body()};
  end_job();
  send_reply(reply);
}

void Connection::end_job() {
  job_->set_on_ready({});
  job_.reset();
  response_complete_ = true;
}

void Connection::send_error(const ApiError& e, const Headers& extra) {
  // A body not read (or not readable) leaves the connection out of step: close it after the reply.
  if (!parser_ || !parser_->is_done()) keep_alive_ = false;
  send_reply(Api::error_reply(e), extra);
}

void Connection::send_reply(const Reply& reply, const Headers& extra) {
  state_ = State::kHandling;
  keep_alive_ = keep_alive_ && !server_.stopping.load() && !stop_requested_;
  const Headers* headers = &extra;
  Headers with_cors;
  if (!cors_headers_.empty()) {
    with_cors = extra;
    with_cors.insert(with_cors.end(), cors_headers_.begin(), cors_headers_.end());
    headers = &with_cors;
  }
  out_ += response_head(reply.status, reason_of(reply.status), reply.content_type, Framing::kLength,
                        reply.body.size(), keep_alive_, *headers);
  log_request(reply.status);
  if (!head_only_) out_ += reply.body;
  response_complete_ = true;
  flush();
}

void Connection::flush() {
  if (closed_ || write_in_flight_) return;
  if (out_.empty()) {
    if (response_complete_ && !job_) end_of_response();
    return;
  }
  writing_.swap(out_);
  out_.clear();
  write_in_flight_ = true;
  stream_.expires_after(milliseconds(opt_.write_timeout_ms));
  asio::async_write(stream_, asio::buffer(writing_), [self = shared_from_this()](error_code ec, size_t) {
    self->write_in_flight_ = false;
    self->writing_.clear();
    if (self->closed_) return;
    self->stream_.expires_never();
    if (ec) return self->close_now();  // the client is gone: close_now aborts the job
    if (self->job_) return self->pump();
    self->flush();
  });
}

void Connection::end_of_response() {
  response_complete_ = false;
  if (keep_alive_ && !stop_requested_) return wait_for_request();
  close_after_linger();
}

void Connection::close_after_linger() {
  state_ = State::kClosing;
  error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream_.expires_after(milliseconds(kLingerMs));
  linger();
}

void Connection::linger() {
  stream_.async_read_some(asio::buffer(discard_), [self = shared_from_this()](error_code ec, size_t) {
    if (self->closed_) return;
    if (ec) return self->close_now();
    self->linger();
  });
}

void Connection::on_server_stop() {
  stop_requested_ = true;
  if (state_ == State::kIdle || state_ == State::kHead || state_ == State::kBody) close_now();
}

void Connection::close_now() {
  if (closed_) return;
  closed_ = true;
  if (record_.active && state_ == State::kHandling) {
    if (job_) {
      record_.id = job_->request_id();
      record_.prompt_tokens = job_->prompt_tokens();
      record_.output_tokens = job_->completion_tokens();
    }
    log_request(kClientClosedStatus);
  }
  if (state_ != State::kHandling) release_large_body();  // else the handler still holds the body
  if (job_) {
    job_->set_on_ready({});
    job_.reset();  // aborts what is unfinished
  }
  error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
}

}  // namespace nanoserve::server
