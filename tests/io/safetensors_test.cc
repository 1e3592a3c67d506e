// The safetensors reader: a valid file's tensors and metadata, and every
// crafted bad file refused with a message that names the file, tensor and field.

#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/half.h"
#include "io/safetensors_bad_corpus.h"
#include "io/safetensors_builder.h"

namespace nanoserve {
namespace {

StatusOr<std::shared_ptr<const SafetensorsFile>> parse_bytes(const std::vector<uint8_t>& bytes,
                                                             const std::string& name = "t.safetensors") {
  // A heap copy of exactly the file's size, so ASan sees any overread.
  auto owned = std::make_shared<std::vector<uint8_t>>(bytes);
  return SafetensorsFile::parse(owned->empty() ? nullptr : owned->data(), owned->size(), owned, name);
}

TEST(Safetensors, GoodFileGivesViewsAndMetadata) {
  auto f = parse_bytes(testing::good_safetensors().build());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const SafetensorsFile& s = **f;
  ASSERT_EQ(s.tensors().size(), 3u);
  EXPECT_EQ(s.metadata().at("format"), "pt");
  auto w = s.tensor("w");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->dtype(), DType::kF32);
  EXPECT_EQ(w->shape(), (std::vector<int64_t>{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(w->data_as<const float>()[i], static_cast<float>(i));
  auto b = s.tensor("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->dtype(), DType::kBF16);
  EXPECT_EQ(bf16_to_f32(b->data_as<const uint16_t>()[0]), 1.0f);
  EXPECT_EQ(bf16_to_f32(b->data_as<const uint16_t>()[3]), 4.0f);
  auto h = s.tensor("h");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(fp16_to_f32(h->data_as<const uint16_t>()[1]), 2.0f);
  auto missing = s.tensor("nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos);
}

// The format does not align tensors: a misaligned one is copied, not read in place.
TEST(Safetensors, MisalignedTensorIsCopied) {
  testing::SafetensorsBuilder b;
  b.tensor("pad", "BF16", "[1]", {0, 0});  // moves the next tensor to an odd 2-byte offset
  b.tensor("w", "F32", "[2]", testing::f32_le({1.5f, -2.0f}));
  auto f = parse_bytes(b.build());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto w = (*f)->tensor("w");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w->data()) % 4, 0u);
  EXPECT_EQ(w->data_as<const float>()[0], 1.5f);
  EXPECT_EQ(w->data_as<const float>()[1], -2.0f);
}

TEST(Safetensors, ZeroSizedAndScalarTensors) {
  testing::SafetensorsBuilder b;
  b.tensor("empty", "F32", "[0, 7]", {});
  b.tensor("scalar", "F32", "[]", testing::f32_le({3.0f}));
  b.tensor("empty2", "F16", "[5, 0]", {});
  auto f = parse_bytes(b.build());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->tensor("empty")->numel(), 0);
  EXPECT_EQ((*f)->tensor("scalar")->data_as<const float>()[0], 3.0f);
}

TEST(Safetensors, EachCraftedFileNamesFileTensorAndField) {
  const auto corpus = testing::bad_safetensors_corpus();
  EXPECT_GE(corpus.size(), 35u);
  for (const auto& c : corpus) {
    auto f = parse_bytes(c.bytes, "bad.safetensors");
    ASSERT_FALSE(f.ok()) << c.name << " parsed";
    EXPECT_EQ(f.status().code(), c.code) << c.name << ": " << f.status().to_string();
    const std::string& msg = f.status().message();
    EXPECT_EQ(msg.rfind("bad.safetensors: ", 0), 0u) << c.name << ": " << msg;
    for (const auto& needle : c.needles) {
      EXPECT_NE(msg.find(needle), std::string::npos) << c.name << ": '" << needle << "' not in: " << msg;
    }
  }
}

TEST(Safetensors, EveryTruncationIsRefused) {
  const auto full = testing::good_safetensors().build();
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
    auto f = parse_bytes(cut);
    ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
    ASSERT_EQ(f.status().code(), StatusCode::kDataLoss) << n << ": " << f.status().to_string();
  }
}

// Random byte flips: never a crash (ASan in the fuzz build), and a file that
// still parses has only in-range, non-overlapping tensors.
TEST(Safetensors, RandomCorruptionsNeverEscapeTheFile) {
  const auto good = testing::good_safetensors().build();
  std::mt19937 rng(7);
  int parsed = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    auto f = parse_bytes(bytes);
    if (!f.ok()) continue;
    ++parsed;
    uint64_t prev_end = 0;
    for (const auto& t : (*f)->tensors()) {
      ASSERT_LE(t.end, (*f)->file_size() - (*f)->data_offset());
      if (t.begin != t.end) {
        ASSERT_GE(t.begin, prev_end);
        prev_end = t.end;
      }
      ASSERT_TRUE((*f)->tensor(t.name).ok());
    }
  }
  EXPECT_GT(parsed, 0);  // some flips land in data bytes and padding
}

TEST(Safetensors, OpenMapsTheFileAndNamesItInErrors) {
  const auto dir = std::filesystem::temp_directory_path() / ("ns_st_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string good = (dir / "good.safetensors").string(), bad = (dir / "bad.safetensors").string();
  auto write = [](const std::string& p, const std::vector<uint8_t>& b) {
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  };
  write(good, testing::good_safetensors().build());
  write(bad, testing::SafetensorsBuilder().entry("w", "F32", "[4]", 0, 16).bytes(12).build());
  auto g = SafetensorsFile::open(good);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ((*g)->tensor("w")->data_as<const float>()[5], 5.0f);
  auto b = SafetensorsFile::open(bad);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message().rfind(bad + ": tensor 'w'", 0), 0u) << b.status().message();
  EXPECT_EQ(SafetensorsFile::open((dir / "missing").string()).status().code(), StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(Safetensors, DtypeNames) {
  EXPECT_EQ(*safetensors_dtype("BF16"), DType::kBF16);
  EXPECT_EQ(*safetensors_dtype("F8_E4M3"), DType::kF8E4M3);
  EXPECT_EQ(safetensors_dtype("F8_E5M2").status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(safetensors_dtype("I8").status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(safetensors_dtype("I8").status().message().find("unsupported dtype 'I8'"), std::string::npos);
  EXPECT_EQ(safetensors_dtype("bf16").status().code(), StatusCode::kDataLoss);  // names are case-sensitive
}

// F8_E4M3 tensors (FP8 checkpoints' weights) are one byte an element, viewed
// as stored at any offset (no alignment to ask for), and decode through
// core/half.h: the bytes written are the bytes read, and 0x38 is 1.0, 0xc0
// is -2.0, 0x7e is 448, 0x01 the smallest subnormal 2^-9.
TEST(Safetensors, ReadsF8E4M3Bytes) {
  const std::vector<uint8_t> w = {0x38, 0xc0, 0x7e, 0x01, 0x00, 0x80};
  // A 1-byte tensor before it puts it at an odd offset of the data section.
  const auto bytes = testing::SafetensorsBuilder()
                         .tensor("pad", "F8_E4M3", "[1]", {0x30})
                         .tensor("w", "F8_E4M3", "[2, 3]", w)
                         .tensor("s", "F32", "[1]", testing::f32_le({0.5f}))
                         .build();
  auto f = parse_bytes(bytes);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto t = (*f)->tensor("w");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->dtype(), DType::kF8E4M3);
  EXPECT_EQ(t->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->nbytes(), 6);
  const auto* b = static_cast<const uint8_t*>(t->data());
  EXPECT_EQ(std::vector<uint8_t>(b, b + 6), w);
  const float want[] = {1.0f, -2.0f, 448.0f, 0x1p-9f, 0.0f, -0.0f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(f8e4m3_to_f32(b[i]), want[i]) << i;
  EXPECT_TRUE(std::signbit(f8e4m3_to_f32(b[5])));
  EXPECT_EQ(f8e4m3_to_f32(*static_cast<const uint8_t*>((*f)->tensor("pad")->data())), 0.5f);
}

}  // namespace
}  // namespace nanoserve
