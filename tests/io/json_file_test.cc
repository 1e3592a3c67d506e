// Bounded JSON files: size and nesting limits and parse errors name the file.

#include "io/json_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace nanoserve {
namespace {

TEST(JsonFile, LimitsAndErrorsNameTheFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("ns_json_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string p = (dir / "c.json").string();
  auto write = [&](const std::string& s) { std::ofstream(p, std::ios::binary) << s; };

  write(R"({"a": [1, {"b": 2}]})");
  auto ok = read_json_file(p, 1024);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ((*ok)["a"][1]["b"], 2);

  auto big = read_json_file(p, 5);
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find(p + ": 20 bytes exceed the limit of 5"), std::string::npos)
      << big.status().message();

  write(std::string(100000, '[') + std::string(100000, ']'));  // would recurse in a naive parser
  auto deep = read_json_file(p, 1 << 20, 64);
  EXPECT_EQ(deep.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(deep.status().message().find("nested deeper than 64"), std::string::npos)
      << deep.status().message();

  for (const char* bad : {"", "{", "{\"a\": tru}", "\xff"}) {
    write(bad);
    auto r = read_json_file(p, 1024);
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << bad;
    EXPECT_EQ(r.status().message().rfind(p + ": not valid JSON", 0), 0u) << r.status().message();
  }
  EXPECT_EQ(read_json_file((dir / "missing.json").string(), 1024).status().code(), StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace nanoserve
