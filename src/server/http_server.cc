// The one translation unit that includes cpp-httplib.

#include "server/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include <httplib.h>

#include "core/logging.h"

namespace nanoserve::server {

namespace {

using std::chrono::milliseconds;

std::string ip_text(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, buf, sizeof(buf));
  } else if (ss.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

int port_of(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
  return -1;
}

// cpp-httplib 0.11 gives a handler neither its socket nor a liveness check.
// The connection's socket is the one whose local and peer endpoints match the
// request's; it stays open (and so keeps its number) until the handler and its
// content provider return. -1 when not found: the request then runs to the end.
int find_connection_socket(const httplib::Request& req) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    char* end = nullptr;
    long fd = std::strtol(entry.path().filename().c_str(), &end, 10);
    if (end == nullptr || *end != '\0' || fd < 0) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
    if (port_of(local) == req.local_port && port_of(peer) == req.remote_port &&
        ip_text(peer) == req.remote_addr) {
      return static_cast<int>(fd);
    }
  }
  return -1;
}

// True when the client closed or reset the connection. A request has been
// read whole before its handler runs and clients do not pipeline, so end of
// stream (POLLRDHUP) on the socket means the client is gone.
bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void set_reply(httplib::Response& res, const Reply& reply) {
  res.status = reply.status;
  res.set_content(reply.body, reply.content_type);
  // A full queue or parse budget, or a model still loading: clients may retry after a second.
  if (reply.status == 429 || reply.status == 503) res.set_header("Retry-After", "1");
}

}  // namespace

struct HttpServer::Impl {
  Impl(Api& api, HttpOptions options) : api(api), options(std::move(options)) {}

  void install_routes();
  void handle_generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);

  Api& api;
  HttpOptions options;
  httplib::Server server;
  bool bound = false;
};

void HttpServer::Impl::install_routes() {
  const int n_threads = options.num_threads;
  server.new_task_queue = [n_threads] { return new httplib::ThreadPool(static_cast<size_t>(n_threads)); };
  server.set_payload_max_length(options.max_body_bytes);
  server.set_keep_alive_max_count(1000);
  server.set_keep_alive_timeout(5);
  server.set_tcp_nodelay(true);

  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (api.needs_auth(req.path) && !api.authorized(req.get_header_value("Authorization"))) {
      set_reply(res, Api::error_reply(unauthorized()));
      res.set_header("WWW-Authenticate", "Bearer");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Statuses httplib sets itself (404 no route, 413 body too large, 400 bad HTTP) get the OpenAI error shape.
  server.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request&,
                                                                       httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    ApiError e = res.status == 413 ? payload_too_large(options.max_body_bytes) : from_http_status(res.status);
    res.set_content(e.body(), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    NS_LOG(ERROR) << "request handler threw: " << what;
    set_reply(res, Api::error_reply(internal("internal server error: " + what)));
  });

  server.Get("/health",
             [this](const httplib::Request&, httplib::Response& res) { set_reply(res, api.health()); });
  server.Get("/v1/models",
             [this](const httplib::Request&, httplib::Response& res) { set_reply(res, api.models()); });
  server.Get("/metrics",
             [this](const httplib::Request&, httplib::Response& res) { set_reply(res, api.metrics()); });
  server.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    set_reply(res, api.tokenize(req.body));
  });
  server.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    set_reply(res, api.detokenize(req.body));
  });
  server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(Endpoint::kChat, req, res);
  });
  server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(Endpoint::kCompletion, req, res);
  });
}

void HttpServer::Impl::handle_generate(Endpoint endpoint, const httplib::Request& req,
                                       httplib::Response& res) {
  auto result = api.generate(endpoint, req.body);
  if (auto* reply = std::get_if<Reply>(&result)) return set_reply(res, *reply);
  std::shared_ptr<GenerationJob> job = std::move(std::get<std::unique_ptr<GenerationJob>>(result));
  const int fd = find_connection_socket(req);
  const milliseconds poll_interval(options.liveness_poll_ms);

  if (!job->streaming()) {
    std::string unused;
    while (!job->poll(&unused, poll_interval)) {
      if (peer_closed(fd)) {
        job->abort();
        set_reply(res, Api::error_reply(ApiError{499, "client disconnected", "client_closed", {}, {}}));
        return;
      }
    }
    res.status = job->final_status();
    res.set_content(job->final_body(), "application/json");
    return;
  }

  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, fd, poll_interval](size_t, httplib::DataSink& sink) {
        std::string out;
        bool done = false;
        while (out.empty() && !done) {
          done = job->poll(&out, poll_interval);
          if (peer_closed(fd)) {
            job->abort();
            return false;
          }
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          job->abort();
          return false;
        }
        if (done) sink.done();
        return true;
      },
      [job](bool) { job->abort(); });
}

HttpServer::HttpServer(Api& api, HttpOptions options)
    : impl_(std::make_unique<Impl>(api, std::move(options))) {
  impl_->install_routes();
}

HttpServer::~HttpServer() {
  stop();
}

StatusOr<int> HttpServer::bind() {
  int port = impl_->options.port;
  if (port == 0) {
    port = impl_->server.bind_to_any_port(impl_->options.host);
    if (port <= 0) return unimplemented("could not bind " + impl_->options.host + " to a free port");
  } else if (!impl_->server.bind_to_port(impl_->options.host, port)) {
    return failed_precondition("could not bind " + impl_->options.host + ":" + std::to_string(port) +
                               " (in use, or not an address of this host)");
  }
  impl_->bound = true;
  return port;
}

void HttpServer::serve() {
  if (impl_->bound) impl_->server.listen_after_bind();
}

void HttpServer::stop() {
  if (impl_ && impl_->server.is_running()) impl_->server.stop();
}

}  // namespace nanoserve::server
