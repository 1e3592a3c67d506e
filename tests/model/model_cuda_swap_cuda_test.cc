// CudaModel's swap area (model_cuda_swap.cu): device blocks copied out to
// pinned host slots and back into other device blocks, bitwise, every layer's
// K and V; blocks not listed untouched; runs of consecutive pairs and single
// pairs alike; in bf16 pools and in fp8 ones (half the bytes a block).
// Without a CUDA device every test reports SKIPPED.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/device_memory.cuh"
#include "core/skip_without_gpu.h"
#include "engine/rng.h"
#include "model/model_cuda.h"
#include "model/model_shapes.h"
#include "ops/rope/rope_freqs.h"

namespace nanoserve {
namespace {

constexpr int32_t kBlocks = 24, kBlockSize = 16, kSlots = 10;

std::unique_ptr<CudaModel> make_model(DType kv_dtype = DType::kBF16) {
  StatusOr<ModelConfig> c = model_shape("smollm2-135m");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  c->n_layers = 3;  // enough layers for the 2D copy's pitch; small and fast
  const auto inv_freq = rope_inv_freqs(c->rope_dim, c->rope_theta, c->rope_scaling);
  StatusOr<std::unique_ptr<CudaModel>> m = CudaModel::dummy(*c, inv_freq, 5);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  CudaLimits lim{64, 4, 4, 8};
  lim.kv_dtype = kv_dtype;
  EXPECT_TRUE((*m)->allocate(lim, kBlocks, kBlockSize).ok());
  return std::move(m).value();
}

// Every layer's K and V pools, as host copies of their bytes.
std::vector<std::vector<uint8_t>> pools(const CudaModel& m) {
  cuda::synchronize();
  std::vector<std::vector<uint8_t>> out;
  for (int64_t l = 0; l < m.config().n_layers; ++l) {
    for (const Tensor* t : {&m.k_pool(static_cast<int>(l)), &m.v_pool(static_cast<int>(l))}) {
      const Tensor h = cuda::to_host(*t);
      const auto* p = h.data_as<const uint8_t>();
      out.emplace_back(p, p + h.nbytes());
    }
  }
  return out;
}

class CudaSwapDtype : public ::testing::TestWithParam<DType> {};

TEST_P(CudaSwapDtype, BlocksRoundTripBitwiseThroughTheHostArea) {
  NS_SKIP_WITHOUT_GPU();
  const DType kv = GetParam();
  auto m = make_model(kv);
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->k_pool(0).dtype(), kv);
  ASSERT_TRUE(m->allocate_swap(kSlots).ok());
  EXPECT_FALSE(m->allocate_swap(kSlots).ok()) << "twice";
  // Random bits in every pool (NaN patterns included: the copy must not care).
  Rng rng(17);
  for (int64_t l = 0; l < m->config().n_layers; ++l) {
    for (const Tensor* t : {&m->k_pool(static_cast<int>(l)), &m->v_pool(static_cast<int>(l))}) {
      Tensor h = Tensor::empty(kv, {t->dim(0), t->dim(1), t->dim(2), t->dim(3)});
      auto* p = h.data_as<uint8_t>();
      for (int64_t i = 0; i < h.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng.next_u64());
      cuda::copy_to_device(h, *t);
    }
  }
  const auto before = pools(*m);
  // A run of three consecutive pairs, a lone pair, and a pair out of order.
  const std::vector<BlockCopy> out = {{3, 0}, {4, 1}, {5, 2}, {9, 5}, {1, 7}};
  ASSERT_TRUE(m->swap_blocks(out, /*out=*/true).ok());
  // The host area holds each block's bytes at its slot: [n_layers][2][slots, block_size, kv heads, head_dim].
  cuda::synchronize();
  const ModelConfig& c = m->config();
  const size_t chunk =
      static_cast<size_t>(dtype_bytes(kv, int64_t{kBlockSize} * c.n_kv_heads * c.head_dim));  // bytes
  EXPECT_EQ(static_cast<int64_t>(chunk) * 2 * c.n_layers, CudaModel::kv_bytes_per_block(c, kBlockSize, kv));
  const auto* host = static_cast<const uint8_t*>(m->swap_host());
  for (int64_t plane = 0; plane < 2 * c.n_layers; ++plane) {
    for (const BlockCopy& bc : out) {
      const uint8_t* h = host + (static_cast<size_t>(plane) * kSlots + bc.slot) * chunk;
      const uint8_t* d = before[static_cast<size_t>(plane)].data() + static_cast<size_t>(bc.block) * chunk;
      ASSERT_EQ(std::memcmp(h, d, chunk), 0) << "plane " << plane << " block " << bc.block;
    }
  }
  // Back into other blocks (a run and two lone ones).
  const std::vector<BlockCopy> in = {{10, 0}, {11, 1}, {12, 2}, {20, 5}, {0, 7}};
  ASSERT_TRUE(m->swap_blocks(in, /*out=*/false).ok());
  const auto after = pools(*m);
  for (size_t plane = 0; plane < after.size(); ++plane) {
    for (int32_t b = 0; b < kBlocks; ++b) {
      int32_t src = b;  // unlisted blocks keep their bits
      for (size_t i = 0; i < in.size(); ++i)
        if (in[i].block == b) src = out[i].block;
      ASSERT_EQ(std::memcmp(after[plane].data() + b * chunk, before[plane].data() + src * chunk, chunk), 0)
          << "plane " << plane << " block " << b << " (from " << src << ")";
    }
  }
  // Ids outside the pool or the area are refused by name, nothing queued.
  const std::vector<BlockCopy> bad = {{kBlocks, 0}};
  EXPECT_FALSE(m->swap_blocks(bad, true).ok());
  const std::vector<BlockCopy> bad_slot = {{0, kSlots}};
  EXPECT_FALSE(m->swap_blocks(bad_slot, false).ok());
}

INSTANTIATE_TEST_SUITE_P(Pools, CudaSwapDtype, ::testing::Values(DType::kBF16, DType::kF8E4M3),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(info.param == DType::kBF16 ? "bf16" : "fp8");
                         });

// Prints the rate of the copies against the cost model's assumption
// (CudaRunner::kCopyBytesPerS); asserts only that they round-trip.
TEST(CudaSwap, CopyRateAgainstTheCostModel) {
  NS_SKIP_WITHOUT_GPU();
  StatusOr<ModelConfig> c = model_shape("smollm2-135m");  // 30 layers: 368,640 bytes a block of 16
  ASSERT_TRUE(c.ok());
  const auto inv_freq = rope_inv_freqs(c->rope_dim, c->rope_theta, c->rope_scaling);
  StatusOr<std::unique_ptr<CudaModel>> m = CudaModel::dummy(*c, inv_freq, 5);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  constexpr int32_t kN = 512;
  ASSERT_TRUE((*m)->allocate(CudaLimits{64, 4, 4, 8}, kN, kBlockSize).ok());
  ASSERT_TRUE((*m)->allocate_swap(kN).ok());
  std::vector<BlockCopy> all;
  for (int32_t b = 0; b < kN; ++b) all.push_back({b, b});
  const double bytes = static_cast<double>(CudaModel::kv_bytes_per_block(*c, kBlockSize)) * kN;
  for (bool out : {true, false}) {
    ASSERT_TRUE((*m)->swap_blocks(all, out).ok());  // warm
    cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int rep = 0; rep < 5; ++rep) ASSERT_TRUE((*m)->swap_blocks(all, out).ok());
    cuda::synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 5;
    std::printf("swap %s: %d blocks (%.1f MiB) in %.2f ms = %.1f GB/s (the cost model assumes %.0f)\n",
                out ? "out" : "in ", kN, bytes / (1 << 20), s * 1e3, bytes / s / 1e9, 50.0);
  }
}

TEST(CudaSwap, CopiesWithoutAnAreaAreRefused) {
  NS_SKIP_WITHOUT_GPU();
  auto m = make_model();
  ASSERT_NE(m, nullptr);
  const std::vector<BlockCopy> one = {{0, 0}};
  EXPECT_EQ(m->swap_blocks(one, true).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace nanoserve
