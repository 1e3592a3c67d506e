#pragma once
// Cross-origin requests, as vLLM answers them: its CORS middleware is
// Starlette's (checked against Starlette 1.10 itself by tests/server/
// test_cors_oracle.py), configured by --allowed-origins, --allowed-methods,
// --allowed-headers and --allow-credentials; vLLM's defaults allow every
// origin, method and header, without credentials.
//
// - A preflight (OPTIONS with Origin and Access-Control-Request-Method, on any
//   path, before routing and without the key) is answered here: 200 "OK", or
//   400 "Disallowed CORS origin, method, headers, private-network" naming what
//   failed, with Vary, Access-Control-Allow-Methods, -Max-Age 600,
//   -Allow-Headers and the allowed origin. A private-network preflight is
//   refused (vLLM does not allow it).
// - Every other response gets Vary: Origin and, to a request with an allowed
//   Origin, Access-Control-Allow-Origin (* when every origin is allowed without
//   credentials, else the origin itself) and, with credentials,
//   Access-Control-Allow-Credentials: true.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http_framing.h"

namespace nanoserve::server {

struct CorsOptions {
  std::vector<std::string> allowed_origins{"*"};
  std::vector<std::string> allowed_methods{"*"};
  std::vector<std::string> allowed_headers{"*"};
  bool allow_credentials = false;
};

class CorsPolicy {
 public:
  explicit CorsPolicy(CorsOptions options);

  struct Preflight {
    int status = 200;
    std::string body;  // text/plain
    Headers headers;
  };
  // `request_headers`: the Access-Control-Request-Headers value, when sent; `private_network`:
  // whether Access-Control-Request-Private-Network was sent.
  Preflight preflight(std::string_view origin, std::string_view method,
                      std::optional<std::string_view> request_headers, bool private_network = false) const;

  // The headers of any other response; `origin`: the request's Origin, if it sent one.
  Headers response_headers(std::optional<std::string_view> origin) const;

 private:
  bool origin_allowed(std::string_view origin) const;

  CorsOptions options_;
  bool all_origins_ = false;
  bool all_headers_ = false;
  std::vector<std::string> methods_;        // as listed ("*": every method)
  std::string methods_text_;                // "DELETE, GET, ..."
  std::vector<std::string> headers_lower_;  // allowed header names, lower case, with the safelisted ones
  std::string headers_text_;                // the same, as configured, sorted, joined
};

}  // namespace nanoserve::server
