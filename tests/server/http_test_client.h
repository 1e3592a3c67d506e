#pragma once
// A minimal blocking HTTP/1.1 client over POSIX sockets for the server tests
// (the HTTP library stays in one translation unit of the server). Each call
// opens a connection with "Connection: close" and reads to end of stream.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <map>
#include <string>
#include <vector>

namespace nanoserve::server::testing {

struct HttpResult {
  int status = -1;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
};

inline int connect_loopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

inline std::string request_text(const std::string& method, const std::string& path, const std::string& body,
                                const std::vector<std::string>& extra_headers) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const std::string& h : extra_headers) req += h + "\r\n";
  if (method == "POST") {
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return req + "\r\n" + body;
}

// Opens a connection and sends the request; the caller reads and closes.
inline int open_request(int port, const std::string& method, const std::string& path, const std::string& body,
                        const std::vector<std::string>& extra_headers = {}) {
  int fd = connect_loopback(port);
  if (fd >= 0 && !send_all(fd, request_text(method, path, body, extra_headers))) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Closes with a reset (RST) instead of an orderly close: what a crashed client or a
// dropped network looks like to the server, which tells it from a half-close.
inline void reset_connection(int fd) {
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  ::close(fd);
}

// Reads until the peer closes; returns everything received.
inline std::string read_all(int fd) {
  std::string raw;
  char buf[16384];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  return raw;
}

inline std::string dechunk(const std::string& s) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t eol = s.find("\r\n", pos);
    if (eol == std::string::npos) break;
    size_t len = std::stoul(s.substr(pos, eol - pos), nullptr, 16);
    if (len == 0) break;
    out += s.substr(eol + 2, len);
    pos = eol + 2 + len + 2;
  }
  return out;
}

// The final response in `raw`: interim 1xx responses before it are skipped, as HTTP/1.1 clients do.
inline HttpResult parse_response(std::string raw) {
  while (raw.size() >= 12 && raw.compare(0, 10, "HTTP/1.1 1") == 0 &&
         raw.find("\r\n\r\n") != std::string::npos)
    raw.erase(0, raw.find("\r\n\r\n") + 4);
  HttpResult r;
  size_t head_end = raw.find("\r\n\r\n");
  if (raw.size() < 12 || head_end == std::string::npos) return r;
  r.status = std::stoi(raw.substr(9, 3));
  size_t pos = raw.find("\r\n") + 2;
  while (pos < head_end) {
    size_t eol = raw.find("\r\n", pos);
    std::string line = raw.substr(pos, eol - pos);
    size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t v = line.find_first_not_of(' ', colon + 1);
      r.headers[name] = v == std::string::npos ? "" : line.substr(v);
    }
    pos = eol + 2;
  }
  r.body = raw.substr(head_end + 4);
  if (r.headers.count("transfer-encoding") && r.headers["transfer-encoding"] == "chunked")
    r.body = dechunk(r.body);
  return r;
}

inline HttpResult http_request(int port, const std::string& method, const std::string& path,
                               const std::string& body = {},
                               const std::vector<std::string>& extra_headers = {}) {
  int fd = open_request(port, method, path, body, extra_headers);
  if (fd < 0) return {};
  std::string raw;
  char buf[16384];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return parse_response(raw);
}

// The JSON payloads of an SSE body's "data: " lines, in order ("[DONE]" included).
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

}  // namespace nanoserve::server::testing
