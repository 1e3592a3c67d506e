// Single-file and sharded checkpoints: the index is followed, and a shard
// path that escapes the folder, a mapped tensor its shard lacks, or a tensor
// in two shards is refused by name.

#include "io/safetensors_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "io/safetensors_builder.h"

namespace nanoserve {
namespace {

namespace fs = std::filesystem;

class CheckpointDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ns_ckpt_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const fs::path& p, const std::vector<uint8_t>& b) {
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  void write_text(const fs::path& p, const std::string& s) { std::ofstream(p) << s; }
  static std::vector<uint8_t> shard(const std::vector<std::string>& names) {
    testing::SafetensorsBuilder b;
    float v = 0;
    for (const auto& n : names) b.tensor(n, "F32", "[2]", testing::f32_le({v, v + 1})), v += 10;
    return b.build();
  }
  fs::path dir_;
};

TEST_F(CheckpointDir, ShardedIndexIsFollowed) {
  write(dir_ / "model-00001-of-00002.safetensors", shard({"a", "b"}));
  write(dir_ / "model-00002-of-00002.safetensors", shard({"c"}));
  write_text(dir_ / "model.safetensors.index.json",
             R"({"metadata": {"total_size": 24}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                 "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");
  auto c = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ((*c)->shards().size(), 2u);
  EXPECT_EQ((*c)->names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ((*c)->tensor("b")->data_as<const float>()[1], 11.0f);
  EXPECT_EQ((*c)->tensor("c")->data_as<const float>()[0], 0.0f);
  EXPECT_EQ((*c)->tensor("d").status().code(), StatusCode::kNotFound);
}

TEST_F(CheckpointDir, SingleFileWithoutIndex) {
  write(dir_ / "model.safetensors", shard({"x"}));
  auto c = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ((*c)->names(), std::vector<std::string>{"x"});
}

TEST_F(CheckpointDir, NoWeightsOrTwoLooseFilesAreRefused) {
  auto none = SafetensorsCheckpoint::open(dir_.string());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  write(dir_ / "one.safetensors", shard({"x"}));
  write(dir_ / "two.safetensors", shard({"y"}));
  auto two = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("2 other *.safetensors"), std::string::npos)
      << two.status().message();
}

TEST_F(CheckpointDir, ShardPathsMustStayInTheFolder) {
  fs::create_directories(dir_ / "m");
  write(dir_ / "outside.safetensors", shard({"a"}));
  fs::create_symlink(dir_ / "outside.safetensors", dir_ / "m" / "link.safetensors");
  const std::pair<std::string, std::string> cases[] = {
      {"../outside.safetensors", "'..' escapes"},
      {"sub/../../outside.safetensors", "'..' escapes"},
      {(dir_ / "outside.safetensors").string(), "absolute path"},
      {"link.safetensors", "resolves outside"},
      {"", "empty file name"},
  };
  for (const auto& [path, needle] : cases) {
    write_text(dir_ / "m" / "model.safetensors.index.json", R"({"weight_map": {"a": ")" + path + R"("}})");
    auto c = SafetensorsCheckpoint::open((dir_ / "m").string());
    ASSERT_FALSE(c.ok()) << path;
    EXPECT_NE(c.status().message().find(needle), std::string::npos) << path << ": " << c.status().message();
    EXPECT_NE(c.status().message().find("model.safetensors.index.json"), std::string::npos);
  }
}

TEST_F(CheckpointDir, MappedTensorMustBeInItsShard) {
  write(dir_ / "s1.safetensors", shard({"a"}));
  write(dir_ / "s2.safetensors", shard({"b"}));
  write_text(dir_ / "model.safetensors.index.json",
             R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
  auto c = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tensor 'b' is mapped to"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("s1.safetensors, which does not hold it"), std::string::npos);
}

TEST_F(CheckpointDir, TensorInTwoShardsIsRefused) {
  write(dir_ / "s1.safetensors", shard({"a", "b"}));
  write(dir_ / "s2.safetensors", shard({"b"}));
  write_text(dir_ / "model.safetensors.index.json",
             R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  auto c = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tensor 'b' is in both"), std::string::npos) << c.status().message();
}

TEST_F(CheckpointDir, BadIndexAndBadShardNameTheFile) {
  write_text(dir_ / "model.safetensors.index.json", R"({"weight_map": 3})");
  auto c = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("weight_map"), std::string::npos);
  write_text(dir_ / "model.safetensors.index.json", R"({"weight_map": {"a": "missing.safetensors"}})");
  EXPECT_EQ(SafetensorsCheckpoint::open(dir_.string()).status().code(), StatusCode::kNotFound);
  write(dir_ / "bad.safetensors",
        testing::SafetensorsBuilder().entry("a", "F32", "[4]", 0, 16).bytes(4).build());
  write_text(dir_ / "model.safetensors.index.json", R"({"weight_map": {"a": "bad.safetensors"}})");
  auto bad = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.safetensors: tensor 'a'"), std::string::npos)
      << bad.status().message();
  write_text(dir_ / "model.safetensors.index.json", "{\"weight_map\": {");
  EXPECT_EQ(SafetensorsCheckpoint::open(dir_.string()).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace nanoserve
