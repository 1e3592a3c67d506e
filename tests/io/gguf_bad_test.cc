// Malformed GGUF files: each gives a precise error, none crashes.

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "io/gguf.h"
#include "io/gguf_bad_corpus.h"
#include "io/gguf_builder.h"

namespace nanoserve {
namespace {

StatusOr<std::shared_ptr<const GgufFile>> parse_bytes(const std::vector<uint8_t>& bytes) {
  // A fresh heap copy of exactly the file's size, so ASan sees any overread.
  auto owned = std::make_shared<std::vector<uint8_t>>(bytes);
  return GgufFile::parse(owned->empty() ? nullptr : owned->data(), owned->size(), owned);
}

TEST(GgufBad, EachCraftedFileNamesFieldAndOffset) {
  const auto corpus = testing::bad_gguf_corpus();
  EXPECT_GE(corpus.size(), 30u);
  for (const auto& c : corpus) {
    auto file = parse_bytes(c.bytes);
    ASSERT_FALSE(file.ok()) << c.name << " parsed";
    EXPECT_EQ(file.status().code(), c.code) << c.name << ": " << file.status().to_string();
    const std::string& msg = file.status().message();
    EXPECT_EQ(msg.rfind("gguf: ", 0), 0u) << c.name << ": " << msg;
    for (const auto& needle : c.needles) {
      EXPECT_NE(msg.find(needle), std::string::npos) << c.name << ": '" << needle << "' not in: " << msg;
    }
  }
}

TEST(GgufBad, TheRichFileItselfParses) {
  for (uint32_t v : {2u, 3u}) {
    auto file = parse_bytes(testing::rich_gguf(v).build());
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    EXPECT_EQ((*file)->tensors().size(), 2u);
    EXPECT_EQ((*(*file)->get_array("tokenizer.ggml.tokens"))->items.size(), 3u);
  }
}

// Tensors that touch but share no byte, and an empty tensor at another's
// offset, are not overlaps.
TEST(GgufBad, AdjacentAndEmptyTensorsParse) {
  const std::vector<uint8_t> f32x8(32, 0);
  auto file = parse_bytes(testing::GgufBuilder()
                              .tensor("a", {8}, testing::kGgmlF32, f32x8)
                              .placed_tensor("b", {8}, testing::kGgmlF32, f32x8, 32)
                              .placed_tensor("empty", {0}, testing::kGgmlF32, {}, 0)
                              .build());
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ((*file)->find_tensor("b")->offset, 32u);
  EXPECT_EQ((*file)->find_tensor("empty")->nbytes, 0);
}

// Cutting a file anywhere before its end is a DATA_LOSS, never a crash.
TEST(GgufBad, EveryTruncationIsDataLoss) {
  for (uint32_t v : {2u, 3u}) {
    const auto full = testing::rich_gguf(v).build();
    for (size_t n = 0; n < full.size(); ++n) {
      std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
      auto file = parse_bytes(cut);
      ASSERT_FALSE(file.ok()) << "prefix of " << n << " bytes parsed";
      ASSERT_EQ(file.status().code(), StatusCode::kDataLoss) << n << ": " << file.status().to_string();
      ASSERT_NE(file.status().message().find("at offset"), std::string::npos) << file.status().to_string();
    }
  }
}

// Overwriting any byte with boundary values either parses or fails cleanly; when
// it parses, every tensor view lies inside the image.
TEST(GgufBad, EverySingleByteCorruptionIsHandled) {
  const auto good = testing::rich_gguf().build();
  int parsed = 0, failed = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (int value : {0x00, 0x01, 0x07, 0x20, 0x7f, 0x80, 0xfe, 0xff, good[i] ^ 0x01, good[i] ^ 0x40}) {
      auto bad = std::make_shared<std::vector<uint8_t>>(good);
      (*bad)[i] = static_cast<uint8_t>(value);
      auto file = GgufFile::parse(bad->data(), bad->size(), bad);
      if (!file.ok()) {
        ++failed;
        const StatusCode code = file.status().code();
        ASSERT_TRUE(code == StatusCode::kDataLoss || code == StatusCode::kUnimplemented)
            << file.status().to_string();
        continue;
      }
      ++parsed;
      for (const auto& info : (*file)->tensors()) {
        auto t = (*file)->tensor(info.name);
        ASSERT_TRUE(t.ok());
        const auto* begin = static_cast<const uint8_t*>(t->data());
        ASSERT_GE(begin, bad->data());
        ASSERT_LE(begin + t->nbytes(), bad->data() + bad->size());
      }
    }
  }
  EXPECT_GT(parsed, 0);  // e.g. changed value bytes
  EXPECT_GT(failed, 0);
}

TEST(GgufBad, OpenPrefixesThePath) {
  const auto path = std::filesystem::temp_directory_path() / "nanoserve_gguf_bad_test.gguf";
  {
    std::ofstream f(path, std::ios::binary);
    f << "GGUF";  // magic, then nothing
  }
  auto file = GgufFile::open(path.string());
  std::filesystem::remove(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(file.status().message().find(path.string()), std::string::npos) << file.status().to_string();
  EXPECT_NE(file.status().message().find("version at offset 4"), std::string::npos)
      << file.status().to_string();
}

TEST(GgufBad, DirectoryIsNotAModel) {
  auto file = GgufFile::open(std::filesystem::temp_directory_path().string());
  EXPECT_EQ(file.status().code(), StatusCode::kInvalidArgument) << file.status().to_string();
}

}  // namespace
}  // namespace nanoserve
