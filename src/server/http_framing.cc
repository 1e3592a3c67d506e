#include "server/http_framing.h"

#include <cstdio>

namespace nanoserve::server {

std::string response_head(int status, std::string_view reason, std::string_view content_type, Framing framing,
                          size_t content_length, bool keep_alive, const Headers& extra) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " ";
  h += reason;
  h += "\r\nContent-Type: ";
  h += content_type;
  h += "\r\n";
  if (framing == Framing::kLength) h += "Content-Length: " + std::to_string(content_length) + "\r\n";
  if (framing == Framing::kChunked) h += "Transfer-Encoding: chunked\r\n";
  // A full queue or parse budget, a model still loading, a shutdown: clients may retry after a second.
  if (status == 429 || status == 503) h += "Retry-After: 1\r\n";
  for (const auto& [name, value] : extra) {
    h += name;
    h += ": ";
    h += value;
    h += "\r\n";
  }
  h += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return h;
}

std::string chunk_frame(std::string_view data) {
  char size[20];
  const int n = std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  std::string out(size, static_cast<size_t>(n));
  out += data;
  out += "\r\n";
  return out;
}

}  // namespace nanoserve::server
