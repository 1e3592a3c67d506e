// The HTTP layer end to end over real sockets, against the real Engine over
// the fake model (server/engine_rig.h), whose greedy output is known exactly.

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
namespace {

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

void expect_error_shape(const HttpResult& r, int status) {
  EXPECT_EQ(r.status, status) << r.body;
  json j = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.body;
  ASSERT_TRUE(j.contains("error")) << r.body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"]["type"].is_string());
  EXPECT_TRUE(j["error"].contains("param"));
  EXPECT_TRUE(j["error"].contains("code"));
}

TEST_F(HttpServerTest, HealthIs503UntilReady) {
  start({}, 256, /*ready=*/false);
  HttpResult health = get("/health");
  expect_error_shape(health, 503);
  EXPECT_EQ(health.headers["retry-after"], "1");
  expect_error_shape(post("/v1/completions", R"({"prompt": "ab"})"), 503);
  make_ready();
  EXPECT_EQ(get("/health").status, 200);
}

TEST_F(HttpServerTest, Completion) {
  start();
  HttpResult r =
      post("/v1/completions", R"({"model": "fake", "prompt": "abc", "max_tokens": 5, "temperature": 0,
      "ignore_eos": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "application/json");
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], oracle("abc", 5));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"], (json{{"prompt_tokens", 3}, {"completion_tokens", 5}, {"total_tokens", 8}}));
}

TEST_F(HttpServerTest, CompletionBatchOfPromptsTimesN) {
  start();
  HttpResult r = post("/v1/completions", R"({"prompt": [[120, 121], [122]], "max_tokens": 3, "n": 2,
      "temperature": 0, "ignore_eos": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 4u);
  EXPECT_EQ(j["choices"][0]["text"], oracle(std::vector<int32_t>{120, 121}, 3));
  EXPECT_EQ(j["choices"][1]["text"], oracle(std::vector<int32_t>{120, 121}, 3));
  EXPECT_EQ(j["choices"][2]["text"], oracle(std::vector<int32_t>{122}, 3));
  EXPECT_EQ(j["choices"][3]["index"], 3);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  // Choice i of a seeded request samples with seed + i: the same request gives
  // the same choices, and its two choices differ.
  const std::string seeded = R"({"prompt": "ab", "max_tokens": 12, "n": 2, "seed": 7, "ignore_eos": true})";
  json s1 = json::parse(post("/v1/completions", seeded).body),
       s2 = json::parse(post("/v1/completions", seeded).body);
  EXPECT_EQ(s1["choices"][0]["text"], s2["choices"][0]["text"]);
  EXPECT_EQ(s1["choices"][1]["text"], s2["choices"][1]["text"]);
  EXPECT_NE(s1["choices"][0]["text"], s1["choices"][1]["text"]);
}

TEST_F(HttpServerTest, ChatWithStopAndLogprobs) {
  start();
  // A stop string cut from the middle of what greedy decoding gives.
  const std::vector<int32_t> prompt = chat_ids("hello");
  const std::string full = oracle(prompt, 20);
  ASSERT_GE(full.size(), 6u);
  const std::string stop = full.substr(3, 2);
  json body = {{"messages", {{{"role", "user"}, {"content", "hello"}}}},
               {"max_tokens", 20},
               {"temperature", 0},
               {"ignore_eos", true},
               {"stop", {stop}},
               {"logprobs", true},
               {"top_logprobs", 2}};
  HttpResult r = post("/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["content"], full.substr(0, full.find(stop)));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  const json& lp = j["choices"][0]["logprobs"]["content"];
  EXPECT_EQ(lp.size(), j["usage"]["completion_tokens"].get<size_t>());
  const int32_t first =
      nanoserve::testing::fake_greedy(prompt, static_cast<int32_t>(testing::kFakeVocab), 1, -1)[0];
  EXPECT_EQ(lp[0]["token"], codec_.token_text(first));
  EXPECT_EQ(lp[0]["top_logprobs"].size(), 2u);
}

TEST_F(HttpServerTest, ChatStreamSseFormat) {
  start();
  HttpResult r = post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}],
      "max_tokens": 6, "n": 2, "temperature": 0, "ignore_eos": true, "stream": true,
      "stream_options": {"include_usage": true}})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  auto events = sse_data(r.body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  // Every event is "data: <json>\n\n".
  EXPECT_EQ(r.body.rfind("data: [DONE]\n\n"), r.body.size() - 14);
  std::string text[2];
  std::string finish[2];
  bool role_first[2] = {false, false};
  bool seen[2] = {false, false};
  json usage;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json c = json::parse(events[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (c["choices"].empty()) {
      usage = c["usage"];
      EXPECT_EQ(i + 2, events.size()) << "the usage chunk comes last";
      continue;
    }
    EXPECT_TRUE(c["usage"].is_null());
    int idx = c["choices"][0]["index"];
    const json& delta = c["choices"][0]["delta"];
    if (!seen[idx]) role_first[idx] = delta.value("role", "") == "assistant";
    seen[idx] = true;
    text[idx] += delta.value("content", "");
    if (!c["choices"][0]["finish_reason"].is_null()) finish[idx] = c["choices"][0]["finish_reason"];
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(role_first[i]);
    EXPECT_EQ(text[i], oracle(chat_ids("hi"), 6));
    EXPECT_EQ(finish[i], "length");
  }
  EXPECT_EQ(usage["completion_tokens"], 12);
  EXPECT_EQ(usage["total_tokens"], usage["prompt_tokens"].get<int>() + 12);
}

TEST_F(HttpServerTest, CompletionStream) {
  start();
  HttpResult r = post("/v1/completions", R"({"prompt": "ab", "max_tokens": 3, "stream": true, "logprobs": 1,
          "temperature": 0, "ignore_eos": true})");
  ASSERT_EQ(r.status, 200);
  auto events = sse_data(r.body);
  std::string text;
  int n_logprobs = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json c = json::parse(events[i]);
    EXPECT_EQ(c["object"], "text_completion");
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["logprobs"].is_null()) n_logprobs += c["choices"][0]["logprobs"]["tokens"].size();
  }
  EXPECT_EQ(text, oracle("ab", 3));
  EXPECT_EQ(n_logprobs, 3);
  EXPECT_EQ(events.back(), "[DONE]");
}

TEST_F(HttpServerTest, ValidationErrorsKeepTheServerUp) {
  start();
  expect_error_shape(post("/v1/chat/completions", "{oops"), 400);
  expect_error_shape(post("/v1/chat/completions", R"({"model": "other", "messages": [{"role": "user",
      "content": "x"}]})"),
                     404);
  expect_error_shape(post("/v1/chat/completions", R"({"messages": []})"), 400);
  expect_error_shape(post("/v1/completions", R"({"prompt": "", "max_tokens": 1})"), 400);
  expect_error_shape(post("/v1/completions", R"({"prompt": "a", "max_tokens": 0})"), 400);
  expect_error_shape(post("/v1/completions", R"({"prompt": "a", "n": 5})"), 400);  // > max_num_seqs 4
  expect_error_shape(post("/v1/completions", R"({"prompt": "a", "temperature": -1})"), 400);
  expect_error_shape(post("/v1/completions", R"({"prompt": "a", "top_p": 0})"), 400);
  expect_error_shape(post("/v1/completions", R"({"prompt": "a", "top_k": -2})"), 400);
  expect_error_shape(post("/v1/completions", R"({"prompt": "a", "temperature": NaN})"), 400);
  HttpResult ctx =
      post("/v1/completions", R"({"prompt": ")" + std::string(60, 'a') + R"(", "max_tokens": 10})");
  expect_error_shape(ctx, 400);
  EXPECT_NE(ctx.body.find("This model's maximum context length is 64 tokens"), std::string::npos);
  expect_error_shape(post("/v1/completions", R"({"prompt": ")" + std::string(70, 'a') + R"("})"), 400);
  expect_error_shape(get("/no/such/route"), 404);
  // Still serving.
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "ok", "max_tokens": 2})").status, 200);
}

TEST_F(HttpServerTest, BodyOver4MiBIs413) {
  start();
  std::string big = R"({"prompt": ")" + std::string((4u << 20) + 16, 'a') + "\"}";
  expect_error_shape(post("/v1/completions", big), 413);
  EXPECT_EQ(get("/health").status, 200);
}

TEST_F(HttpServerTest, ApiKey) {
  start("sekret");
  expect_error_shape(post("/v1/completions", R"({"prompt": "a", "max_tokens": 1})"), 401);
  expect_error_shape(
      post("/v1/completions", R"({"prompt": "a", "max_tokens": 1})", {"Authorization: Bearer nope"}), 401);
  EXPECT_EQ(get("/metrics").status, 200);           // public unless --metrics-require-key, as in vLLM
  expect_error_shape(get("/no/such/route"), 404);   // unknown paths are 404, key or not
  expect_error_shape(get("/v1/completions"), 405);  // the method is checked before the key
  expect_error_shape(
      post("/v1/completions", R"({"prompt": "a", "max_tokens": 1})", {"Authorization: Bearer sekret%00"}),
      401);
  expect_error_shape(post("/v1/completions", R"({"prompt": "a", "max_tokens": 1})",
                          {"Authorization: Bearer sekret", "Authorization: Bearer sekret"}),
                     401);
  EXPECT_EQ(
      post("/v1/completions", R"({"prompt": "a", "max_tokens": 1})", {"Authorization: Bearer sekret"}).status,
      200);
  EXPECT_EQ(get("/health").status, 200);     // public
  EXPECT_EQ(get("/v1/models").status, 200);  // public
}

TEST_F(HttpServerTest, MetricsRequireKeyWhenAsked) {
  start("sekret", 256, true, /*metrics_require_key=*/true);
  expect_error_shape(get("/metrics"), 401);
  expect_error_shape(get("/metrics", {"Authorization: Bearer sekretx"}), 401);
  const HttpResult r = get("/metrics", {"Authorization: Bearer sekret"});
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("nanoserve:num_requests_running"), std::string::npos);
  EXPECT_EQ(get("/health").status, 200);
  EXPECT_EQ(get("/v1/models").status, 200);
}

TEST_F(HttpServerTest, ModelsTokenizeDetokenize) {
  start();
  json models = json::parse(get("/v1/models").body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "fake");
  json t = json::parse(post("/tokenize", R"({"prompt": "hi"})").body);
  EXPECT_EQ(t["tokens"], (json{104, 105}));
  EXPECT_EQ(t["count"], 2);
  json d = json::parse(post("/detokenize", R"({"tokens": [104, 105]})").body);
  EXPECT_EQ(d["prompt"], "hi");
  expect_error_shape(post("/detokenize", R"({"tokens": [99999]})"), 400);
}

TEST_F(HttpServerTest, QueueFullIs429) {
  rig_options_.max_num_seqs = 1;
  start({}, /*max_waiting=*/1);
  rig_->model->step_delay_ms = 20;
  // One running, then one waiting behind it: the next does not fit.
  int a = testing::open_request(port_, "POST", "/v1/completions",
                                R"({"prompt": "a", "max_tokens": 60, "ignore_eos": true})");
  for (int i = 0; i < 400 && loop_->num_steps() < 2; ++i) std::this_thread::sleep_for(5ms);
  int b = testing::open_request(port_, "POST", "/v1/completions",
                                R"({"prompt": "b", "max_tokens": 60, "ignore_eos": true})");
  for (int i = 0; i < 400 && engine().stats().num_waiting < 1; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(engine().stats().num_waiting, 1);
  HttpResult full = post("/v1/completions", R"({"prompt": "c", "max_tokens": 1})");
  expect_error_shape(full, 429);
  EXPECT_EQ(full.headers["retry-after"], "1");
  ::close(a);
  ::close(b);
}

TEST_F(HttpServerTest, RequestThatCanNeverBeAdmittedIs400) {
  start({}, /*max_waiting=*/2);
  HttpResult r = post("/v1/completions", R"({"prompt": "a", "n": 3, "max_tokens": 1})");
  expect_error_shape(r, 400);
  EXPECT_NE(r.body.find("\"param\":\"n\""), std::string::npos) << r.body;
  EXPECT_EQ(r.headers.count("retry-after"), 0u);
  r = post("/v1/completions", R"({"prompt": "a", "best_of": 3, "max_tokens": 1})");
  expect_error_shape(r, 400);
  EXPECT_NE(r.body.find("\"param\":\"best_of\""), std::string::npos) << r.body;
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "a", "n": 2, "max_tokens": 1})").status, 200);
}

TEST_F(HttpServerTest, DisconnectMidStreamAborts) {
  start();
  rig_->model->step_delay_ms = 5;
  int fd =
      testing::open_request(port_, "POST", "/v1/completions",
                            R"({"prompt": "abc", "max_tokens": 60, "stream": true, "ignore_eos": true})");
  ASSERT_GE(fd, 0);
  char buf[4096];
  ASSERT_GT(::recv(fd, buf, sizeof(buf), 0), 0);  // headers and the first chunks arrived
  ::close(fd);
  for (int i = 0; i < 400 && engine().stats().num_aborted == 0; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(engine().stats().num_aborted, 1);
  EXPECT_FALSE(engine().has_unfinished());
  EXPECT_EQ(engine().block_manager().num_in_use_blocks(), 0);
  for (int i = 0; i < 100 && metric("nanoserve:kv_cache_usage_perc{model_name=\"fake\"}") != 0.0; ++i) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(metric("nanoserve:kv_cache_usage_perc{model_name=\"fake\"}"), 0.0);
  EXPECT_EQ(metric("nanoserve:request_success_total{model_name=\"fake\",finished_reason=\"abort\"}"), 1.0);
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "ok", "max_tokens": 2})").status, 200);
}

TEST_F(HttpServerTest, DisconnectWhileWaitingNonStreamingAborts) {
  start();
  rig_->model->step_delay_ms = 5;
  int fd = testing::open_request(port_, "POST", "/v1/completions",
                                 R"({"prompt": "abc", "max_tokens": 60, "ignore_eos": true})");
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 200 && !engine().has_unfinished(); ++i) std::this_thread::sleep_for(5ms);
  // A reset, not an orderly close: end of stream alone is a half-close, which still gets its reply.
  testing::reset_connection(fd);
  for (int i = 0; i < 400 && engine().stats().num_aborted == 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(engine().stats().num_aborted, 1);
  EXPECT_FALSE(engine().has_unfinished());
}

// Issue 36 item 8: an orderly close (what most clients do when they give up), not a reset,
// of a non-streaming request that is running and of one still queued: both are aborted within
// a step and counted as aborted.
TEST_F(HttpServerTest, NonStreamingClientThatClosesIsAbortedRunningOrQueued) {
  rig_options_.max_num_seqs = 1;
  start();
  rig_->model->step_delay_ms = 10;
  const std::string body = R"({"prompt": "abc", "max_tokens": 60, "ignore_eos": true})";
  int running = testing::open_request(port_, "POST", "/v1/completions", body);
  ASSERT_GE(running, 0);
  for (int i = 0; i < 400 && engine().stats().num_running < 1; ++i) std::this_thread::sleep_for(5ms);
  int queued = testing::open_request(port_, "POST", "/v1/completions", body);
  ASSERT_GE(queued, 0);
  for (int i = 0; i < 400 && engine().stats().num_waiting < 1; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(engine().stats().num_waiting, 1);
  ::close(queued);
  ::close(running);
  for (int i = 0; i < 400 && engine().stats().num_aborted < 2; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(engine().stats().num_aborted, 2);
  EXPECT_FALSE(engine().has_unfinished());
  const std::string series = "nanoserve:request_success_total{model_name=\"fake\",finished_reason=\"abort\"}";
  for (int i = 0; i < 100 && metric(series) < 2; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(metric(series), 2.0);
}

TEST_F(HttpServerTest, HalfClosedClientStillGetsItsReply) {
  start();
  rig_->model->step_delay_ms = 2;
  int fd =
      testing::open_request(port_, "POST", "/v1/completions",
                            R"({"prompt": "abc", "max_tokens": 20, "temperature": 0, "ignore_eos": true})");
  ASSERT_GE(fd, 0);
  ::shutdown(fd, SHUT_WR);
  HttpResult r = testing::parse_response(testing::read_all(fd));
  ::close(fd);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["choices"][0]["text"], oracle("abc", 20));
  EXPECT_EQ(engine().stats().num_aborted, 0);
}

TEST_F(HttpServerTest, PipelinedRequestsAnsweredInOrder) {
  start();
  int fd = testing::connect_loopback(port_);
  ASSERT_GE(fd, 0);
  const std::string body = R"({"prompt": "xy", "max_tokens": 3, "temperature": 0, "ignore_eos": true})";
  const std::string one =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  ASSERT_TRUE(testing::send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + one +
                                        "GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  std::string raw = testing::read_all(fd);
  ::close(fd);
  size_t a = raw.find("HTTP/1.1 200"), b = raw.find("HTTP/1.1 200", a + 1), c = raw.find("HTTP/1.1 404");
  ASSERT_NE(a, std::string::npos) << raw;
  ASSERT_NE(b, std::string::npos) << raw;
  ASSERT_NE(c, std::string::npos) << raw;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_NE(raw.find("\"text\":" + json(oracle("xy", 3)).dump()), std::string::npos) << raw;
}

// Shutdown as serve does it: the engine loop first, then HTTP. Every stream in
// flight ends with an error event, [DONE] and the last chunk; a waiting
// non-streaming request gets 503.
TEST_F(HttpServerTest, ShutdownEndsEveryInFlightRequestCleanly) {
  start();
  rig_->model->step_delay_ms = 5;
  std::vector<int> streams;
  for (int i = 0; i < 6; ++i) {
    streams.push_back(
        testing::open_request(port_, "POST", "/v1/completions",
                              R"({"prompt": "abc", "max_tokens": 60, "stream": true, "ignore_eos": true})"));
  }
  int plain = testing::open_request(port_, "POST", "/v1/completions",
                                    R"({"prompt": "abc", "max_tokens": 60, "ignore_eos": true})");
  auto in_engine = [&] { return engine().stats().num_running + engine().stats().num_waiting; };
  for (int i = 0; i < 400 && in_engine() < 7; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(in_engine(), 7);
  loop_->stop();
  http_->stop();
  for (int fd : streams) {
    std::string raw = testing::read_all(fd);
    ::close(fd);
    ASSERT_GE(raw.size(), 5u);
    EXPECT_EQ(raw.substr(raw.size() - 5), "0\r\n\r\n") << raw;  // the terminating chunk
    auto events = sse_data(testing::parse_response(raw).body);
    ASSERT_GE(events.size(), 2u) << raw;
    EXPECT_EQ(events.back(), "[DONE]");
    EXPECT_TRUE(json::parse(events[events.size() - 2]).contains("error")) << raw;
  }
  HttpResult r = testing::parse_response(testing::read_all(plain));
  ::close(plain);
  expect_error_shape(r, 503);
  thread_.join();  // serve() returns once the replies are out
}

// Slowloris: a head trickled a byte at a time is cut at the header deadline, and an
// idle keep-alive connection at the keep-alive timeout.
TEST_F(HttpServerTest, SlowHeadIsCutAtTheHeaderDeadline) {
  options_.header_timeout_ms = 300;
  options_.keep_alive_timeout_ms = 200;
  start();
  int slow = testing::connect_loopback(port_);
  ASSERT_TRUE(testing::send_all(slow, "GET /health HTTP/1.1\r\nX-Slow: "));
  auto t0 = std::chrono::steady_clock::now();
  bool closed = false;
  for (int i = 0; i < 40 && !closed; ++i) {
    std::this_thread::sleep_for(50ms);
    closed = !testing::send_all(slow, "a");
    char c;
    if (!closed && ::recv(slow, &c, 1, MSG_DONTWAIT) == 0) closed = true;
  }
  EXPECT_TRUE(closed);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
  ::close(slow);

  int idle = testing::connect_loopback(port_);
  ASSERT_TRUE(testing::send_all(idle, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  t0 = std::chrono::steady_clock::now();
  std::string raw = testing::read_all(idle);  // the reply, then the close when idle
  ::close(idle);
  EXPECT_EQ(testing::parse_response(raw).status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
}

// Bodies in flight are bounded: past max_large_bodies a large body gets 503 + Retry-After
// (it may fit later), small bodies still pass, and the slot comes back.
TEST_F(HttpServerTest, LargeBodiesInFlightAreCapped) {
  options_.max_large_bodies = 1;
  start();
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n";
  int first = testing::connect_loopback(port_);
  ASSERT_TRUE(testing::send_all(first, head + "{\"prompt\": \""));  // holds the one slot, body unfinished
  std::this_thread::sleep_for(100ms);
  int second = testing::open_request(port_, "POST", "/v1/completions",
                                     R"({"prompt": ")" + std::string(100000, 'a') + "\"}");
  HttpResult refused = testing::parse_response(testing::read_all(second));
  ::close(second);
  expect_error_shape(refused, 503);
  EXPECT_EQ(refused.headers["retry-after"], "1");
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "ok", "max_tokens": 2})").status, 200);
  testing::reset_connection(first);
  std::this_thread::sleep_for(100ms);
  HttpResult later = post("/v1/completions", R"({"prompt": ")" + std::string(100000, 'a') + "\"}");
  EXPECT_EQ(later.status, 400) << later.body;  // parsed now (and too long for the context)
}

TEST_F(HttpServerTest, StopBeforeServeReturnsAtOnce) {
  metrics_ = std::make_unique<ServerMetrics>("fake");
  api_ = std::make_unique<Api>("fake", "", *metrics_);
  HttpOptions opts;
  opts.port = 0;
  for (int i = 0; i < 20; ++i) {
    HttpServer http(*api_, opts);
    ASSERT_TRUE(http.bind().ok());
    http.stop();
    auto t0 = std::chrono::steady_clock::now();
    http.serve();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  }
}

TEST_F(HttpServerTest, BusyPortIsAnErrorNamingIt) {
  start();
  ServerMetrics other_metrics("fake");
  Api other_api("fake", "", other_metrics);
  HttpOptions opts;
  opts.port = port_;
  HttpServer other(other_api, opts);
  auto bound = other.bind();
  ASSERT_FALSE(bound.ok());
  EXPECT_NE(bound.status().message().find("127.0.0.1:" + std::to_string(port_)), std::string::npos)
      << bound.status().message();
}

TEST_F(HttpServerTest, EngineErrorMidStreamSendsErrorEvent) {
  start();
  rig_->model->step_delay_ms = 5;
  int fd =
      testing::open_request(port_, "POST", "/v1/completions",
                            R"({"prompt": "abc", "max_tokens": 60, "stream": true, "ignore_eos": true})");
  char buf[4096];
  std::string raw;
  ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  ASSERT_GT(n, 0);
  raw.append(buf, static_cast<size_t>(n));
  rig_->model->fail_next_forward();
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) raw.append(buf, static_cast<size_t>(n));
  ::close(fd);
  auto events = sse_data(testing::parse_response(raw).body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  json err = json::parse(events[events.size() - 2]);
  ASSERT_TRUE(err.contains("error")) << events[events.size() - 2];
  EXPECT_NE(err["error"]["message"].get<std::string>().find("failing this forward"), std::string::npos);
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "ok", "max_tokens": 2})").status, 200);
}

TEST_F(HttpServerTest, ManyConcurrentStreams) {
  start();
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 12; ++i) {
    clients.emplace_back([&, i] {
      std::string prompt(1, static_cast<char>('a' + i));
      HttpResult r = post("/v1/completions",
                          R"({"prompt": ")" + prompt +
                              R"(", "max_tokens": 8, "stream": true, "temperature": 0, "ignore_eos": true})");
      std::string text;
      for (const std::string& e : sse_data(r.body)) {
        if (e != "[DONE]") text += json::parse(e)["choices"][0]["text"].get<std::string>();
      }
      if (text == oracle(prompt, 8)) ++ok;
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 12);
}

}  // namespace
}  // namespace nanoserve::server
