// The schema compiler: what it builds, and what it refuses (by keyword and place).

#include "structured/schema_compiler.h"

#include <gtest/gtest.h>

#include <string>

namespace nanoserve::structured {
namespace {

using nlohmann::json;

std::string error_of(const char* schema) {
  StatusOr<Grammar> g = compile_schema(json::parse(schema));
  return g.ok() ? std::string("ok") : g.status().message();
}

TEST(SchemaCompiler, RefusesUnsupportedKeywordsByNameAndPlace) {
  EXPECT_EQ(error_of(R"({"type":"integer","multipleOf":2})"), "unsupported keyword 'multipleOf' at #");
  EXPECT_EQ(error_of(R"({"type":"object","properties":{"a/b":{"type":"array","items":{"format":"x"}}}})"),
            "unsupported format 'x' at #/properties/a~1b/items (supported: date, date-time, time, email, uuid, "
            "ipv4)");
  EXPECT_EQ(error_of(R"({"anyOf":[{"type":"null"},{"oneOf":[]}]})"),
            "unsupported keyword 'oneOf' at #/anyOf/1");
  EXPECT_EQ(error_of(R"({"$defs":{"x":{"not":{}}},"$ref":"#/$defs/x"})"),
            "unsupported keyword 'not' at #/$defs/x");
}

TEST(SchemaCompiler, RefusesBrokenOrEmptySchemas) {
  EXPECT_NE(error_of(R"({"type":"integer","minimum":3,"maximum":2})").find("minimum"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"number","minimum":0.2,"maximum":0.7})").find("no integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"string","minLength":3,"maxLength":1})").find("minLength"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"object","required":["x"]})").find("\"x\""), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref":"#/$defs/none"})").find("not found"), std::string::npos);
  EXPECT_NE(error_of(R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})").find("circular"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"enum":[1,2],"type":"string"})").find("matches"), std::string::npos);
  EXPECT_NE(error_of(R"(false)").find("admits no value"), std::string::npos);
  // An object that must hold itself has no finite value.
  EXPECT_NE(
      error_of(R"({"$defs":{"n":{"type":"object","properties":{"n":{"$ref":"#/$defs/n"}},"required":["n"]}},
                       "$ref":"#/$defs/n"})")
          .find("no JSON value"),
      std::string::npos);
}

TEST(SchemaCompiler, BuildsNodes) {
  StatusOr<Grammar> g = compile_schema(json::parse(R"({"type":"object","properties":{
      "b":{"type":["string","null"]},"a":{"type":"integer","exclusiveMinimum":1.5,"maximum":9.9}},
      "required":["a"]})"));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const Node& root = g->nodes[g->root];
  ASSERT_EQ(root.kind, Kind::kObject);
  ASSERT_EQ(root.props.size(), 2u);
  EXPECT_EQ(root.props[0].key, "\"a\"");  // names in sorted order
  EXPECT_TRUE(root.props[0].required);
  EXPECT_FALSE(root.props[1].required);
  EXPECT_EQ(root.additional, kNoNode);
  const Node& a = g->nodes[root.props[0].node];
  EXPECT_EQ(a.int_min, 2);
  EXPECT_EQ(a.int_max, 9);
  EXPECT_EQ(g->nodes[root.props[1].node].kind, Kind::kAnyOf);
  EXPECT_EQ(root.min_depth, 1);
}

}  // namespace
}  // namespace nanoserve::structured
