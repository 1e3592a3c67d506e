// The one translation unit that includes Boost.Beast and Boost.Asio.
//
// Each connection is a chain of asynchronous steps on its own strand:
//   wait for a byte (keep-alive timeout) -> read the head (header timeout, size
//   and count limits) -> route, method, key -> read the body (body limit, chunked
//   too) -> the Api on a handler thread -> the reply, or a GenerationJob whose
//   events wake the strand (set_on_ready) and are polled without waiting.
// Requests on one connection are answered one at a time, in order, so
// pipelined requests (already in the read buffer) get their answers in turn.

#include "server/http_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>

#include "core/logging.h"
#include "server/http_framing.h"

namespace nanoserve::server {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using std::chrono::milliseconds;

constexpr int kLingerMs = 2000;                 // after a closing reply: reading what the client still sends
constexpr size_t kReadChunk = 16384;            // bytes asked for by one read
constexpr uint64_t kLargeBodyBytes = 64 << 10;  // bodies above (or chunked) count against max_large_bodies

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

class Connection;

struct HttpServer::Impl {
  Impl(Api& api, HttpOptions options)
      : api(api),
        options(std::move(options)),
        ioc(std::max(1, this->options.num_threads)),
        acceptor(ioc),
        retry_timer(ioc),
        drain_timer(ioc),
        handlers(static_cast<size_t>(std::max(1, this->options.num_handler_threads))) {}
  ~Impl() {
    handlers.stop();
    handlers.join();
  }

  void accept();
  void begin_stop();
  void drain(std::chrono::steady_clock::time_point deadline);
  Outcome run(Route route, std::string_view body);

  Api& api;
  const HttpOptions options;
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
  Connection(HttpServer::Impl& server, tcp::socket socket, uint64_t id)
      : server_(server), opt_(server.options), id_(id), stream_(std::move(socket)) {
    server_.num_connections.fetch_add(1);
  }
  ~Connection() {
    release_large_body();
    server_.num_connections.fetch_sub(1);
    std::lock_guard<std::mutex> lock(server_.mu);
    server_.connections.erase(id_);
  }

  void start() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      self->watch_peer();
      self->wait_for_request();
    });
  }
  // Any thread: the server is stopping.
  void shutdown() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] { self->on_server_stop(); });
  }

 private:
  enum class State { kIdle, kHead, kBody, kHandling, kClosing };

  // A reset or an error on the socket, seen while anything is pending. End of
  // stream is not one: a client may send its request, then shut its write side.
  // A wake is checked against the socket itself before the connection is cut:
  // the reactor can hand a new socket an event of the closed one whose
  // descriptor it reuses (seen as about 1 in 4,000 fresh connections closed
  // unanswered under connection churn), and a wait op does not look at the fd.
  void watch_peer() {
    stream_.socket().async_wait(tcp::socket::wait_error, [self = shared_from_this()](error_code ec) {
      if (ec == asio::error::operation_aborted || self->closed_) return;
      if (peer_failed(self->stream_.socket().native_handle())) return self->close_now();
      self->watch_peer();
    });
  }

  void wait_for_request() {
    if (closed_) return;
    state_ = State::kIdle;
    if (stop_requested_) return close_now();
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(opt_.max_header_bytes));
    parser_->body_limit(static_cast<std::uint64_t>(opt_.max_body_bytes));
    head_only_ = false;
    if (buffer_.size() > 0) return read_head();  // pipelined: the next request is already here
    stream_.expires_after(milliseconds(first_request_ ? opt_.header_timeout_ms : opt_.keep_alive_timeout_ms));
    stream_.async_read_some(
        buffer_.prepare(kReadChunk), [self = shared_from_this()](error_code ec, size_t n) {
          self->buffer_.commit(n);
          if (self->closed_) return;
          if (ec) return self->close_now();  // idle too long, or the client left between requests
          self->read_head();
        });
  }

  void read_head() {
    state_ = State::kHead;
    stream_.expires_after(milliseconds(opt_.header_timeout_ms));
    http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
      if (self->closed_) return;
      self->stream_.expires_never();
      if (ec) return self->on_read_error(ec);
      self->on_head();
    });
  }

  void on_read_error(const error_code& ec) {
    if (ec == http::error::header_limit) {
      // Nothing of the head was consumed: a request line longer than the target limit is a 414.
      std::string_view data(static_cast<const char*>(buffer_.data().data()), buffer_.size());
      size_t eol = data.find('\n');
      if ((eol == std::string_view::npos ? data.size() : eol) > opt_.max_target_bytes) {
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

  void on_head() {
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
      return send_error(http_error(
          414, "Request target is longer than " + std::to_string(opt_.max_target_bytes) + " bytes.",
          "uri_too_long"));
    }
    if (req.method() == http::verb::unknown) {
      return send_error(http_error(
          501, "Method '" + quote_excerpt(std::string(sv(req.method_string()))) + "' is not implemented.",
          "method_not_implemented"));
    }
    // Unknown paths are 404 before any key check; only known protected routes say 401.
    const RouteSpec* route = find_route(target.substr(0, target.find('?')));
    if (route == nullptr) return send_error(from_http_status(404));
    const std::string_view method = sv(req.method_string());
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
      if (!one || !server_.api.authorized(sv(first->value()))) {
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

  void read_body() {
    state_ = State::kBody;
    stream_.expires_after(milliseconds(opt_.body_timeout_ms));
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
      if (self->closed_) return;
      self->stream_.expires_never();
      if (ec) return self->on_read_error(ec);
      self->dispatch();
    });
  }

  // The Api runs on a handler thread; its outcome comes back to the strand.
  void dispatch() {
    state_ = State::kHandling;
    std::string body = std::move(parser_->get().body());
    parser_.reset();
    asio::post(server_.handlers, [self = shared_from_this(), route = route_, body = std::move(body),
                                  guard = asio::make_work_guard(server_.ioc)]() mutable {
      Outcome outcome = self->server_.run(route, body);
      asio::post(self->stream_.get_executor(),
                 [self, outcome = std::move(outcome), guard = std::move(guard)]() mutable {
                   self->on_outcome(std::move(outcome));
                 });
    });
  }

  void release_large_body() {
    if (holds_large_body_) server_.num_large_bodies.fetch_sub(1);
    holds_large_body_ = false;
  }

  void on_outcome(Outcome outcome) {
    release_large_body();  // the body's bytes are gone (parsed or refused)
    if (closed_) return;   // a job dropped here aborts its choices
    if (auto* reply = std::get_if<Reply>(&outcome)) return send_reply(*reply);
    job_ = std::move(std::get<std::unique_ptr<GenerationJob>>(outcome));
    if (job_->streaming()) {
      chunked_ = version_ == 11;  // HTTP/1.0 has no chunks: the stream ends with the connection
      if (!chunked_) keep_alive_ = false;
      keep_alive_ = keep_alive_ && !server_.stopping.load();
      out_ += response_head(200, reason_of(200), "text/event-stream",
                            chunked_ ? Framing::kChunked : Framing::kClose, 0, keep_alive_,
                            {{"Cache-Control", "no-cache"}});
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

  // Takes what the job has (never waits) and writes it; one write in flight at a time.
  void pump() {
    pump_posted_->store(false);
    if (closed_ || !job_ || write_in_flight_) return;
    std::string sse;
    const bool done = job_->poll(&sse, milliseconds(0));
    if (job_->streaming()) {
      if (!sse.empty()) out_ += chunked_ ? chunk_frame(sse) : sse;
      if (done) {
        if (chunked_) out_ += kLastChunk;
        end_job();
      }
      return flush();
    }
    if (!done) return;
    Reply reply{job_->final_status(), job_->final_body()};
    end_job();
    send_reply(reply);
  }

  void end_job() {
    job_->set_on_ready({});
    job_.reset();
    response_complete_ = true;
  }

  void send_error(const ApiError& e, const Headers& extra = {}) {
    // A body not read (or not readable) leaves the connection out of step: close it after the reply.
    if (!parser_ || !parser_->is_done()) keep_alive_ = false;
    send_reply(Api::error_reply(e), extra);
  }

  void send_reply(const Reply& reply, const Headers& extra = {}) {
    state_ = State::kHandling;
    keep_alive_ = keep_alive_ && !server_.stopping.load() && !stop_requested_;
    out_ += response_head(reply.status, reason_of(reply.status), reply.content_type, Framing::kLength,
                          reply.body.size(), keep_alive_, extra);
    if (!head_only_) out_ += reply.body;
    response_complete_ = true;
    flush();
  }

  void flush() {
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

  void end_of_response() {
    response_complete_ = false;
    if (keep_alive_ && !stop_requested_) return wait_for_request();
    close_after_linger();
  }

  // Half-closes, then reads and drops what the client still sends for a while, so
  // that closing with unread bytes does not reset the connection under the reply.
  void close_after_linger() {
    state_ = State::kClosing;
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(milliseconds(kLingerMs));
    linger();
  }
  void linger() {
    stream_.async_read_some(asio::buffer(discard_), [self = shared_from_this()](error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->close_now();
      self->linger();
    });
  }

  void on_server_stop() {
    stop_requested_ = true;
    if (state_ == State::kIdle || state_ == State::kHead || state_ == State::kBody) close_now();
  }

  void close_now() {
    if (closed_) return;
    closed_ = true;
    if (state_ != State::kHandling) release_large_body();  // else the handler still holds the body
    if (job_) {
      job_->set_on_ready({});
      job_.reset();  // aborts what is unfinished
    }
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  HttpServer::Impl& server_;
  const HttpOptions& opt_;
  const uint64_t id_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  State state_ = State::kIdle;
  Route route_ = Route::kHealth;
  unsigned version_ = 11;
  bool first_request_ = true;
  bool keep_alive_ = true;
  bool head_only_ = false;
  bool chunked_ = true;
  bool stop_requested_ = false;
  bool closed_ = false;
  bool holds_large_body_ = false;
  std::unique_ptr<GenerationJob> job_;
  std::shared_ptr<std::atomic<bool>> pump_posted_ = std::make_shared<std::atomic<bool>>(false);
  std::string out_;      // bytes queued, not yet handed to a write
  std::string writing_;  // bytes of the write in flight
  bool write_in_flight_ = false;
  bool response_complete_ = false;  // the reply's last bytes are queued or written
  char discard_[4096];
};

Outcome HttpServer::Impl::run(Route route, std::string_view body) {
  try {
    return api.handle(route, body);
  } catch (const std::exception& e) {
    NS_LOG(ERROR) << "request handler threw: " << e.what();
    return Api::error_reply(internal(std::string("internal server error: ") + e.what()));
  } catch (...) {
    NS_LOG(ERROR) << "request handler threw a non-exception";
    return Api::error_reply(internal("internal server error"));
  }
}

void HttpServer::Impl::accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](error_code ec, tcp::socket socket) {
    if (!acceptor.is_open() || stopping.load()) return;
    if (ec) {
      // Out of descriptors (EMFILE/ENFILE) and the like: wait a little instead of spinning.
      NS_LOG(WARNING) << "accept failed: " << ec.message();
      retry_timer.expires_after(milliseconds(50));
      retry_timer.async_wait([this](error_code) { accept(); });
      return;
    }
    if (num_connections.load() >= options.max_connections) {
      NS_LOG(WARNING) << "connection refused: " << options.max_connections << " open already";
      error_code ignored;
      socket.close(ignored);
    } else {
      error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      std::shared_ptr<Connection> c;
      {
        std::lock_guard<std::mutex> lock(mu);
        const uint64_t id = next_id++;
        c = std::make_shared<Connection>(*this, std::move(socket), id);
        connections.emplace(id, c);
      }
      c->start();
    }
    accept();
  });
}

void HttpServer::Impl::begin_stop() {
  error_code ignored;
  acceptor.close(ignored);
  retry_timer.cancel();
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [id, weak] : connections) {
      if (auto c = weak.lock()) open.push_back(std::move(c));
    }
  }
  for (auto& c : open) c->shutdown();
  open.clear();
  drain(std::chrono::steady_clock::now() + milliseconds(options.shutdown_grace_ms));
}

// Until every connection has finished its reply (or the grace is over), then the I/O threads return.
void HttpServer::Impl::drain(std::chrono::steady_clock::time_point deadline) {
  if (num_connections.load() == 0 || std::chrono::steady_clock::now() >= deadline) {
    ioc.stop();
    return;
  }
  drain_timer.expires_after(milliseconds(10));
  drain_timer.async_wait([this, deadline](error_code) { drain(deadline); });
}

HttpServer::HttpServer(Api& api, HttpOptions options)
    : impl_(std::make_unique<Impl>(api, std::move(options))) {}

HttpServer::~HttpServer() {
  stop();
}

StatusOr<int> HttpServer::bind() {
  Impl& s = *impl_;
  const std::string where = s.options.host + ":" + std::to_string(s.options.port);
  error_code ec;
  tcp::endpoint endpoint;
  const auto address = asio::ip::make_address(s.options.host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, static_cast<unsigned short>(s.options.port));
  } else {
    tcp::resolver resolver(s.ioc);
    auto results = resolver.resolve(s.options.host, std::to_string(s.options.port), ec);
    if (ec || results.empty()) return invalid_argument("cannot resolve host '" + s.options.host + "'");
    endpoint = *results.begin();
  }
  s.acceptor.open(endpoint.protocol(), ec);
  // SO_REUSEADDR lets a restart bind past connections in TIME_WAIT; without SO_REUSEPORT
  // a port another process listens on stays an error.
  if (!ec) s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code ignored;
    s.acceptor.close(ignored);
    return failed_precondition("could not listen on " + where + ": " + ec.message());
  }
  s.bound = true;
  return static_cast<int>(s.acceptor.local_endpoint().port());
}

void HttpServer::serve() {
  Impl& s = *impl_;
  if (!s.bound || s.stopping.load()) return;
  asio::post(s.ioc, [&s] { s.accept(); });
  std::vector<std::thread> threads;
  for (int i = 1; i < s.options.num_threads; ++i) threads.emplace_back([&s] { s.ioc.run(); });
  s.ioc.run();
  for (auto& t : threads) t.join();
}

void HttpServer::stop() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  Impl* s = impl_.get();
  asio::post(s->ioc, [s] { s->begin_stop(); });
}

}  // namespace nanoserve::server
