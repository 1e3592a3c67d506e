#include "server/cors.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <utility>

namespace nanoserve::server {

namespace {

// What "*" in --allowed-methods stands for, as Starlette spells it out.
constexpr const char* kAllMethods[] = {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "QUERY"};
// A preflight's answer depends on these request headers: caches must key on them.
constexpr const char* kPreflightVary =
    "Origin, Access-Control-Request-Method, Access-Control-Request-Headers, "
    "Access-Control-Request-Private-Network";
// Headers a browser may always send (the Fetch standard's CORS-safelisted request headers).
constexpr const char* kSafelisted[] = {"Accept", "Accept-Language", "Content-Language", "Content-Type"};
constexpr int kMaxAgeSeconds = 600;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

CorsPolicy::CorsPolicy(CorsOptions options) : options_(std::move(options)) {
  all_origins_ = contains(options_.allowed_origins, "*");
  all_headers_ = contains(options_.allowed_headers, "*");
  if (contains(options_.allowed_methods, "*")) {
    methods_.assign(std::begin(kAllMethods), std::end(kAllMethods));
  } else {
    methods_ = options_.allowed_methods;
  }
  methods_text_ = join(methods_);
  std::set<std::string> names(std::begin(kSafelisted), std::end(kSafelisted));
  names.insert(options_.allowed_headers.begin(), options_.allowed_headers.end());
  std::vector<std::string> sorted(names.begin(), names.end());  // std::set sorts them
  headers_text_ = join(sorted);
  for (const std::string& h : sorted) headers_lower_.push_back(lower(h));
}

bool CorsPolicy::origin_allowed(std::string_view origin) const {
  return all_origins_ || contains(options_.allowed_origins, origin);
}

CorsPolicy::Preflight CorsPolicy::preflight(std::string_view origin, std::string_view method,
                                            std::optional<std::string_view> request_headers,
                                            bool private_network) const {
  Preflight p;
  p.headers.emplace_back("Vary", kPreflightVary);
  // Every origin without credentials may be answered with "*"; otherwise the answer names the origin.
  const bool explicit_origin = !all_origins_ || options_.allow_credentials;
  std::vector<std::string> failures;
  if (explicit_origin) {
    if (origin_allowed(origin)) {
      p.headers.emplace_back("Access-Control-Allow-Origin", std::string(origin));
    } else {
      failures.push_back("origin");
    }
  } else {
    p.headers.emplace_back("Access-Control-Allow-Origin", "*");
  }
  p.headers.emplace_back("Access-Control-Allow-Methods", methods_text_);
  p.headers.emplace_back("Access-Control-Max-Age", std::to_string(kMaxAgeSeconds));
  if (!contains(methods_, method)) failures.push_back("method");
  if (all_headers_) {
    // Every header is allowed: the answer repeats what was asked for.
    if (request_headers)
      p.headers.emplace_back("Access-Control-Allow-Headers", std::string(*request_headers));
  } else {
    p.headers.emplace_back("Access-Control-Allow-Headers", headers_text_);
    if (request_headers) {
      std::string_view rest = *request_headers;
      while (true) {
        const size_t comma = rest.find(',');
        const std::string name = lower(trim(rest.substr(0, comma)));
        if (!contains(headers_lower_, name)) {
          failures.push_back("headers");
          break;
        }
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    }
  }
  if (options_.allow_credentials) p.headers.emplace_back("Access-Control-Allow-Credentials", "true");
  if (private_network) failures.push_back("private-network");  // vLLM does not allow it
  if (failures.empty()) {
    p.body = "OK";
  } else {
    p.status = 400;
    p.body = "Disallowed CORS " + join(failures);
  }
  return p;
}

Headers CorsPolicy::response_headers(std::optional<std::string_view> origin) const {
  Headers h;
  if (origin && all_origins_ && !options_.allow_credentials) {
    h.emplace_back("Access-Control-Allow-Origin", "*");
  } else if (origin && origin_allowed(*origin)) {
    // Credentials cannot be answered with "*": the origin is named instead.
    h.emplace_back("Access-Control-Allow-Origin", std::string(*origin));
  }
  if (origin && options_.allow_credentials) h.emplace_back("Access-Control-Allow-Credentials", "true");
  // The answer depends on the Origin, whether or not this request sent one.
  h.emplace_back("Vary", "Origin");
  return h;
}

}  // namespace nanoserve::server
