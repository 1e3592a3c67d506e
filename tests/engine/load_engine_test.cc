#include "engine/load_engine.h"

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

// Every family runs on both devices; what the CUDA kernels lack is a shape
// (here head_dim 16), refused by name on --device cuda before any device is
// asked for; under auto the model runs on the CPU.
TEST(LoadEngine, AShapeTheCudaKernelsLackIsRefusedThereByName) {
  ThreadPool pool(1);
  EngineConfig cuda = small_config();
  cuda.device = Device::kCUDA;
  auto refused = load_engine(kQwen2, cuda, pool);
  ASSERT_FALSE(refused.ok());
#if NANOSERVE_CUDA
  EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("--device cuda: head_dim 16"), std::string::npos)
      << refused.status().to_string();
#else
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("this build has no CUDA backend"), std::string::npos)
      << refused.status().to_string();
#endif

  auto cpu = load_engine(kQwen2, small_config(), pool);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  EXPECT_EQ(cpu->device, Device::kCPU);
  EXPECT_EQ(cpu->source.config.arch, "qwen2");
}

// The Gemma fixtures (head_dim 16 and 24) are refused on --device cuda by
// their head_dim, which the CUDA attention does not take, and run on the CPU
// under auto.
TEST(LoadEngine, GemmaFixturesAreRefusedOnCudaByHeadDimAndRunOnTheCpu) {
  ThreadPool pool(1);
  for (const char* family : {"gemma2", "gemma3"}) {
    const std::string path = NS_SOURCE_DIR "/tests/fixtures/families/" + std::string(family) + "/hf";
    EngineConfig cuda = small_config();
    cuda.device = Device::kCUDA;
    auto refused = load_engine(path, cuda, pool);
    ASSERT_FALSE(refused.ok());
#if NANOSERVE_CUDA
    EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented) << refused.status().to_string();
    EXPECT_NE(refused.status().message().find("--device cuda: head_dim"), std::string::npos)
        << refused.status().to_string();
#else
    EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status().to_string();
#endif
    auto cpu = load_engine(path, small_config(), pool);
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    EXPECT_EQ(cpu->device, Device::kCPU);
    EXPECT_EQ(cpu->source.config.arch, family);
  }
}

}  // namespace
}  // namespace nanoserve
