// The HTTP server's connections over their life: disconnects that abort,
// half-closed clients, pipelining, deadlines, caps, shutdown, a busy port,
// errors mid-stream and many streams at once.

#include "server/http_server_fixture.h"

namespace nanoserve::server {
namespace {

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
