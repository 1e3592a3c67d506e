#include "server/cors.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace nanoserve::server {
namespace {

constexpr const char* kVary =
    "Origin, Access-Control-Request-Method, Access-Control-Request-Headers, "
    "Access-Control-Request-Private-Network";

std::map<std::string, std::string> as_map(const Headers& h) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : h) {
    EXPECT_TRUE(m.emplace(std::string(k), v).second) << "header given twice: " << k;
  }
  return m;
}

TEST(Cors, VllmDefaultsAllowEverythingWithAStar) {
  const CorsPolicy p{CorsOptions{}};
  const auto pf = p.preflight("https://a.example", "POST", "Authorization, Content-Type");
  EXPECT_EQ(pf.status, 200);
  EXPECT_EQ(pf.body, "OK");
  EXPECT_EQ(as_map(pf.headers),
            (std::map<std::string, std::string>{
                {"Vary", kVary},
                {"Access-Control-Allow-Origin", "*"},
                {"Access-Control-Allow-Methods", "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT, QUERY"},
                {"Access-Control-Max-Age", "600"},
                {"Access-Control-Allow-Headers", "Authorization, Content-Type"}}));
  // No headers asked for: none echoed.
  EXPECT_EQ(as_map(p.preflight("https://a.example", "GET", std::nullopt).headers)
                .count("Access-Control-Allow-Headers"),
            0u);
  EXPECT_EQ(as_map(p.response_headers("https://a.example")),
            (std::map<std::string, std::string>{{"Access-Control-Allow-Origin", "*"}, {"Vary", "Origin"}}));
  // No Origin: the answer still varies with it.
  EXPECT_EQ(as_map(p.response_headers(std::nullopt)),
            (std::map<std::string, std::string>{{"Vary", "Origin"}}));
  // A private-network preflight is refused, as vLLM's middleware refuses it.
  const auto pn = p.preflight("https://a.example", "GET", std::nullopt, /*private_network=*/true);
  EXPECT_EQ(pn.status, 400);
  EXPECT_EQ(pn.body, "Disallowed CORS private-network");
}

TEST(Cors, ListedOriginsMethodsAndHeaders) {
  CorsOptions o;
  o.allowed_origins = {"https://ok.example"};
  o.allowed_methods = {"GET", "POST"};
  o.allowed_headers = {"X-Trace", "Authorization"};
  o.allow_credentials = true;
  const CorsPolicy p(o);
  const auto ok = p.preflight("https://ok.example", "POST", " x-trace ,authorization,Content-Type");
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(as_map(ok.headers),
            (std::map<std::string, std::string>{
                {"Vary", kVary},
                {"Access-Control-Allow-Origin", "https://ok.example"},
                {"Access-Control-Allow-Methods", "GET, POST"},
                {"Access-Control-Max-Age", "600"},
                {"Access-Control-Allow-Headers",
                 "Accept, Accept-Language, Authorization, Content-Language, Content-Type, X-Trace"},
                {"Access-Control-Allow-Credentials", "true"}}));
  EXPECT_EQ(p.preflight("https://evil.example", "POST", std::nullopt).body, "Disallowed CORS origin");
  EXPECT_EQ(p.preflight("https://ok.example", "PUT", std::nullopt).body, "Disallowed CORS method");
  EXPECT_EQ(p.preflight("https://ok.example", "post", std::nullopt).body, "Disallowed CORS method");  // exact
  EXPECT_EQ(p.preflight("https://ok.example", "GET", "x-other").body, "Disallowed CORS headers");
  EXPECT_EQ(p.preflight("https://ok.example", "GET", "").body, "Disallowed CORS headers");
  const auto all = p.preflight("https://evil.example", "PATCH", "x-trace, x-other");
  EXPECT_EQ(all.status, 400);
  EXPECT_EQ(all.body, "Disallowed CORS origin, method, headers");
  EXPECT_EQ(as_map(all.headers).count("Access-Control-Allow-Origin"), 0u);
  EXPECT_EQ(as_map(p.response_headers("https://ok.example")),
            (std::map<std::string, std::string>{{"Access-Control-Allow-Origin", "https://ok.example"},
                                                {"Vary", "Origin"},
                                                {"Access-Control-Allow-Credentials", "true"}}));
  EXPECT_EQ(
      as_map(p.response_headers("https://evil.example")),
      (std::map<std::string, std::string>{{"Access-Control-Allow-Credentials", "true"}, {"Vary", "Origin"}}));
}

TEST(Cors, EveryOriginWithCredentialsNamesTheOrigin) {
  CorsOptions o;
  o.allow_credentials = true;
  const CorsPolicy p(o);
  const auto m = as_map(p.preflight("https://a.example", "GET", std::nullopt).headers);
  EXPECT_EQ(m.at("Access-Control-Allow-Origin"), "https://a.example");
  EXPECT_EQ(m.at("Vary"), kVary);
  EXPECT_EQ(m.at("Access-Control-Allow-Credentials"), "true");
  const auto r = as_map(p.response_headers("https://a.example"));
  EXPECT_EQ(r.at("Access-Control-Allow-Origin"), "https://a.example");
  EXPECT_EQ(r.at("Access-Control-Allow-Credentials"), "true");
}

TEST(Cors, NoOriginAllowed) {
  CorsOptions o;
  o.allowed_origins = {};
  const CorsPolicy p(o);
  EXPECT_EQ(p.preflight("https://a.example", "GET", std::nullopt).status, 400);
  EXPECT_EQ(as_map(p.response_headers("https://a.example")),
            (std::map<std::string, std::string>{{"Vary", "Origin"}}));
}

}  // namespace
}  // namespace nanoserve::server
