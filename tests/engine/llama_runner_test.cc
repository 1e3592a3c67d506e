#include "engine/llama_runner.h"

#include <gtest/gtest.h>

#include <string>

namespace nanoserve {
namespace {

const std::string kQwen2 = NS_SOURCE_DIR "/tests/fixtures/families/qwen2/model.gguf";

EngineConfig small_config() {
  EngineConfig c;
  c.max_model_len = 64;
  c.num_blocks = 16;
  return c;
}

// The CUDA runner builds llama only: another architecture is refused by name
// on --device cuda (before any runner is made, in any build), and runs on the
// CPU when the device is auto.
TEST(LoadEngine, ArchitectureOutsideTheCudaPathIsRefusedThereByName) {
  ThreadPool pool(1);
  EngineConfig cuda = small_config();
  cuda.device = Device::kCUDA;
  auto refused = load_engine(kQwen2, cuda, pool);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented) << refused.status().to_string();
  EXPECT_NE(
      refused.status().message().find("--device cuda: architecture 'qwen2' is not built on the CUDA path"),
      std::string::npos)
      << refused.status().to_string();

  auto cpu = load_engine(kQwen2, small_config(), pool);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  EXPECT_EQ(cpu->device, Device::kCPU);
  EXPECT_EQ(cpu->source.config.arch, "qwen2");
}

}  // namespace
}  // namespace nanoserve
