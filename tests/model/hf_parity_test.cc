// The default model from its GGUF and from its Hugging Face export give the
// same logits. The export (tests/fixtures/hf/make_hf_folder.py) is made by
// transformers' own GGUF conversion: its tensor names and its reverse of
// llama.cpp's q/k permutation, dequantized to f32. The GGUF side is read
// through a source that dequantizes each weight to f32 the same way, so both
// models compute in f32 over equal weights: any gap is a loader bug (names,
// permutation, config).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "io/gguf.h"
#include "io/tensor_source.h"
#include "model/kv_cpu.h"
#include "model/hf_fixture.h"
#include "model/model_cpu.h"
#include "model/model_fixture.h"
#include "model/model_source.h"
#include "ops/dequantize/dequantize.h"

namespace nanoserve {
namespace {

// The GGUF's tensors, each dequantized to f32 into owned memory.
class DequantizedGguf final : public TensorSource {
 public:
  explicit DequantizedGguf(std::shared_ptr<const GgufFile> f) : f_(std::move(f)) {}
  std::string describe() const override { return "gguf dequantized to f32"; }
  bool contains(std::string_view name) const override { return f_->find_tensor(name) != nullptr; }
  StatusOr<Tensor> tensor(std::string_view name) const override {
    NS_ASSIGN_OR_RETURN(Tensor t, f_->tensor(name));
    if (t.dtype() == DType::kF32) return t;
    Tensor out = Tensor::empty(DType::kF32, t.shape());
    const int64_t inner = t.dim(-1), rows = t.numel() / inner, row_bytes = dtype_bytes(t.dtype(), inner);
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(t.dtype(), static_cast<const uint8_t*>(t.data()) + r * row_bytes,
                     out.data_as<float>() + r * inner, inner);
    }
    return out;
  }

 private:
  std::shared_ptr<const GgufFile> f_;
};

std::vector<float> all_logits(const CpuModel& model, const std::vector<int32_t>& tokens) {
  const auto T = static_cast<int32_t>(tokens.size());
  CpuKV cache = CpuKV::per_sequence(model.config(), 1, T, model.pool());
  Workspace ws = model.make_workspace(T, T);
  ForwardBatch b;
  b.tokens = tokens;
  for (int32_t t = 0; t < T; ++t) b.positions.push_back(t), b.logits_rows.push_back(t);
  b.seq_starts = {0, T};
  b.seq_ids = {0};
  b.context_lens = {T};
  auto out = model.forward(b, cache, ws);
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  if (!out.ok()) return {};
  return std::vector<float>(out->data_as<const float>(),
                            out->data_as<const float>() + T * model.config().vocab_size);
}

TEST(HfParity, DefaultModelGgufAndHfFolderGiveTheSameLogits) {
  if (!testing::hf_fixture_present()) GTEST_SKIP() << testing::kHfFixtureHint;
  ThreadPool pool(2);
  auto gguf = GgufFile::open(testing::kDefaultModel);
  ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
  auto gguf_config = config_from_gguf(**gguf);
  ASSERT_TRUE(gguf_config.ok());
  auto from_gguf = CpuModel::load(*gguf_config, std::make_shared<DequantizedGguf>(*gguf), pool);
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.status().to_string();

  ModelSpec spec;
  spec.path = testing::hf_fixture_dir();  // format auto: a folder is safetensors
  auto src = open_model_source(spec);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ(src->format, LoadFormat::kSafetensors);
  EXPECT_EQ(src->config.to_string(), gguf_config->to_string());
  auto from_hf = CpuModel::load(src->config, src->tensors, pool);
  ASSERT_TRUE(from_hf.ok()) << from_hf.status().to_string();

  auto tok = Tokenizer::from_gguf(**gguf);
  ASSERT_TRUE(tok.ok());
  const int64_t V = gguf_config->vocab_size;
  double worst = 0;
  for (const char* text :
       {"The capital of France is", "<|im_start|>user\nWrite a haiku about rust.<|im_end|>\n",
        "def fibonacci(n):\n    if n < 2:\n        return n\n    return"}) {
    const auto ids = (*tok)->encode(text, true, true);
    const auto a = all_logits(**from_gguf, ids), b = all_logits(**from_hf, ids);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(a.size(), ids.size() * static_cast<size_t>(V));
    double err = 0, scale = 0;
    size_t argmax_same = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      const float* ra = a.data() + t * V;
      const float* rb = b.data() + t * V;
      for (int64_t i = 0; i < V; ++i) {
        err = std::max(err, std::fabs(static_cast<double>(ra[i]) - rb[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(ra[i])));
      }
      argmax_same += testing::argmax(ra, V) == testing::argmax(rb, V);
    }
    std::printf("[ hf parity] %zu positions, max |logit| %.2f, max abs diff %.3g, argmax equal %zu/%zu\n",
                ids.size(), scale, err, argmax_same, ids.size());
    EXPECT_EQ(argmax_same, ids.size()) << text;
    worst = std::max(worst, err);
  }
  // Same f32 weights, same kernels: only a different dequantization rounding could
  // separate them, and there is none (the export used the same block formulas).
  EXPECT_LE(worst, 1e-4);
}

}  // namespace
}  // namespace nanoserve
