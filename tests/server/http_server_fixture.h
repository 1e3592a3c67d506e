#pragma once
// The HTTP server over a fake-model engine, for its tests (http_server_test.cc,
// http_server_lifecycle_test.cc).

#include "server/http_server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "server/engine_rig.h"
#include "server/http_test_client.h"

namespace nanoserve::server {

using nlohmann::json;
using testing::EngineRig;
using testing::EngineRigOptions;
using testing::FakeCodec;
using testing::http_request;
using testing::HttpResult;
using testing::sse_data;
using namespace std::chrono_literals;

class HttpServerTest : public ::testing::Test {
 protected:
  void start(std::string api_key = {}, int64_t max_waiting = 256, bool ready = true,
             bool metrics_require_key = false) {
    metrics_ = std::make_unique<ServerMetrics>("fake");
    rig_ = std::make_unique<EngineRig>(rig_options_);
    loop_ = std::make_unique<EngineLoop>(*rig_->engine, *metrics_, EngineLoop::Options{max_waiting});
    api_ = std::make_unique<Api>("fake", std::move(api_key), *metrics_, ParseBudget::Options{},
                                 metrics_require_key);
    options_.port = 0;
    options_.num_threads = 2;
    options_.shutdown_grace_ms = 2000;
    http_ = std::make_unique<HttpServer>(*api_, options_);
    auto port = http_->bind();
    ASSERT_TRUE(port.ok()) << port.status().to_string();
    port_ = *port;
    thread_ = std::thread([this] { http_->serve(); });
    loop_->start();
    if (ready) make_ready();
  }
  void make_ready() {
    ProtocolLimits limits;
    limits.max_model_len = 64;
    limits.max_num_seqs = 4;
    limits.vocab_size = codec_.vocab_size();
    api_->set_ready(codec_, *loop_, limits);
  }
  void TearDown() override {
    if (loop_) loop_->stop();
    if (http_) http_->stop();
    if (thread_.joinable()) thread_.join();
    loop_.reset();
  }
  HttpResult post(const std::string& path, const std::string& body, std::vector<std::string> headers = {}) {
    return http_request(port_, "POST", path, body, headers);
  }
  HttpResult get(const std::string& path, std::vector<std::string> headers = {}) {
    return http_request(port_, "GET", path, {}, headers);
  }
  std::string metrics_text() { return get("/metrics").body; }
  double metric(const std::string& series) {
    std::string text = metrics_text();
    size_t pos = text.find("\n" + series + " ");
    if (pos == std::string::npos) return -1;
    return std::stod(text.substr(pos + series.size() + 2));
  }

  HttpOptions options_;
  // Greedy output of the fake model: n tokens (ignore_eos), or up to the first end token.
  static std::string oracle(const std::vector<int32_t>& prompt, int32_t n, bool ignore_eos = true) {
    std::string s;
    for (int32_t t : nanoserve::testing::fake_greedy(prompt, static_cast<int32_t>(testing::kFakeVocab), n,
                                                     ignore_eos ? -1 : testing::kFakeEos))
      s += testing::fake_token_text(t);
    return s;
  }
  static std::string oracle(const std::string& prompt, int32_t n) {
    return oracle(EngineRig::bytes(prompt), n);
  }
  std::vector<int32_t> chat_ids(const std::string& content) {
    return *codec_.encode_chat({ChatMessage{"user", content}}, true);
  }
  Engine& engine() { return *rig_->engine; }

  EngineRigOptions rig_options_;
  std::unique_ptr<EngineRig> rig_;
  FakeCodec codec_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<Api> api_;
  std::unique_ptr<HttpServer> http_;
  std::thread thread_;
  int port_ = 0;
};

inline void expect_error_shape(const HttpResult& r, int status) {
  EXPECT_EQ(r.status, status) << r.body;
  json j = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.body;
  ASSERT_TRUE(j.contains("error")) << r.body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"]["type"].is_string());
  EXPECT_TRUE(j["error"].contains("param"));
  EXPECT_TRUE(j["error"].contains("code"));
}

}  // namespace nanoserve::server
