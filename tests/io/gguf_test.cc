#include "io/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "io/gguf_builder.h"

namespace nanoserve {
namespace {

using testing::GgufBuilder;

const char* kModelPath = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// Parses an image kept alive by the returned file.
StatusOr<std::shared_ptr<const GgufFile>> parse_bytes(std::vector<uint8_t> bytes) {
  auto owned = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  return GgufFile::parse(owned->data(), owned->size(), owned);
}

TEST(Gguf, EveryScalarTypeRoundTrips) {
  for (uint32_t version : {2u, 3u}) {
    auto file = parse_bytes(GgufBuilder(version)
                                .kv_u8("u8", 200)
                                .kv_i8("i8", -100)
                                .kv_u16("u16", 60000)
                                .kv_i16("i16", -30000)
                                .kv_u32("u32", 4000000000u)
                                .kv_i32("i32", -2000000000)
                                .kv_u64("u64", 0xFFFFFFFFFFFFFFFFull)
                                .kv_i64("i64", -(int64_t{1} << 62))
                                .kv_f32("f32", 0.25f)
                                .kv_f64("f64", 1e300)
                                .kv_bool("t", true)
                                .kv_bool("f", false)
                                .kv_string("s", std::string("a\0b", 3))
                                .kv_string("empty", "")
                                .build());
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    const GgufFile& f = **file;
    EXPECT_EQ(f.version(), version);
    EXPECT_EQ(f.metadata().size(), 14u);
    EXPECT_EQ(f.metadata()[0].first, "u8");  // file order kept
    EXPECT_EQ(*f.get_int("u8"), 200);
    EXPECT_EQ(f.find("u8")->type, GgufType::kU8);
    EXPECT_EQ(*f.get_int("i8"), -100);
    EXPECT_EQ(*f.get_int("u16"), 60000);
    EXPECT_EQ(*f.get_int("i16"), -30000);
    EXPECT_EQ(*f.get_int("u32"), 4000000000ll);
    EXPECT_EQ(f.find("u32")->type, GgufType::kU32);
    EXPECT_EQ(*f.get_int("i32"), -2000000000);
    // u64 beyond i64 is not an int, but is kept exactly.
    EXPECT_EQ(f.get_int("u64").status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(std::get<uint64_t>(f.find("u64")->v), 0xFFFFFFFFFFFFFFFFull);
    EXPECT_EQ(*f.get_int("i64"), -(int64_t{1} << 62));
    EXPECT_EQ(*f.get_float("f32"), 0.25);
    EXPECT_EQ(f.find("f32")->type, GgufType::kF32);
    EXPECT_EQ(*f.get_float("f64"), 1e300);
    EXPECT_EQ(*f.get_float("u8"), 200.0);  // integers read as floats
    EXPECT_TRUE(*f.get_bool("t"));
    EXPECT_FALSE(*f.get_bool("f"));
    EXPECT_EQ(*f.get_string("s"), std::string("a\0b", 3));
    EXPECT_EQ(*f.get_string("empty"), "");
  }
}

TEST(Gguf, TypedGettersReportMissingAndMismatch) {
  auto file = parse_bytes(GgufBuilder().kv_string("name", "x").kv_u32("n", 3).build());
  ASSERT_TRUE(file.ok());
  const GgufFile& f = **file;
  EXPECT_EQ(f.get_int("nope").status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.get_int("nope").status().message().find("nope"), std::string::npos);
  auto mismatch = f.get_int("name");
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("'name'"), std::string::npos);
  EXPECT_EQ(f.get_string("n").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.get_bool("n").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.get_array("n").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.get_float("name").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.find("missing"), nullptr);
}

TEST(Gguf, ArraysOfStringsAndNestedArrays) {
  auto file = parse_bytes(GgufBuilder()
                              .kv_string_array("tokens", {"<s>", "hello", "", "\xe2\x96\x81world"})
                              .kv_i32_array("types", {1, -2, 3})
                              .kv_f32_array("empty", {})
                              .kv("nested", testing::kTArray,
                                  [](testing::ByteWriter& b) {
                                    // [[1, 2], [], [["x"]]]: an array of arrays of mixed depth
                                    b.u32(testing::kTArray);
                                    b.u64(3);
                                    b.u32(testing::kTU16);
                                    b.u64(2);
                                    b.u16(1);
                                    b.u16(2);
                                    b.u32(testing::kTU8);
                                    b.u64(0);
                                    b.u32(testing::kTArray);
                                    b.u64(1);
                                    b.u32(testing::kTString);
                                    b.u64(1);
                                    b.str("x");
                                  })
                              .build());
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const GgufFile& f = **file;
  auto tokens = f.get_array("tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ((*tokens)->elem_type, GgufType::kString);
  ASSERT_EQ((*tokens)->items.size(), 4u);
  EXPECT_EQ(*(*tokens)->items[1].as_string(), "hello");
  EXPECT_EQ(*(*tokens)->items[2].as_string(), "");
  EXPECT_EQ(*(*tokens)->items[3].as_string(), "\xe2\x96\x81world");
  auto types = f.get_array("types");
  ASSERT_TRUE(types.ok());
  EXPECT_EQ(*(*types)->items[1].as_int(), -2);
  EXPECT_EQ((*types)->items[1].type, GgufType::kI32);
  EXPECT_TRUE((*f.get_array("empty"))->items.empty());
  const GgufArray* nested = *f.get_array("nested");
  ASSERT_EQ(nested->items.size(), 3u);
  const GgufArray* a0 = nested->items[0].as_array();
  ASSERT_NE(a0, nullptr);
  EXPECT_EQ(a0->elem_type, GgufType::kU16);
  EXPECT_EQ(*a0->items[1].as_int(), 2);
  EXPECT_TRUE(nested->items[1].as_array()->items.empty());
  const GgufArray* deep = nested->items[2].as_array()->items[0].as_array();
  ASSERT_NE(deep, nullptr);
  EXPECT_EQ(*deep->items[0].as_string(), "x");
}

TEST(Gguf, TensorViewsHaveReversedShapeAndStoredBytes) {
  std::vector<float> w(2 * 3);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) + 0.5f;
  std::vector<uint8_t> q8(2 * 34);  // two Q8_0 blocks: ne = [64]
  for (size_t i = 0; i < q8.size(); ++i) q8[i] = static_cast<uint8_t>(i * 7);
  for (uint32_t version : {2u, 3u}) {
    auto file = parse_bytes(GgufBuilder(version)
                                .kv_string("general.architecture", "llama")
                                .tensor("w", {3, 2}, testing::kGgmlF32, testing::f32_bytes(w))
                                .tensor("q", {64}, testing::kGgmlQ8_0, q8)
                                .build());
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    const GgufFile& f = **file;
    ASSERT_EQ(f.tensors().size(), 2u);
    EXPECT_EQ(f.data_offset() % 32, 0u);
    auto t = f.tensor("w");
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->dtype(), DType::kF32);
    EXPECT_EQ(t->shape(), (std::vector<int64_t>{2, 3}));  // ne [3, 2] reversed
    EXPECT_EQ(f.find_tensor("w")->nbytes, 24);
    for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(t->data_as<const float>()[i], w[i]);
    auto q = f.tensor("q");
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->dtype(), DType::kQ8_0);
    EXPECT_EQ(q->shape(), (std::vector<int64_t>{64}));
    EXPECT_EQ(f.find_tensor("q")->offset % 32, 0u);
    EXPECT_EQ(std::memcmp(q->data(), q8.data(), q8.size()), 0);
    EXPECT_EQ(f.tensor("nope").status().code(), StatusCode::kNotFound);
  }
}

TEST(Gguf, CustomAlignmentIsHonoured) {
  for (uint32_t align : {4u, 8u, 64u, 4096u}) {
    std::vector<float> a = {1, 2, 3};
    std::vector<float> b = {4, 5};
    auto file = parse_bytes(GgufBuilder()
                                .pad_alignment(align)
                                .kv_u32("general.alignment", align)
                                .tensor("a", {3}, testing::kGgmlF32, testing::f32_bytes(a))
                                .tensor("b", {2}, testing::kGgmlF32, testing::f32_bytes(b))
                                .build());
    ASSERT_TRUE(file.ok()) << align << ": " << file.status().to_string();
    EXPECT_EQ((*file)->alignment(), align);
    EXPECT_EQ((*file)->data_offset() % align, 0u);
    auto tb = (*file)->tensor("b");
    ASSERT_TRUE(tb.ok());
    EXPECT_EQ(tb->data_as<const float>()[1], 5.0f);
  }
}

// Alignment 1 is legal; tensors that still land on their natural alignment
// (2 bytes for f16 and block types) parse.
TEST(Gguf, AlignmentOneWithNaturallyAlignedTensors) {
  std::vector<uint8_t> q8(34, 0);
  auto file = parse_bytes(GgufBuilder()
                              .pad_alignment(1)
                              .kv_u32("general.alignment", 1)
                              .tensor("q", {32}, testing::kGgmlQ8_0, q8)
                              .tensor("rr", {32}, testing::kGgmlQ8_0, q8)  // data starts at byte 124
                              .build());
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ((*file)->alignment(), 1u);
  EXPECT_EQ((*file)->data_offset(), 124u);
  EXPECT_EQ((*file)->find_tensor("rr")->offset, 34u);
}

TEST(Gguf, OpensTheDefaultModel) {
  auto file = GgufFile::open(kModelPath);
  ASSERT_TRUE(file.ok()) << file.status().to_string() << " (run scripts/fetch-model)";
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.get_string("general.architecture"), "llama");
  EXPECT_EQ(*f.get_int("llama.block_count"), 30);
  EXPECT_EQ(*f.get_int("llama.embedding_length"), 576);
  auto tokens = f.get_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ((*tokens)->items.size(), 49152u);
  EXPECT_EQ((*f.get_array("tokenizer.ggml.merges"))->items.size(), 48900u);
  EXPECT_EQ(f.tensors().size(), 272u);
  auto emb = f.tensor("token_embd.weight");
  ASSERT_TRUE(emb.ok());
  EXPECT_EQ(emb->dtype(), DType::kQ8_0);
  EXPECT_EQ(emb->shape(), (std::vector<int64_t>{49152, 576}));
  auto gate = f.tensor("blk.0.ffn_gate.weight");
  ASSERT_TRUE(gate.ok());
  EXPECT_EQ(gate->dtype(), DType::kQ4_1);
  EXPECT_EQ(gate->shape(), (std::vector<int64_t>{1536, 576}));
  auto norm = f.tensor("blk.0.attn_norm.weight");
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(norm->dtype(), DType::kF32);
  // RMSNorm weights of a trained model are finite and mostly near 1.
  for (int i = 0; i < 576; ++i) EXPECT_TRUE(std::isfinite(norm->data_as<const float>()[i]));
  // Every tensor ends inside the file.
  for (const auto& t : f.tensors()) EXPECT_LE(f.data_offset() + t.offset + t.nbytes, f.file_size()) << t.name;
}

TEST(Gguf, OpenReportsMissingFile) {
  auto file = GgufFile::open("/nonexistent/model.gguf");
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
  EXPECT_NE(file.status().message().find("/nonexistent/model.gguf"), std::string::npos);
}

}  // namespace
}  // namespace nanoserve
