// bench serve's HTTP client (Boost.Beast over Boost.Asio), the one file of the
// CLI that includes them.
//
// Every request of the load is a chain of asynchronous steps on one io_context,
// run by the calling thread: connect -> write the POST -> read the head -> read
// the body as it arrives (a buffer_body parser, so chunked and close-delimited
// bodies both work) -> split it into SSE events -> time each chunk that carries
// text. A request owns one connection (connect time is part of its TTFT, as in
// vLLM's client). One deadline per request (tcp_stream's expiry, set once)
// closes it when it runs past --request-timeout. Arrivals follow a precomputed
// schedule on one timer; --max-concurrency holds arrivals in a queue.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "cli/bench_serve.h"

namespace nanoserve::cli {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr size_t kReadChunk = 16384;
constexpr size_t kErrorBodyBytes = 2048;  // of a non-200 reply, kept for the error line

http::request<http::string_body> make_request(const ServerUrl& url, const std::string& method,
                                              const std::string& path, const std::string& body,
                                              const std::string& api_key) {
  http::request<http::string_body> req{http::string_to_verb(method), url.prefix + path, 11};
  req.set(http::field::host, url.host + ":" + url.port);
  req.set(http::field::user_agent, "nanoserve-bench-serve");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  if (!body.empty() || method == "POST") {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
  }
  return req;
}

std::string describe(const error_code& ec, double timeout_s) {
  if (ec == beast::error::timeout) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "timed out after %g s", timeout_s);
    return buf;
  }
  return ec.message();
}

// The text a chunk carries: choices[0].text (completions) or choices[0].delta.content
// (chat; reasoning_content too, for servers that split it out). Empty when none.
std::string chunk_text(const json& chunk) {
  auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) return {};
  const json& c = (*choices)[0];
  if (!c.is_object()) return {};
  if (auto t = c.find("text"); t != c.end() && t->is_string()) return t->get<std::string>();
  auto delta = c.find("delta");
  if (delta == c.end() || !delta->is_object()) return {};
  std::string out;
  for (const char* key : {"reasoning_content", "content"}) {
    if (auto t = delta->find(key); t != delta->end() && t->is_string()) out += t->get<std::string>();
  }
  return out;
}

class LoadRunner;

// One streamed request. Lives as long as an operation of its chain holds it.
class StreamSession : public std::enable_shared_from_this<StreamSession> {
 public:
  StreamSession(LoadRunner& runner, size_t index);
  void start();

 private:
  void on_connect(const error_code& ec);
  void on_write(const error_code& ec);
  void on_header(const error_code& ec);
  void read_some();
  void on_read(error_code ec);
  void feed(std::string_view bytes, double t);
  void on_event(double t);
  void succeed(double t);
  void fail(std::string error);
  double now() const;
  std::string describe(const error_code& ec) const;

  LoadRunner& runner_;
  size_t index_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> req_;
  http::response_parser<http::buffer_body> parser_;
  char body_buf_[kReadChunk];
  int status_ = 0;
  std::string error_body_;  // a non-200 reply's body
  std::string pending_;     // bytes of an SSE line not yet ended
  std::string data_;        // the data lines of the current event
  bool has_data_ = false;
  bool first_ = true;
  bool finished_ = false;
  double last_t_ = 0;
  RequestOutcome out_;
};

class LoadRunner {
 public:
  LoadRunner(const ServerUrl& url, const std::vector<BenchRequest>& requests, const LoadOptions& o)
      : url_(url), requests_(requests), o_(o), timer_(ioc_), outcomes_(requests.size()) {}

  LoadResult run() {
    LoadResult r;
    error_code ec;
    tcp::resolver resolver(ioc_);
    endpoints_ = resolver.resolve(url_.host, url_.port, ec);
    if (ec) {
      for (RequestOutcome& o : outcomes_) o.error = "could not resolve " + url_.host + ": " + ec.message();
      r.outcomes = std::move(outcomes_);
      return r;
    }
    arrivals_ = arrival_offsets(static_cast<int>(requests_.size()), o_.request_rate, o_.burstiness, o_.seed);
    t0_ = Clock::now();
    last_progress_ = t0_;
    schedule_arrivals();
    ioc_.run();
    if (o_.progress_bar) std::fprintf(stderr, "\n");
    r.duration_s = end_s_;
    r.peak_concurrency = peak_;
    r.max_concurrency = o_.max_concurrency;
    r.outcomes = std::move(outcomes_);
    return r;
  }

  asio::io_context& ioc() { return ioc_; }
  const tcp::resolver::results_type& endpoints() const { return endpoints_; }
  const ServerUrl& url() const { return url_; }
  const LoadOptions& options() const { return o_; }
  const BenchRequest& request(size_t i) const { return requests_[i]; }
  Clock::time_point t0() const { return t0_; }

  void on_done(size_t i, RequestOutcome out) {
    end_s_ = std::max(end_s_, out.start_s + out.latency_s);
    if (!out.ok) {
      ++failed_;
      end_s_ = std::max(end_s_, std::chrono::duration<double>(Clock::now() - t0_).count());
    }
    outcomes_[i] = std::move(out);
    --in_flight_;
    ++done_;
    if (!waiting_.empty()) {
      const size_t next = waiting_.front();
      waiting_.pop_front();
      launch(next);
    }
    progress();
  }

 private:
  void schedule_arrivals() {
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0_).count();
    while (next_ < arrivals_.size() && arrivals_[next_] <= elapsed) admit(next_++);
    if (next_ == arrivals_.size()) return;
    timer_.expires_at(
        t0_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals_[next_])));
    timer_.async_wait([this](const error_code& ec) {
      if (!ec) schedule_arrivals();
    });
  }

  void admit(size_t i) {
    if (o_.max_concurrency > 0 && in_flight_ >= o_.max_concurrency) {
      waiting_.push_back(i);
    } else {
      launch(i);
    }
  }

  void launch(size_t i) {
    ++in_flight_;
    peak_ = std::max(peak_, in_flight_);
    std::make_shared<StreamSession>(*this, i)->start();
  }

  // A terminal gets one line redrawn at most 10 times a second; a log gets a
  // plain line at each tenth of the requests.
  void progress() {
    if (o_.quiet) return;
    const size_t n = requests_.size();
    const Clock::time_point now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - t0_).count();
    if (o_.progress_bar) {
      if (done_ != n && now - last_progress_ < std::chrono::milliseconds(100)) return;
      last_progress_ = now;
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(kWidth * done_ / std::max<size_t>(n, 1));
      std::string bar(static_cast<size_t>(filled), '=');
      bar.resize(kWidth, ' ');
      std::fprintf(stderr, "\r%zu/%zu [%s] %3d%% %.1f s, %zu in flight, %zu failed ", done_, n, bar.c_str(),
                   static_cast<int>(100 * done_ / std::max<size_t>(n, 1)), elapsed,
                   static_cast<size_t>(in_flight_), failed_);
      std::fflush(stderr);
      return;
    }
    const size_t step = std::max<size_t>(n / 10, 1);
    if (done_ % step == 0 || done_ == n) {
      std::fprintf(stderr, "bench serve: %zu/%zu requests done, %zu failed, %.1f s\n", done_, n, failed_,
                   elapsed);
    }
  }

  const ServerUrl& url_;
  const std::vector<BenchRequest>& requests_;
  const LoadOptions& o_;
  asio::io_context ioc_;
  asio::steady_timer timer_;
  tcp::resolver::results_type endpoints_;
  std::vector<RequestOutcome> outcomes_;
  std::vector<double> arrivals_;
  size_t next_ = 0;
  std::deque<size_t> waiting_;
  int in_flight_ = 0;
  int peak_ = 0;
  size_t done_ = 0;
  size_t failed_ = 0;
  double end_s_ = 0;
  Clock::time_point t0_;
  Clock::time_point last_progress_;
};

StreamSession::StreamSession(LoadRunner& runner, size_t index)
    : runner_(runner), index_(index), stream_(runner.ioc()) {
  parser_.body_limit(std::numeric_limits<uint64_t>::max());
  parser_.header_limit(64 << 10);
}

std::string StreamSession::describe(const error_code& ec) const {
  return cli::describe(ec, runner_.options().request_timeout_s);
}

double StreamSession::now() const {
  return std::chrono::duration<double>(Clock::now() - runner_.t0()).count();
}

void StreamSession::start() {
  const LoadOptions& o = runner_.options();
  req_ = make_request(runner_.url(), "POST", o.endpoint, runner_.request(index_).body, o.api_key);
  req_.set(http::field::accept, "text/event-stream");
  out_.start_s = now();
  stream_.expires_after(
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.request_timeout_s)));
  stream_.async_connect(
      runner_.endpoints(),
      [self = shared_from_this()](const error_code& ec, const tcp::endpoint&) { self->on_connect(ec); });
}

void StreamSession::on_connect(const error_code& ec) {
  if (ec) return fail("connect: " + describe(ec));
  http::async_write(stream_, req_,
                    [self = shared_from_this()](const error_code& e, size_t) { self->on_write(e); });
}

void StreamSession::on_write(const error_code& ec) {
  if (ec) return fail("sending the request: " + describe(ec));
  http::async_read_header(stream_, buffer_, parser_,
                          [self = shared_from_this()](const error_code& e, size_t) { self->on_header(e); });
}

void StreamSession::on_header(const error_code& ec) {
  if (ec) return fail("reading the response head: " + describe(ec));
  status_ = static_cast<int>(parser_.get().result_int());
  if (parser_.is_done()) {
    if (status_ != 200) return fail("HTTP " + std::to_string(status_) + " with no body");
    return fail("HTTP 200 with an empty body (no stream)");
  }
  read_some();
}

void StreamSession::read_some() {
  parser_.get().body().data = body_buf_;
  parser_.get().body().size = sizeof body_buf_;
  http::async_read_some(stream_, buffer_, parser_,
                        [self = shared_from_this()](error_code e, size_t) { self->on_read(e); });
}

void StreamSession::on_read(error_code ec) {
  if (finished_) return;
  if (ec == http::error::need_buffer) ec = {};
  const double t = now();
  const size_t n = sizeof body_buf_ - parser_.get().body().size;
  if (status_ != 200) {
    error_body_.append(body_buf_,
                       std::min(n, kErrorBodyBytes - std::min(kErrorBodyBytes, error_body_.size())));
    if (ec || parser_.is_done()) {
      std::string body = error_body_;
      for (char& c : body) c = (c == '\n' || c == '\r') ? ' ' : c;
      return fail("HTTP " + std::to_string(status_) + ": " + body);
    }
    return read_some();
  }
  if (n > 0) feed(std::string_view(body_buf_, n), t);
  if (finished_) return;
  if (ec) return fail("stream broken before [DONE]: " + describe(ec));
  if (parser_.is_done()) return fail("stream ended before [DONE]");
  read_some();
}

// Server-sent events: lines end in \n (or \r\n); "data:" lines accumulate,
// a blank line ends the event; comments (":") and other fields are skipped.
void StreamSession::feed(std::string_view bytes, double t) {
  pending_.append(bytes);
  size_t begin = 0;
  for (size_t nl; !finished_ && (nl = pending_.find('\n', begin)) != std::string::npos; begin = nl + 1) {
    std::string_view line(pending_.data() + begin, nl - begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      if (has_data_) {
        try {
          on_event(t);
        } catch (const json::exception& e) {  // a chunk of an unexpected shape
          fail(std::string("unexpected chunk in the stream: ") + e.what());
        }
      }
      data_.clear();
      has_data_ = false;
    } else if (line.starts_with("data:")) {
      line.remove_prefix(5);
      if (line.starts_with(' ')) line.remove_prefix(1);
      if (has_data_) data_ += '\n';
      data_.append(line);
      has_data_ = true;
    }
  }
  if (!finished_) pending_.erase(0, begin);
}

void StreamSession::on_event(double t) {
  if (data_ == "[DONE]") return succeed(t);
  json chunk = json::parse(data_, nullptr, /*allow_exceptions=*/false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    return fail("not JSON in the stream: " + data_.substr(0, 200));
  }
  if (auto e = chunk.find("error"); e != chunk.end() && !e->is_null()) {
    const json msg = e->is_object() ? e->value("message", json(e->dump())) : *e;
    return fail("error event in the stream: " + (msg.is_string() ? msg.get<std::string>() : msg.dump()));
  }
  if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) {
    if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_integer()) {
      out_.prompt_tokens = p->get<int64_t>();
    }
    if (auto c = u->find("completion_tokens"); c != u->end() && c->is_number_integer()) {
      out_.completion_tokens = c->get<int64_t>();
    }
  }
  const std::string text = chunk_text(chunk);
  if (text.empty()) return;
  if (first_) {
    out_.ttft_s = t - out_.start_s;
    first_ = false;
  } else {
    out_.itl_s.push_back(t - last_t_);
  }
  last_t_ = t;
  ++out_.content_chunks;
  if (runner_.options().keep_text) out_.text += text;
}

void StreamSession::succeed(double t) {
  if (first_ && out_.completion_tokens.value_or(0) <= 0)
    return fail("the stream ended with no text and no usage (no token to count)");
  finished_ = true;
  out_.ok = true;
  out_.latency_s = t - out_.start_s;
  error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
  runner_.on_done(index_, std::move(out_));
}

void StreamSession::fail(std::string error) {
  if (finished_) return;
  finished_ = true;
  out_.ok = false;
  out_.error = std::move(error);
  out_.latency_s = now() - out_.start_s;
  stream_.close();
  runner_.on_done(index_, std::move(out_));
}

}  // namespace

std::vector<double> arrival_offsets(int n, double request_rate, double burstiness, uint64_t seed) {
  std::vector<double> t(static_cast<size_t>(std::max(n, 0)), 0.0);
  if (!(request_rate > 0) || std::isinf(request_rate)) return t;
  std::mt19937_64 rng(seed);
  // Gamma with shape k and scale 1/(rate k): mean 1/rate for every k; k = 1 is Poisson.
  std::gamma_distribution<double> gap(burstiness, 1.0 / (request_rate * burstiness));
  for (size_t i = 1; i < t.size(); ++i) t[i] = t[i - 1] + gap(rng);
  return t;
}

LoadResult run_load(const ServerUrl& url, const std::vector<BenchRequest>& requests, const LoadOptions& o) {
  LoadRunner runner(url, requests, o);
  return runner.run();
}

StatusOr<ServerUrl> parse_base_url(const std::string& url) {
  std::string_view s = url;
  if (s.starts_with("https://")) return invalid_argument("--base-url: https is not supported (use http://)");
  if (!s.starts_with("http://"))
    return invalid_argument("--base-url must start with http://, got '" + url + "'");
  s.remove_prefix(7);
  const size_t slash = s.find('/');
  std::string_view authority = s.substr(0, slash);
  std::string prefix(slash == std::string_view::npos ? std::string_view() : s.substr(slash));
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  ServerUrl u;
  u.prefix = prefix;
  if (authority.starts_with('[')) {  // [v6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return invalid_argument("--base-url: unclosed '[' in '" + url + "'");
    u.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    u.port = authority.starts_with(':') ? std::string(authority.substr(1)) : "80";
  } else {
    const size_t colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    u.port = colon == std::string_view::npos ? "80" : std::string(authority.substr(colon + 1));
  }
  if (u.host.empty()) return invalid_argument("--base-url: no host in '" + url + "'");
  if (u.port.empty() || u.port.find_first_not_of("0123456789") != std::string::npos || u.port.size() > 5 ||
      std::stoi(u.port) > 65535) {
    return invalid_argument("--base-url: bad port in '" + url + "'");
  }
  return u;
}

StatusOr<HttpReply> http_fetch(const ServerUrl& url, const std::string& method, const std::string& path,
                               const std::string& body, const std::string& api_key, double timeout_s) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::flat_buffer buffer;
  http::request<http::string_body> req = make_request(url, method, path, body, api_key);
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  error_code result;
  std::string step = "resolve";
  tcp::resolver resolver(ioc);
  const std::string where = "http://" + url.host + ":" + url.port + url.prefix + path;
  error_code ec;
  auto endpoints = resolver.resolve(url.host, url.port, ec);
  if (ec) return not_found(where + ": could not resolve " + url.host + ": " + ec.message());
  stream.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)));
  step = "connect";
  stream.async_connect(endpoints, [&](const error_code& e, const tcp::endpoint&) {
    if (e) {
      result = e;
      return;
    }
    step = "write";
    http::async_write(stream, req, [&](const error_code& e2, size_t) {
      if (e2) {
        result = e2;
        return;
      }
      step = "read";
      http::async_read(stream, buffer, parser, [&](const error_code& e3, size_t) { result = e3; });
    });
  });
  ioc.run();
  if (result) return failed_precondition(where + ": " + step + ": " + describe(result, timeout_s));
  HttpReply reply;
  reply.status = static_cast<int>(parser.get().result_int());
  reply.body = std::move(parser.get().body());
  error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return reply;
}

}  // namespace nanoserve::cli
