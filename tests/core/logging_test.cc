#include "core/logging.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace nanoserve {
namespace {

constexpr int64_t kTime = 1796425492123;  // 2026-12-04T23:04:52.123Z

TEST(Logging, TextLineHasTimeTagMessageAndFields) {
  const std::string line = format_log_line(LogFormat::kText, LogLevel::kWarning, kTime, "request",
                                           {{"id", "cmpl-1", true},
                                            {"status", "200", false},
                                            {"path", "/a b", true},
                                            {"empty", "", true},
                                            {"q", "say \"hi\"\n", true}});
  EXPECT_EQ(line,
            "2026-12-04T23:04:52.123Z [W] request id=cmpl-1 status=200 path=\"/a b\" empty=\"\" "
            "q=\"say \\\"hi\\\"\\n\"");
}

TEST(Logging, JsonLineIsOneObjectWithFieldsInOrder) {
  const std::string line =
      format_log_line(LogFormat::kJson, LogLevel::kInfo, kTime, "stats \"x\"",
                      {{"running", "3", false}, {"id", "a\tb", true}, {"ttft_s", "0.125", false}});
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"time", "level", "msg", "running", "id", "ttft_s"}));
  EXPECT_EQ(j["time"], "2026-12-04T23:04:52.123Z");
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["msg"], "stats \"x\"");
  EXPECT_EQ(j["running"], 3);
  EXPECT_EQ(j["id"], "a\tb");
  EXPECT_DOUBLE_EQ(j["ttft_s"].get<double>(), 0.125);
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(Logging, JsonEscapeKeepsValidUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(json_escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(json_escape(std::string("a\0b\x1f\x7f", 5)), "a\\u0000b\\u001f\\u007f");
  // A lone continuation byte, a truncated sequence, an overlong form, a surrogate, beyond U+10FFFF.
  for (const char* bad :
       {"\x80", "\xc3", "\xe2\x82", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff"}) {
    const std::string out = json_escape(std::string("x") + bad + "y");
    EXPECT_EQ(out.front(), 'x') << out;
    EXPECT_EQ(out.back(), 'y') << out;
    EXPECT_NE(out.find("\\ufffd"), std::string::npos) << out;
    // Whatever came in, the line parses and the text reads back valid.
    const auto j = nlohmann::json::parse("\"" + out + "\"");
    EXPECT_EQ(j.get<std::string>().find(bad), std::string::npos);
  }
}

TEST(Logging, FieldHelpersRenderNumbers) {
  // The message's fields as the destructor formats them, through format_log_line's JSON form.
  const std::string line = format_log_line(LogFormat::kJson, LogLevel::kError, 0, "m",
                                           {{"n", std::to_string(int64_t{-5}), false}});
  EXPECT_EQ(nlohmann::json::parse(line)["n"], -5);
  EXPECT_EQ(nlohmann::json::parse(line)["time"], "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(nlohmann::json::parse(line)["level"], "error");
}

}  // namespace
}  // namespace nanoserve
