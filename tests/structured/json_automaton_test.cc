// The JSON automaton: whole documents it must accept, prefixes it must refuse,
// and a random walk whose every finished output must parse as JSON.

#include "structured/json_automaton.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "structured/schema_compiler.h"

namespace nanoserve::structured {
namespace {

using nlohmann::json;

Grammar schema(const char* text) {
  StatusOr<Grammar> g = compile_schema(json::parse(text));
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? std::move(*g) : json_object_grammar();
}

// The whole text is a finished value.
bool accepts(const Grammar& g, std::string_view text) {
  JsonState s(&g);
  return s.feed(text) && s.can_finish();
}
// The text can be continued into a finished value.
bool viable(const Grammar& g, std::string_view text) {
  JsonState s(&g);
  return s.feed(text);
}

TEST(JsonAutomaton, JsonObjectAcceptsObjects) {
  const Grammar g = json_object_grammar();
  for (const char* doc : {"{}", "{ }", R"({"a":1})", R"({"a": [1, 2.5, -3e+2, true, false, null]})",
                          R"({"nested": {"x": {"y": []}}, "s": "esc \" \\ \/ \n \u00e9 é 😀"})",
                          "{\n  \"k\" : \"v\" ,\n  \"k2\":{}\n}", R"({"": 0, "n": -0.25})"}) {
    EXPECT_TRUE(accepts(g, doc)) << doc;
  }
}

TEST(JsonAutomaton, JsonObjectRefusesInvalidPrefixes) {
  const Grammar g = json_object_grammar();
  for (const char* bad : {R"({"a":1,})",
                          R"({"a":1,,)",
                          R"({,)",
                          R"({"a" 1)",
                          R"({"a":01)",
                          R"({"a":1.})",
                          R"({"a":.5)",
                          R"({"a":[1,])",
                          R"({"a":tru })",
                          R"({"a":nul,)",
                          R"({'a')",
                          "[",
                          "1",
                          "\"s\"",
                          R"({"a":"x)"
                          "\n",
                          R"({"a":"\x"})",
                          R"({"a":"\ud800"})",
                          R"({"a":1}})",
                          R"({"a":1} )",
                          "{a",
                          R"({"a":+1})",
                          R"({"a":-01})",
                          R"({"a":1e})"}) {
    EXPECT_FALSE(accepts(g, bad)) << bad;
  }
  EXPECT_FALSE(viable(g, R"({"a":1,})"));
  EXPECT_FALSE(viable(g, R"({"a":[1,])"));
  EXPECT_FALSE(viable(g, "{\"a\":\"\xC0\x80\"}"));   // overlong UTF-8
  EXPECT_FALSE(viable(g, "{\"a\":\"\xED\xA0\x80"));  // a surrogate in UTF-8
  EXPECT_TRUE(viable(g, "{\"a\":\"\xE2\x82"));       // half a character is a fine prefix
}

TEST(JsonAutomaton, WhitespaceRunsAreBounded) {
  const Grammar g = json_object_grammar();
  EXPECT_TRUE(viable(g, "{" + std::string(kMaxWhitespace, ' ')));
  EXPECT_FALSE(viable(g, "{" + std::string(kMaxWhitespace + 1, ' ')));
}

TEST(JsonAutomaton, RequiredAndAdditionalProperties) {
  const Grammar g = schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
                               "c":{"type":"boolean"}},"required":["b"],"additionalProperties":false})");
  EXPECT_TRUE(accepts(g, R"({"b":"x"})"));
  EXPECT_TRUE(accepts(g, R"({"a":1,"b":"x","c":true})"));
  EXPECT_TRUE(accepts(g, R"({"a": 1, "b": ""})"));
  EXPECT_FALSE(viable(g, R"({})"));              // b is required
  EXPECT_FALSE(viable(g, R"({"a":1})"));         // still missing b
  EXPECT_FALSE(viable(g, R"({"d")"));            // not a declared key
  EXPECT_FALSE(viable(g, R"({"b":"x","a")"));    // keys come in declared order
  EXPECT_FALSE(viable(g, R"({"a":1,"a")"));      // no duplicates
  EXPECT_FALSE(viable(g, R"({"b":"x","c":1)"));  // c is a boolean
}

TEST(JsonAutomaton, AdditionalPropertiesSchema) {
  const Grammar g = schema(R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],
                               "additionalProperties":{"type":"string"}})");
  EXPECT_TRUE(accepts(g, R"({"id":3,"x":"y","idx":"z"})"));
  EXPECT_FALSE(viable(g, R"({"id":3,"x":1)"));
  EXPECT_FALSE(viable(g, R"({"id":3,"id")"));  // a declared name is never an other key
}

TEST(JsonAutomaton, EnumAndConst) {
  const Grammar g = schema(R"({"enum":["red","green",1,12,null,{"k":[1]}]})");
  for (const char* ok : {R"("red")", R"("green")", "1", "12", "null", R"({"k":[1]})"})
    EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {R"("blue")", "2", "123", R"("re")", "true"}) EXPECT_FALSE(accepts(g, bad)) << bad;
  const Grammar c = schema(R"({"type":"object","properties":{"v":{"const":"fixed"}},"required":["v"]})");
  EXPECT_TRUE(accepts(c, R"({"v":"fixed"})"));
  EXPECT_FALSE(viable(c, R"({"v":"fixee)"));
}

TEST(JsonAutomaton, IntegerBounds) {
  const Grammar g = schema(R"({"type":"integer","minimum":-5,"maximum":120})");
  for (const char* ok : {"0", "-0", "-5", "-1", "7", "99", "120", "100"}) EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {"-6", "121", "1000", "1.5", "1e2", "007", "-01"})
    EXPECT_FALSE(accepts(g, bad)) << bad;
  EXPECT_TRUE(accepts(g, "13"));  // 13x is above 120 for every digit x: 13 can only end here
  EXPECT_FALSE(viable(g, "130"));
  const Grammar pos = schema(R"({"type":"integer","minimum":1})");
  EXPECT_FALSE(viable(pos, "-"));
  EXPECT_FALSE(viable(pos, "0"));
  EXPECT_FALSE(viable(g, "-6"));
  const Grammar x = schema(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})");
  EXPECT_FALSE(accepts(x, "0"));
  EXPECT_TRUE(accepts(x, "1"));
  EXPECT_TRUE(accepts(x, "9"));
  EXPECT_FALSE(accepts(x, "10"));
}

TEST(JsonAutomaton, NumberBounds) {
  const Grammar g = schema(R"({"type":"number","minimum":0,"maximum":10.5})");
  for (const char* ok : {"0", "0.25", "9.999", "10", "3"}) EXPECT_TRUE(accepts(g, ok)) << ok;
  // 10.x could exceed 10.5, so no fraction after 10; no exponent when bounded.
  for (const char* bad : {"10.1", "11", "-1", "1e1", "-0.5"}) EXPECT_FALSE(accepts(g, bad)) << bad;
  const Grammar n = schema(R"({"type":"number"})");
  for (const char* ok : {"-12.5e-3", "0", "1E+9", "3.14159"}) EXPECT_TRUE(accepts(n, ok)) << ok;
}

TEST(JsonAutomaton, StringLengthCountsCodePoints) {
  const Grammar g = schema(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(accepts(g, R"("a")"));
  EXPECT_TRUE(accepts(g, R"("ab")"));
  EXPECT_TRUE(accepts(g, "\"é😀\\n\""));
  EXPECT_FALSE(viable(g, R"("abcd)"));
  EXPECT_FALSE(viable(g, R"("ab\u0041\)"));
  EXPECT_TRUE(accepts(g, R"("a\u00e9")"));
}

TEST(JsonAutomaton, ArraysCountItems) {
  const Grammar g = schema(R"({"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2})");
  EXPECT_FALSE(accepts(g, "[]"));
  EXPECT_TRUE(accepts(g, "[true]"));
  EXPECT_TRUE(accepts(g, "[ true , false ]"));
  EXPECT_FALSE(viable(g, "[true,false,"));
  EXPECT_FALSE(viable(g, "[1"));
}

TEST(JsonAutomaton, AnyOfForksThreads) {
  const Grammar g =
      schema(R"({"anyOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                                        {"type":"object","properties":{"a":{"type":"string"},"b":{"type":"null"}},
                                         "required":["a","b"]}, {"type":["integer","null"]}]})");
  EXPECT_TRUE(accepts(g, R"({"a":1})"));
  EXPECT_TRUE(accepts(g, R"({"a":"x","b":null})"));
  EXPECT_TRUE(accepts(g, "42"));
  EXPECT_TRUE(accepts(g, "null"));
  EXPECT_FALSE(viable(g, R"({"a":"x"})"));  // the string branch needs b
  EXPECT_FALSE(viable(g, R"({"a":1,"b")"));
  JsonState s(&g);
  ASSERT_TRUE(s.feed(R"({"a")"));
  EXPECT_EQ(s.num_threads(), 2);
}

TEST(JsonAutomaton, RecursiveRefsStopAtTheDepthLimit) {
  const Grammar g = schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"$ref":"#/$defs/node"})");
  // Properties come in the order of their names (kids, v).
  EXPECT_TRUE(accepts(g, R"({"kids":[{"v":2},{"kids":[],"v":3}],"v":1})"));
  EXPECT_FALSE(viable(g, R"({"v":1,"kids")"));
  std::string deep;
  int levels = 0;
  while (viable(g, deep + "{\"kids\":[")) {
    deep += "{\"kids\":[";
    ++levels;
  }
  // Each level is an object and an array: at the limit the array can only close, then each object takes its
  // v.
  EXPECT_EQ(levels, kMaxDepth / 2);
  EXPECT_FALSE(viable(g, deep + "{"));
  std::string close = deep;
  for (int i = 0; i < levels; ++i) close += "],\"v\":0}";
  EXPECT_TRUE(accepts(g, close));
}

TEST(JsonAutomaton, SelfNestedAnyOfStaysBounded) {
  // Each alternative is the whole anyOf again: forking must stop, not hang.
  const Grammar g = schema(R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"$ref":"#/$defs/a"},
                               {"type":"integer"}]}},"$ref":"#/$defs/a"})");
  EXPECT_TRUE(accepts(g, "12"));
  EXPECT_FALSE(viable(g, "x"));
}

// Random walks through the automaton: every finished output is valid JSON.
TEST(JsonAutomaton, RandomWalksParse) {
  const Grammar g = json_object_grammar();
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]\":,.-+eE0123456789 \ntrufalsn\\abu\xC3\xA9";
  int finished = 0;
  for (int walk = 0; walk < 300; ++walk) {
    JsonState s(&g);
    std::string text;
    for (int step = 0; step < 200 && !s.can_finish(); ++step) {
      std::vector<char> ok;
      for (char c : alphabet) {
        JsonState t = s;
        if (t.feed(std::string_view(&c, 1))) ok.push_back(c);
      }
      ASSERT_FALSE(ok.empty()) << "dead end after " << text;  // a live state always continues
      const char c = ok[rng() % ok.size()];
      text += c;
      ASSERT_TRUE(s.feed(std::string_view(&c, 1)));
    }
    if (!s.can_finish()) continue;
    ++finished;
    EXPECT_TRUE(json::accept(text)) << text;
    EXPECT_TRUE(json::parse(text).is_object()) << text;
  }
  EXPECT_GT(finished, 30);
}

}  // namespace
}  // namespace nanoserve::structured
