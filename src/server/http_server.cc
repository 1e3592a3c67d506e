// The server's listening side and lifetime: bind, accept, stop and the drain
// after it. Each accepted socket becomes a Connection (http_connection.h).

#include "server/http_server.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include "core/logging.h"
#include "server/http_connection.h"

namespace nanoserve::server {

using std::chrono::milliseconds;

HttpServer::Impl::Impl(Api& api, HttpOptions options)
    : api(api),
      options(std::move(options)),
      cors(this->options.cors ? std::optional<CorsPolicy>(CorsPolicy(*this->options.cors)) : std::nullopt),
      ioc(std::max(1, this->options.num_threads)),
      acceptor(ioc),
      retry_timer(ioc),
      drain_timer(ioc),
      handlers(static_cast<size_t>(std::max(1, this->options.num_handler_threads))) {}

HttpServer::Impl::~Impl() {
  handlers.stop();
  handlers.join();
}

Outcome HttpServer::Impl::run(Route route, std::string_view body, std::string_view path) {
  try {
    return api.handle(route, body, path);
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
