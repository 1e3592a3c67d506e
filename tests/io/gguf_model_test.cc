// Our reader against the gguf package's reader on the default model: every
// metadata key, type and value, and every tensor's type, shape and placement.
// Fixture: tests/fixtures/gguf/make_model_metadata_fixture.py.

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "io/gguf.h"

namespace nanoserve {
namespace {

const char* kModelPath = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const char* kFixture = NS_SOURCE_DIR "/tests/fixtures/gguf/model_metadata.json";

using nlohmann::json;

// FNV-1a 64 over the element encoding the fixture script uses.
struct Fnv {
  uint64_t h = 0xCBF29CE484222325ull;
  void add(const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 0x100000001B3ull;
  }
};

void add_element(Fnv& f, const GgufValue& v) {
  if (const std::string* s = v.as_string()) {
    const uint64_t n = s->size();
    f.add(&n, 8);
    f.add(s->data(), s->size());
  } else if (v.type == GgufType::kF32 || v.type == GgufType::kF64) {
    const double d = *v.as_float();
    f.add(&d, 8);
  } else if (auto b = v.as_bool()) {
    const int64_t i = *b;
    f.add(&i, 8);
  } else {
    const int64_t i = *v.as_int();
    f.add(&i, 8);
  }
}

void expect_value(const GgufValue& v, const json& want, const std::string& where) {
  if (want.is_string()) {
    ASSERT_NE(v.as_string(), nullptr) << where;
    EXPECT_EQ(*v.as_string(), want.get<std::string>()) << where;
  } else if (want.is_boolean()) {
    ASSERT_TRUE(v.as_bool().has_value()) << where;
    EXPECT_EQ(*v.as_bool(), want.get<bool>()) << where;
  } else if (want.is_number_float()) {
    ASSERT_TRUE(v.as_float().has_value()) << where;
    EXPECT_EQ(*v.as_float(), want.get<double>()) << where;
  } else {
    ASSERT_TRUE(v.as_int().has_value()) << where;
    EXPECT_EQ(*v.as_int(), want.get<int64_t>()) << where;
  }
}

TEST(GgufModel, MetadataMatchesGgufPackage) {
  std::ifstream in(kFixture);
  ASSERT_TRUE(in.good());
  const json fx = json::parse(in);
  auto file = GgufFile::open(kModelPath);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const GgufFile& f = **file;
  ASSERT_EQ(f.metadata().size(), fx["metadata"].size());
  size_t i = 0;
  for (const json& e : fx["metadata"]) {
    const std::string key = e["key"];
    EXPECT_EQ(f.metadata()[i++].first, key) << "file order";
    const GgufValue* v = f.find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(gguf_type_name(v->type), e["type"].get<std::string>()) << key;
    if (e.contains("value")) {
      expect_value(*v, e["value"], key);
      continue;
    }
    const GgufArray* a = v->as_array();
    ASSERT_NE(a, nullptr) << key;
    EXPECT_EQ(gguf_type_name(a->elem_type), e["elem_type"].get<std::string>()) << key;
    ASSERT_EQ(a->items.size(), e["length"].get<size_t>()) << key;
    const json& head = e["head"];
    const json& tail = e["tail"];
    for (size_t j = 0; j < head.size(); ++j) expect_value(a->items[j], head[j], key + " head");
    for (size_t j = 0; j < tail.size(); ++j) {
      expect_value(a->items[a->items.size() - tail.size() + j], tail[j], key + " tail");
    }
    Fnv h;
    for (const GgufValue& item : a->items) add_element(h, item);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.h));
    EXPECT_EQ(std::string(hex), e["fnv1a64"].get<std::string>()) << key;
  }
}

TEST(GgufModel, TensorsMatchGgufPackage) {
  std::ifstream in(kFixture);
  ASSERT_TRUE(in.good());
  const json fx = json::parse(in);
  auto file = GgufFile::open(kModelPath);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const GgufFile& f = **file;
  EXPECT_EQ(f.data_offset(), fx["data_offset"].get<uint64_t>());
  ASSERT_EQ(f.tensors().size(), fx["tensors"].size());
  const std::map<int, DType> ggml = {{0, DType::kF32}, {3, DType::kQ4_1}, {8, DType::kQ8_0}};
  size_t i = 0;
  for (const json& e : fx["tensors"]) {
    const GgufTensorInfo& t = f.tensors()[i++];
    const std::string name = e["name"];
    EXPECT_EQ(t.name, name);
    ASSERT_TRUE(ggml.count(e["ggml_type"].get<int>())) << name;
    EXPECT_EQ(t.dtype, ggml.at(e["ggml_type"].get<int>())) << name;
    std::vector<int64_t> ne = e["ne"];
    std::vector<int64_t> reversed(ne.rbegin(), ne.rend());
    EXPECT_EQ(t.shape, reversed) << name;
    EXPECT_EQ(t.offset, e["offset"].get<uint64_t>()) << name;
    EXPECT_EQ(t.nbytes, e["nbytes"].get<int64_t>()) << name;
    EXPECT_EQ(f.find_tensor(name), &t);
  }
}

}  // namespace
}  // namespace nanoserve
