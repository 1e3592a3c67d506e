#pragma once
// HTTP/1.1 response framing: the head of a reply and the frames of a chunked
// body. Plain strings, no I/O; the connection (http_connection.cc) writes them.

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nanoserve::server {

using Headers = std::vector<std::pair<std::string_view, std::string>>;

// How the body's end is found: its length, chunks, or (HTTP/1.0 streams) the connection's close.
enum class Framing { kLength, kChunked, kClose };

inline constexpr std::string_view kLastChunk = "0\r\n\r\n";
inline constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

// "HTTP/1.1 <status> <reason>", Content-Type, the framing's header, Retry-After: 1
// on 429 and 503, the extra headers in order, Connection, and the blank line.
std::string response_head(int status, std::string_view reason, std::string_view content_type, Framing framing,
                          size_t content_length, bool keep_alive, const Headers& extra);

// One chunk of a chunked body: hex size, CRLF, the data, CRLF.
std::string chunk_frame(std::string_view data);

}  // namespace nanoserve::server
