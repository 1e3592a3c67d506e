// Our reader on a file written by the gguf package's GGUFWriter (an encoder we
// did not write): every value type, nested arrays, alignment 64, several dtypes.
// Fixture: tests/fixtures/gguf/make_writer_fixture.py.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "ops/dequantize/dequantize.h"

namespace nanoserve {
namespace {

using nlohmann::json;

const std::string kDir = NS_SOURCE_DIR "/tests/fixtures/gguf/";

void expect_value(const GgufValue& v, const json& want, const std::string& where) {
  if (want.is_array()) {
    const GgufArray* a = v.as_array();
    ASSERT_NE(a, nullptr) << where;
    ASSERT_EQ(a->items.size(), want.size()) << where;
    for (size_t i = 0; i < want.size(); ++i)
      expect_value(a->items[i], want[i], where + "[" + std::to_string(i) + "]");
  } else if (want.is_string()) {
    ASSERT_NE(v.as_string(), nullptr) << where;
    EXPECT_EQ(*v.as_string(), want.get<std::string>()) << where;
  } else if (want.is_boolean()) {
    ASSERT_TRUE(v.as_bool().has_value()) << where;
    EXPECT_EQ(*v.as_bool(), want.get<bool>()) << where;
  } else if (want.is_number_float()) {
    ASSERT_TRUE(v.as_float().has_value()) << where;
    EXPECT_EQ(*v.as_float(), want.get<double>()) << where;
  } else if (want.is_number_unsigned()) {
    ASSERT_TRUE(v.as_int().has_value()) << where;
    EXPECT_EQ(static_cast<uint64_t>(*v.as_int()), want.get<uint64_t>()) << where;
  } else {
    ASSERT_TRUE(v.as_int().has_value()) << where;
    EXPECT_EQ(*v.as_int(), want.get<int64_t>()) << where;
  }
}

TEST(GgufWriterFile, ReadsWhatGgufWriterWrote) {
  std::ifstream in(kDir + "writer_v3.json");
  ASSERT_TRUE(in.good());
  const json fx = json::parse(in);
  auto file = GgufFile::open(kDir + fx["file"].get<std::string>());
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  ASSERT_EQ(f.metadata().size(), fx["metadata"].size());
  for (const json& e : fx["metadata"]) {
    const std::string key = e["key"];
    const GgufValue* v = f.find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(gguf_type_name(v->type), e["type"].get<std::string>()) << key;
    expect_value(*v, e["value"], key);
  }
  EXPECT_EQ((*f.get_array("t.nested"))->elem_type, GgufType::kArray);
  ASSERT_EQ(f.tensors().size(), fx["tensors"].size());
  for (const json& e : fx["tensors"]) {
    const std::string name = e["name"];
    auto t = f.tensor(name);
    ASSERT_TRUE(t.ok()) << name;
    EXPECT_EQ(dtype_name(t->dtype()), e["dtype"].get<std::string>()) << name;
    EXPECT_EQ(t->shape(), e["shape"].get<std::vector<int64_t>>()) << name;
    EXPECT_EQ(f.find_tensor(name)->offset % 64, 0u) << name;
    const std::vector<double> want = e["values"];
    ASSERT_EQ(static_cast<int64_t>(want.size()), t->numel()) << name;
    std::vector<float> got(want.size());
    if (t->dtype() == DType::kI32) {
      for (size_t i = 0; i < want.size(); ++i) got[i] = static_cast<float>(t->data_as<const int32_t>()[i]);
    } else {
      dequantize_row(t->dtype(), t->data(), got.data(), t->numel());
    }
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(got[i], static_cast<float>(want[i])) << name << "[" << i << "]";
  }
}

}  // namespace
}  // namespace nanoserve
