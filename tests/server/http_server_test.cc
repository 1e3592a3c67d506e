// The HTTP server end to end over a fake-model engine: the endpoints, their
// responses, streaming, keys, metrics and the refusals.

#include "server/http_server_fixture.h"

namespace nanoserve::server {
namespace {

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
  EXPECT_EQ(get("/health").status, 200);   // public
  EXPECT_EQ(get("/version").status, 200);  // public
  // Every /v1 path needs the key, as in vLLM: the model list too.
  expect_error_shape(get("/v1/models"), 401);
  expect_error_shape(get("/v1/models/fake"), 401);
  EXPECT_EQ(get("/v1/models", {"Authorization: Bearer sekret"}).status, 200);
  EXPECT_EQ(get("/v1/models/fake", {"Authorization: Bearer sekret"}).status, 200);
}

TEST_F(HttpServerTest, MetricsRequireKeyWhenAsked) {
  start("sekret", 256, true, /*metrics_require_key=*/true);
  expect_error_shape(get("/metrics"), 401);
  expect_error_shape(get("/metrics", {"Authorization: Bearer sekretx"}), 401);
  const HttpResult r = get("/metrics", {"Authorization: Bearer sekret"});
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("nanoserve:num_requests_running"), std::string::npos);
  EXPECT_EQ(get("/health").status, 200);
  EXPECT_EQ(get("/v1/models", {"Authorization: Bearer sekret"}).status, 200);
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

}  // namespace
}  // namespace nanoserve::server
