// An FP8 checkpoint (compressed-tensors, per channel and per tensor) on the
// GPU: the upload puts the checkpoint's own E4M3 bytes and scales into the
// CUDA linears (q/k/v and gate/up concatenated, q/k rows in the rotary order
// of the host), and the forward's logits follow the CPU's over the same
// weights with the GPU's FP8 arithmetic (W8A8: Workspace::fp8_tokens;
// tests/model/hf_fp8_test.cc holds the CPU's weights against transformers).
// The checkpoint is written here (fp8_hf_writer.h) in a shape
// the CUDA attention takes (head_dim 64). Without a CUDA device every test
// reports SKIPPED with the runtime's reason.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/cuda/device_memory.cuh"
#include "core/skip_without_gpu.h"
#include "core/thread_pool.h"
#include "model/fp8_hf_writer.h"
#include "model/model_cpu.h"
#include "model/model_cuda.h"
#include "model/model_fixture.h"

namespace nanoserve {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kBlockSize = 16, kBlocksPerSeq = 8, kSeqs = 2;

std::vector<uint8_t> host_bytes(const Tensor& dev) {
  Tensor h = cuda::to_host(dev);
  const auto* p = static_cast<const uint8_t*>(h.data());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

// Row parts one after the other, as bytes.
std::vector<uint8_t> concat(std::initializer_list<const Tensor*> parts) {
  std::vector<uint8_t> out;
  for (const Tensor* t : parts) {
    EXPECT_TRUE(t->defined() && t->is_contiguous());
    const auto* p = static_cast<const uint8_t*>(t->data());
    out.insert(out.end(), p, p + t->nbytes());
  }
  return out;
}

ForwardBatch prefill(const std::vector<int32_t>& ids) {
  const auto T = static_cast<int32_t>(ids.size());
  ForwardBatch b;
  b.tokens = ids;
  for (int32_t t = 0; t < T; ++t) {
    b.positions.push_back(t);
    b.logits_rows.push_back(t);
    b.slot_mapping.push_back(t);
  }
  b.seq_starts = {0, T};
  b.seq_ids = {0};
  b.context_lens = {T};
  b.max_blocks_per_seq = kBlocksPerSeq;
  for (int32_t j = 0; j < kBlocksPerSeq; ++j) b.block_tables.push_back(j);
  return b;
}

class HfFp8Cuda : public ::testing::TestWithParam<bool> {};  // per tensor, else per channel

TEST_P(HfFp8Cuda, UploadsTheCheckpointsBytesAndFollowsTheCpu) {
  NS_SKIP_WITHOUT_GPU();
  const bool per_tensor = GetParam();
  std::string leaf = "ns_fp8_cuda_";
  leaf += std::to_string(::getpid());
  leaf += per_tensor ? "_tensor" : "_channel";
  const fs::path dir = fs::temp_directory_path() / leaf;
  testing::write_fp8_hf_folder(dir, {}, per_tensor);
  auto f = testing::open_fp8_folder(dir.string());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const ModelConfig& c = f->config;
  ASSERT_TRUE(CudaModel::supports(c).ok()) << CudaModel::supports(c).to_string();
  ThreadPool pool(2);
  auto cpu = CpuModel::load(c, f->tensors, pool);  // f32, dequantized
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  auto rows_src = f->tensors->with_fp8_rows();
  ASSERT_NE(rows_src, nullptr);
  auto host = CpuModel::load(c, rows_src, pool);  // E4M3 rows + row scales, as the CUDA runner loads
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  auto gpu = CudaModel::upload(c, (*host)->weights(), (*host)->inv_freq());
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  EXPECT_TRUE((*gpu)->fp8());
  EXPECT_EQ((*gpu)->fp8_linears(), 4 * c.n_layers);
  // --quantization fp8 over it has nothing left to do.
  EXPECT_EQ((*gpu)->quantize_fp8().code(), StatusCode::kFailedPrecondition);

  // The device holds the checkpoint's bytes and scales, concatenated in the
  // order the forward reads them.
  for (int64_t l = 0; l < c.n_layers; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const LayerWeights& H = (*host)->weights().layers[static_cast<size_t>(l)];
    const CudaLayer& D = (*gpu)->weights().layers[static_cast<size_t>(l)];
    struct Pair {
      const LinearWeight* dev;
      std::vector<uint8_t> w, s;
    };
    const Pair pairs[] = {
        {&D.wqkv, concat({&H.wq, &H.wk, &H.wv}), concat({&H.scale.wq, &H.scale.wk, &H.scale.wv})},
        {&D.wo, concat({&H.wo}), concat({&H.scale.wo})},
        {&D.w_gate_up, concat({&H.w_gate, &H.w_up}), concat({&H.scale.w_gate, &H.scale.w_up})},
        {&D.w_down, concat({&H.w_down}), concat({&H.scale.w_down})},
    };
    for (const Pair& p : pairs) {
      ASSERT_TRUE(p.dev->fp8());
      EXPECT_EQ(host_bytes(p.dev->w), p.w) << p.dev->w.shape_string();
      EXPECT_EQ(host_bytes(p.dev->scale), p.s) << p.dev->w.shape_string();
    }
    if (per_tensor) {  // one scale repeated on every row of a part
      const float* s = H.scale.wo.data_as<const float>();
      for (int64_t n = 1; n < H.scale.wo.numel(); ++n) ASSERT_EQ(s[n], s[0]);
    }
  }

  // Logits at every position of a prompt against the CPU's with the GPU's
  // FP8 arithmetic (Workspace::fp8_tokens: each linear's input rounded to
  // E4M3 a token), at 40 tokens (the tiled FP8 kernels) and 16 (the
  // streaming ones), on average over the positions and at the worst one
  // (a few positions meet most of the code flips: fp8_hf_writer.h). Then
  // the device's row scales planted off, two ways: every scale x
  // kFp8CudaPlant, and alternate rows x and / kFp8CudaPlant (a scale on the
  // wrong row); the average of each must land far outside its bound.
  std::vector<int32_t> ids(40);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 97 + 13) % c.vocab_size);
  const std::vector<float> ref = testing::cpu_prefill_logits(**cpu, ids, /*fp8_tokens=*/true);
  const std::vector<float> ref_weight_only = testing::cpu_prefill_logits(**cpu, ids);
  const int64_t V = c.vocab_size, T = static_cast<int64_t>(ids.size());
  ASSERT_EQ(static_cast<int64_t>(ref.size()), T * V);
  CudaLimits lim{64, kSeqs, 64, kBlocksPerSeq};
  ASSERT_TRUE((*gpu)->allocate(lim, kSeqs * kBlocksPerSeq, kBlockSize).ok());
  const ForwardBatch b = prefill(ids);
  auto out = (*gpu)->forward(b);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  struct Spread {
    double sum = 0, worst = 0;
    int64_t n = 0;
    void add(double e) { sum += e, worst = std::max(worst, e), ++n; }
    double average() const { return sum / static_cast<double>(n); }
  };
  auto spread = [&](const float* logits, const std::vector<float>& r, int64_t rows, Spread& into) {
    for (int64_t t = 0; t < rows; ++t) into.add(testing::nmse(logits + t * V, r.data() + t * V, V));
  };
  Spread err, weight_only;
  spread(out->data_as<const float>(), ref, T, err);
  spread(out->data_as<const float>(), ref_weight_only, T, weight_only);
  auto short_out = (*gpu)->forward(prefill(std::vector<int32_t>(ids.begin(), ids.begin() + 16)));
  ASSERT_TRUE(short_out.ok()) << short_out.status().to_string();
  spread(short_out->data_as<const float>(), ref, 16, err);

  std::vector<Tensor> saved;
  for (const CudaLayer& L : (*gpu)->weights().layers) {
    for (const LinearWeight* lw : {&L.wqkv, &L.wo, &L.w_gate_up, &L.w_down})
      saved.push_back(cuda::to_host(lw->scale));
  }
  Spread planted[2];
  for (int alternate = 0; alternate < 2; ++alternate) {
    size_t i = 0;
    for (const CudaLayer& L : (*gpu)->weights().layers) {
      for (const LinearWeight* lw : {&L.wqkv, &L.wo, &L.w_gate_up, &L.w_down}) {
        const Tensor& true_scale = saved[i++];
        Tensor s = Tensor::empty(DType::kF32, true_scale.shape());
        std::memcpy(s.data(), true_scale.data(), static_cast<size_t>(true_scale.nbytes()));
        for (int64_t n = 0; n < s.numel(); ++n) {
          float& v = s.data_as<float>()[n];
          v = alternate && n % 2 ? v / testing::kFp8CudaPlant : v * testing::kFp8CudaPlant;
        }
        cuda::copy_to_device(s, lw->scale);
      }
    }
    auto p = (*gpu)->forward(b);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    spread(p->data_as<const float>(), ref, T, planted[alternate]);
  }
  std::printf(
      "%s: GPU vs CPU (W8A8) logits NMSE over %lld positions: mean %.2e, worst %.2e (against the "
      "weight-only CPU: mean %.2e); planted, mean: scales x %.2f %.2e, alternate rows x and / %.2f %.2e\n",
      per_tensor ? "per tensor" : "per channel", static_cast<long long>(err.n), err.average(), err.worst,
      weight_only.average(), testing::kFp8CudaPlant, planted[0].average(), testing::kFp8CudaPlant,
      planted[1].average());
  EXPECT_LE(err.average(), testing::kFp8CudaMeanNmse);
  EXPECT_LE(err.worst, testing::kFp8CudaWorstNmse);
  EXPECT_GT(planted[0].average(), 3 * testing::kFp8CudaMeanNmse) << "every scale planted off";
  EXPECT_GT(planted[1].average(), 3 * testing::kFp8CudaMeanNmse) << "alternate row scales planted off";
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Schemes, HfFp8Cuda, ::testing::Values(false, true), [](const auto& info) {
  return std::string(info.param ? "PerTensor" : "PerChannel");
});

}  // namespace
}  // namespace nanoserve
