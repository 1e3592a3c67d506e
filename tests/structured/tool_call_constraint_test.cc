// The tool-call constraint on a byte vocabulary: forced calls from random
// walks always parse and satisfy their tool's schema; in automatic mode the
// text is free until the call opens, then constrained.
#include "structured/tool_call_constraint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "structured/tool_grammar.h"

namespace nanoserve::structured {
namespace {

using nlohmann::json;

// Every byte, a few multi-byte pieces, "<tool_call>" as one token, and an end token.
struct Vocab {
  std::shared_ptr<const TokenVocab> v;
  int32_t open = 0, eos = 0;
};
Vocab make_vocab() {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  for (const char* p : {"{\"", "\":", "\",", "\"}", "city", "days", " \"", "\n</", "tool_call>", "name"})
    pieces.push_back(p);
  pieces.push_back("<tool_call>");
  pieces.push_back("<|end|>");
  Vocab out;
  out.open = static_cast<int32_t>(pieces.size()) - 2;
  out.eos = static_cast<int32_t>(pieces.size()) - 1;
  std::vector<bool> special(pieces.size(), false);
  out.v = std::make_shared<TokenVocab>(pieces, special, std::vector<int32_t>{out.eos});
  return out;
}

std::vector<int32_t> bytes_to_tokens(const std::string& s) {
  std::vector<int32_t> t;
  for (unsigned char c : s) t.push_back(c);
  return t;
}

const json kWeather = json::parse(R"({"type":"object","properties":{
  "city":{"type":"string","maxLength":12},"days":{"type":"integer","minimum":1,"maximum":7}},
  "required":["city","days"]})");
const json kAdd = json::parse(R"({"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},
  "required":["a","b"],"additionalProperties":false})");

std::shared_ptr<ToolCallConstraintFactory> factory(const Vocab& voc, bool automatic, bool repeat) {
  auto g = tool_call_grammar({{"get_weather", kWeather}, {"add", kAdd}}, "arguments", false, repeat);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  auto json = std::make_shared<JsonConstraintFactory>(std::move(*g), voc.v);
  CallFraming fr;
  fr.open = {voc.open, '\n'};
  fr.close = bytes_to_tokens("\n</tool_call>");
  fr.next = {'\n', voc.open, '\n'};
  fr.repeat = repeat;
  fr.automatic = automatic;
  fr.trigger = "<tool_call>";
  return std::make_shared<ToolCallConstraintFactory>(json, fr);
}

// Samples uniformly among the allowed tokens until the end token (or `limit` tokens).
std::string random_walk(const Vocab& voc, TokenConstraint& c, std::mt19937& rng, int limit, bool* ended) {
  std::vector<float> logits(voc.v->size());
  std::string text;
  *ended = false;
  for (int i = 0; i < limit; ++i) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    c.apply(logits);
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < voc.v->size(); ++t) {
      if (logits[t] == 0.0f) {
        EXPECT_TRUE(c.allows(t));
        allowed.push_back(t);
      }
    }
    EXPECT_FALSE(allowed.empty()) << "no token allowed after " << text;
    if (allowed.empty()) return text;
    // Prefer ending soon, so walks finish: the end token and closing bytes get extra weight.
    int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    for (int32_t a : allowed)
      if ((a == voc.eos || a == '}' || a == '"') && rng() % 3 == 0) t = a;
    c.accept(t);
    if (t == voc.eos) {
      *ended = true;
      return text;
    }
    text += voc.v->piece(t);
  }
  return text;
}

void expect_valid_call(const json& call) {
  ASSERT_TRUE(call.is_object());
  ASSERT_EQ(call.size(), 2u) << call.dump();
  const json& args = call.at("arguments");
  if (call.at("name") == "get_weather") {
    EXPECT_TRUE(args.at("city").is_string());
    EXPECT_LE(args.at("city").get<std::string>().size(), 12u * 4);
    EXPECT_TRUE(args.at("days").is_number_integer());
    EXPECT_GE(args.at("days").get<int>(), 1);
    EXPECT_LE(args.at("days").get<int>(), 7);
  } else {
    ASSERT_EQ(call.at("name"), "add");
    EXPECT_EQ(args.size(), 2u);
    EXPECT_TRUE(args.at("a").is_number() && args.at("b").is_number());
  }
}

TEST(ToolCallConstraint, ForcedCallsAlwaysParseAndFitTheirSchema) {
  const Vocab voc = make_vocab();
  auto f = factory(voc, /*automatic=*/false, /*repeat=*/true);
  std::mt19937 rng(7);
  int ended = 0, calls = 0;
  for (int walk = 0; walk < 300; ++walk) {
    auto c = f->start();
    bool end = false;
    const std::string text = random_walk(voc, *c, rng, 600, &end);
    if (!end) continue;
    ++ended;
    // <tool_call>\n{...}\n</tool_call> [\n<tool_call>\n{...}\n</tool_call>]...
    size_t pos = 0;
    while (pos < text.size()) {
      if (pos > 0) {
        ASSERT_EQ(text[pos], '\n') << text;
        ++pos;
      }
      ASSERT_EQ(text.compare(pos, 12, "<tool_call>\n"), 0) << text;
      const size_t close = text.find("\n</tool_call>", pos);
      ASSERT_NE(close, std::string::npos) << text;
      const json call = json::parse(text.substr(pos + 12, close - pos - 12));
      expect_valid_call(call);
      ++calls;
      pos = close + 13;
    }
  }
  EXPECT_GT(ended, 200);
  EXPECT_GE(calls, ended);
}

TEST(ToolCallConstraint, SingleCallEndsAfterIt) {
  const Vocab voc = make_vocab();
  auto f = factory(voc, false, /*repeat=*/false);
  auto c = f->start();
  std::vector<float> logits(voc.v->size(), 0.0f);
  for (int32_t t : std::vector<int32_t>{voc.open, '\n'}) {
    c->apply(logits);
    EXPECT_TRUE(c->allows(t));
    c->accept(t);
  }
  for (int32_t t : bytes_to_tokens(R"({"name": "add", "arguments": {"a": 1, "b": 2}})")) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    c->apply(logits);
    ASSERT_TRUE(c->allows(t)) << static_cast<char>(t);
    c->accept(t);
  }
  for (int32_t t : bytes_to_tokens("\n</tool_call>")) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    c->apply(logits);
    EXPECT_TRUE(c->allows(t));
    EXPECT_FALSE(c->allows(voc.eos));  // the close is forced
    c->accept(t);
  }
  std::fill(logits.begin(), logits.end(), 0.0f);
  c->apply(logits);
  EXPECT_TRUE(c->allows(voc.eos));
  EXPECT_FALSE(c->allows('\n'));  // no second call
}

TEST(ToolCallConstraint, AutomaticIsFreeUntilTheCallOpens) {
  const Vocab voc = make_vocab();
  auto f = factory(voc, /*automatic=*/true, /*repeat=*/false);
  auto c = f->start();
  std::vector<float> logits(voc.v->size(), 0.5f);
  for (int32_t t : bytes_to_tokens("Sure, x < y. ")) {
    c->apply(logits);
    for (float l : logits) ASSERT_EQ(l, 0.5f);  // free text: nothing masked
    c->accept(t);
  }
  c->apply(logits);
  c->accept(voc.open);  // the call opens
  std::fill(logits.begin(), logits.end(), 0.0f);
  c->apply(logits);
  EXPECT_TRUE(c->allows('{'));
  EXPECT_TRUE(c->allows('\n'));
  EXPECT_FALSE(c->allows('x'));
  EXPECT_FALSE(c->allows(voc.eos));
  std::mt19937 rng(3);
  bool ended = false;
  const std::string rest = random_walk(voc, *c, rng, 600, &ended);
  ASSERT_TRUE(ended) << rest;
  const size_t close = rest.find("\n</tool_call>");
  ASSERT_NE(close, std::string::npos) << rest;
  EXPECT_EQ(close + 13, rest.size()) << rest;
  expect_valid_call(json::parse(rest.substr(0, close)));
}

TEST(ToolCallConstraint, AutomaticTriggerSplitAcrossTokens) {
  const Vocab voc = make_vocab();
  auto f = factory(voc, true, false);
  auto c = f->start();
  std::vector<float> logits(voc.v->size(), 0.0f);
  for (int32_t t : bytes_to_tokens("<")) {
    c->apply(logits);
    c->accept(t);
  }
  c->apply(logits);
  c->accept(voc.v->size() - 4);  // "tool_call>": the trigger ends inside this token
  std::fill(logits.begin(), logits.end(), 0.0f);
  c->apply(logits);
  EXPECT_FALSE(c->allows('x'));
  EXPECT_TRUE(c->allows('{'));
}

TEST(ToolGrammar, RefusedSchemaNamesTheTool) {
  auto g = tool_call_grammar({{"ok", kAdd}, {"bad", json::parse(R"({"type":"integer","multipleOf":2})")}},
                             "arguments", false, false);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("tool 'bad'"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("multipleOf"), std::string::npos) << g.status().message();
}

}  // namespace
}  // namespace nanoserve::structured
