// FP8 checkpoints of HF folders (model/hf_fp8.h) on the CPU, against
// transformers.
//
// tests/fixtures/fp8/checkpoints (make_fp8_checkpoints.py) holds the llama3
// family model quantized three ways: compressed-tensors per channel and per
// tensor, transformers' fp8 with block-wise scales; and transformers' f32
// logits over the weights each checkpoint stands for, at all 49 positions
// of one prompt. Each folder loads as the engine loads it (open_model_source)
// and runs one prefill on the CPU, in f32 over the dequantized weights.
//
// Tolerance. Measured worst |ours - transformers| (2026-12-05): see the
// printout, ~1e-5 in every scheme (f32 against f32 in another summation
// order). kMaxAbs = 1e-3 sits far above that and below what a planted error
// does: every scale of one linear 3% off, or a transposed block grid.

#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "io/safetensors_builder.h"
#include "model/config_hf.h"
#include "model/fp8_hf_writer.h"
#include "model/kv_cpu.h"
#include "model/model_cpu.h"
#include "model/model_fixture.h"
#include "model/model_source.h"

namespace nanoserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr float kMaxAbs = 1e-3f;
const std::string kDir = NS_SOURCE_DIR "/tests/fixtures/fp8/checkpoints/";
const char* const kSchemes[] = {"channel", "tensor", "block"};

struct Reference {
  std::vector<int32_t> ids;
  std::vector<float> logits;  // [T, vocab]
};

Reference load_reference(const std::string& scheme) {
  Reference r;
  std::ifstream in(kDir + "reference.json");
  r.ids = json::parse(in)["prompt"]["ids"].get<std::vector<int32_t>>();
  auto f = SafetensorsFile::open(kDir + "reference.safetensors");
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (!f.ok()) return r;
  auto t = (*f)->tensor("logits." + scheme);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (t.ok()) r.logits.assign(t->data_as<const float>(), t->data_as<const float>() + t->numel());
  return r;
}

// The model of `folder` on the CPU, or the first error of opening or loading it.
StatusOr<std::unique_ptr<CpuModel>> load(const std::string& folder, ThreadPool& pool) {
  ModelSpec spec;
  spec.path = folder;
  NS_ASSIGN_OR_RETURN(ModelSource src, open_model_source(spec));
  return CpuModel::load(src.config, src.tensors, pool);
}

// Worst |logit - reference| over every position of one prefill of the prompt.
float worst_error(const CpuModel& m, const Reference& ref) {
  const auto T = static_cast<int32_t>(ref.ids.size());
  ForwardBatch b;
  b.tokens = ref.ids;
  for (int32_t t = 0; t < T; ++t) {
    b.positions.push_back(t);
    b.logits_rows.push_back(t);
  }
  b.seq_starts = {0, T};
  b.seq_ids = {0};
  b.context_lens = {T};
  CpuKV cache = CpuKV::per_sequence(m.config(), 1, T, m.pool());
  Workspace ws = m.make_workspace(T, T);
  auto out = m.forward(b, cache, ws);
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  if (!out.ok() || out->numel() != static_cast<int64_t>(ref.logits.size())) return INFINITY;
  float worst = 0;
  for (int64_t i = 0; i < out->numel(); ++i) {
    worst = std::max(worst, std::fabs(out->data_as<const float>()[i] - ref.logits[static_cast<size_t>(i)]));
  }
  return worst;
}

// A tensor of a checkpoint being rewritten: drop it by returning false.
struct Stored {
  std::string dtype;  // safetensors name: "F8_E4M3", "BF16", "F32"
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
using Edit = std::function<bool(const std::string& name, Stored& t)>;

// A copy of fixture folder `scheme` in a fresh temp folder, each tensor
// through `edit` and config.json through `edit_config`.
std::string rewrite(const std::string& scheme, const std::string& tag, const Edit& edit,
                    const std::function<void(json&)>& edit_config = {}) {
  std::string leaf = "ns_fp8_";
  leaf += std::to_string(::getpid());
  leaf += "_" + scheme + "_" + tag;
  const fs::path dir = fs::temp_directory_path() / leaf;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(kDir + scheme + "/" + f, dir / f);
  std::ifstream cin(kDir + scheme + "/config.json");
  json config = json::parse(cin);
  if (edit_config) edit_config(config);
  std::ofstream(dir / "config.json") << config.dump(2);
  auto file = SafetensorsFile::open(kDir + scheme + "/model.safetensors");
  EXPECT_TRUE(file.ok()) << file.status().to_string();
  testing::SafetensorsBuilder b;
  for (const SafetensorsTensorInfo& info : (*file)->tensors()) {
    Tensor t = *(*file)->tensor(info.name);
    const auto* p = static_cast<const uint8_t*>(t.data());
    Stored s{dtype_name(info.dtype), info.shape, std::vector<uint8_t>(p, p + t.nbytes())};
    if (edit && !edit(info.name, s)) continue;
    std::string shape = "[";
    for (size_t i = 0; i < s.shape.size(); ++i) {
      if (i > 0) shape += ",";
      shape += std::to_string(s.shape[i]);
    }
    b.tensor(info.name, s.dtype, shape + "]", s.bytes);
  }
  const auto bytes = b.build();
  std::ofstream(dir / "model.safetensors", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return dir.string();
}

// Each element of a stored F32 or BF16 tensor through f.
void map_floats(Stored& s, const std::function<float(float)>& f) {
  if (s.dtype == "F32") {
    for (size_t i = 0; i < s.bytes.size(); i += 4) {
      float v;
      std::memcpy(&v, &s.bytes[i], 4);
      v = f(v);
      std::memcpy(&s.bytes[i], &v, 4);
    }
    return;
  }
  ASSERT_EQ(s.dtype, "BF16");
  for (size_t i = 0; i < s.bytes.size(); i += 2) {
    uint16_t h;
    std::memcpy(&h, &s.bytes[i], 2);
    h = f32_to_bf16(f(bf16_to_f32(h)));
    std::memcpy(&s.bytes[i], &h, 2);
  }
}

std::string scale_suffix(const std::string& scheme) {
  return scheme == "block" ? ".weight_scale_inv" : ".weight_scale";
}

TEST(HfFp8Checkpoint, EverySchemeMatchesTransformers) {
  ThreadPool pool(2);
  for (const char* scheme : kSchemes) {
    SCOPED_TRACE(scheme);
    const Reference ref = load_reference(scheme);
    ASSERT_EQ(ref.ids.size(), 49u);
    ModelSpec spec;
    spec.path = kDir + scheme;
    auto src = open_model_source(spec);
    ASSERT_TRUE(src.ok()) << src.status().to_string();
    EXPECT_NE(
        src->describe().find(std::string(scheme) == "block"     ? "fp8 (48 x 48 blocks)"
                             : std::string(scheme) == "channel" ? "compressed-tensors FP8 (per channel)"
                                                                : "compressed-tensors FP8 (per tensor)"),
        std::string::npos)
        << src->describe();
    auto m = CpuModel::load(src->config, src->tensors, pool);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    // Weights come dequantized: f32, what the forward runs any f32 model with.
    EXPECT_EQ((*m)->weights().layers[0].wq.dtype(), DType::kF32);
    EXPECT_FALSE((*m)->weights().layers[0].scale.wq.defined());
    const float worst = worst_error(**m, ref);
    std::printf("%s: max |logit - transformers| = %.3g over %zu positions\n", scheme, worst, ref.ids.size());
    EXPECT_LE(worst, kMaxAbs);
  }
}

// Every scale of one linear 3% off, in each scheme: the logits leave the bound.
TEST(HfFp8Checkpoint, AScaleThreePercentOffFails) {
  ThreadPool pool(2);
  for (const char* scheme : kSchemes) {
    SCOPED_TRACE(scheme);
    const std::string target = "model.layers.1.self_attn.v_proj" + scale_suffix(scheme);
    bool planted = false;
    const std::string dir = rewrite(scheme, "scale3", [&](const std::string& name, Stored& s) {
      if (name == target) {
        map_floats(s, [](float v) { return v * 1.03f; });
        planted = true;
      }
      return true;
    });
    ASSERT_TRUE(planted) << target;
    auto m = load(dir, pool);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const float worst = worst_error(**m, load_reference(scheme));
    std::printf("%s, %s x 1.03: max |logit - transformers| = %.3g\n", scheme, target.c_str(), worst);
    EXPECT_GT(worst, kMaxAbs) << "a 3% scale error passes";
    fs::remove_all(dir);
  }
}

// The block grid read in the wrong order: transposed, a square grid
// (q_proj [64, 64] -> [2, 2]) loads and misses; a non-square one (k_proj
// [32, 64] -> [1, 2]) is refused by shape, naming the tensor.
TEST(HfFp8Checkpoint, ATransposedBlockScaleFails) {
  ThreadPool pool(2);
  auto transpose = [](const std::string& which) {
    return [which](const std::string& name, Stored& s) {
      if (name != which) return true;
      EXPECT_EQ(s.dtype, "F32");
      const int64_t r = s.shape[0], c = s.shape[1];
      std::vector<uint8_t> t(s.bytes.size());
      for (int64_t i = 0; i < r; ++i) {
        for (int64_t j = 0; j < c; ++j) std::memcpy(&t[(j * r + i) * 4], &s.bytes[(i * c + j) * 4], 4);
      }
      s.bytes = t;
      s.shape = {c, r};
      return true;
    };
  };
  const std::string square =
      rewrite("block", "tq", transpose("model.layers.0.self_attn.q_proj.weight_scale_inv"));
  auto m = load(square, pool);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const float worst = worst_error(**m, load_reference("block"));
  std::printf("block, q_proj's 2 x 2 scale grid transposed: max |logit - transformers| = %.3g\n", worst);
  EXPECT_GT(worst, kMaxAbs) << "a transposed block grid passes";

  const std::string wide =
      rewrite("block", "tk", transpose("model.layers.0.self_attn.k_proj.weight_scale_inv"));
  auto bad = load(wide, pool);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      bad.status().message().find("'model.layers.0.self_attn.k_proj.weight_scale_inv' has shape [2, 1]"),
      std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("need [1, 2] (48 x 48 blocks)"), std::string::npos)
      << bad.status().message();
  fs::remove_all(square);
  fs::remove_all(wide);
}

// A checkpoint that does not hold what its config says is refused, naming
// the tensor and what is wrong; never a crash or silent garbage.
TEST(HfFp8Checkpoint, BrokenTensorsAreRefusedByName) {
  ThreadPool pool(1);
  struct Case {
    const char* tag;
    Edit edit;
    std::function<void(json&)> config;
    std::vector<std::string> want;
  };
  const std::string o = "model.layers.0.self_attn.o_proj.";
  const std::vector<Case> cases = {
      {"noscale",
       [&](const std::string& n, Stored&) { return n != o + "weight_scale"; },
       {},
       {"'" + o + "weight' is F8_E4M3 but its scale '" + o + "weight_scale' is missing"}},
      {"noconfig",
       {},
       [](json& c) { c.erase("quantization_config"); },
       {"is F8_E4M3 but config.json has no quantization_config"}},
      {"nan",
       [&](const std::string& n, Stored& s) {
         if (n == o + "weight") s.bytes[5] = 0xff;
         return true;
       },
       {},
       {"'" + o + "weight': element 5 is an E4M3 NaN (0xff)"}},
      {"inf",
       [&](const std::string& n, Stored& s) {
         if (n == o + "weight_scale") map_floats(s, [](float) { return INFINITY; });
         return true;
       },
       {},
       {"'" + o + "weight_scale': scale 0 is not finite"}},
      {"shape",
       [&](const std::string& n, Stored& s) {
         if (n == o + "weight") s.shape = {32, 128};  // the same bytes as [32, 128]
         return true;
       },
       {},
       {"'" + o + "weight_scale' has shape [64, 1]; for the weight [32, 128]"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tag);
    const std::string dir = rewrite("channel", c.tag, c.edit, c.config);
    auto m = load(dir, pool);
    ASSERT_FALSE(m.ok());
    for (const std::string& w : c.want)
      EXPECT_NE(m.status().message().find(w), std::string::npos) << m.status().message();
    fs::remove_all(dir);
  }
}

// with_fp8_rows(), what the CUDA runner loads from: the per-channel and
// per-tensor linears as their stored E4M3 bytes (q/k rows permuted) beside
// row scales that stand, element by element, for exactly the f32 weights the
// CPU runs; block-scaled linears as those f32 weights rounded to bf16.
TEST(HfFp8Checkpoint, Fp8RowsAreTheStoredBytesAndTheirScales) {
  ThreadPool pool(1);
  for (const char* scheme : kSchemes) {
    SCOPED_TRACE(scheme);
    ModelSpec spec;
    spec.path = kDir + scheme;
    auto src = open_model_source(spec);
    ASSERT_TRUE(src.ok()) << src.status().to_string();
    auto rows_src = src->tensors->with_fp8_rows();
    ASSERT_NE(rows_src, nullptr);
    auto deq = CpuModel::load(src->config, src->tensors, pool);
    auto rows = CpuModel::load(src->config, rows_src, pool);
    ASSERT_TRUE(deq.ok()) << deq.status().to_string();
    ASSERT_TRUE(rows.ok()) << rows.status().to_string();
    const bool block = std::string(scheme) == "block";
    for (size_t l = 0; l < (*deq)->weights().layers.size(); ++l) {
      const LayerWeights& D = (*deq)->weights().layers[l];
      const LayerWeights& R = (*rows)->weights().layers[l];
      const std::pair<const Tensor*, const Tensor*> linears[] = {
          {&R.wq, &R.scale.wq},        {&R.wk, &R.scale.wk},         {&R.wv, &R.scale.wv},
          {&R.wo, &R.scale.wo},        {&R.w_gate, &R.scale.w_gate}, {&R.w_up, &R.scale.w_up},
          {&R.w_down, &R.scale.w_down}};
      const Tensor* dense[] = {&D.wq, &D.wk, &D.wv, &D.wo, &D.w_gate, &D.w_up, &D.w_down};
      for (int i = 0; i < 7; ++i) {
        const Tensor& w = *linears[i].first;
        const Tensor& d = *dense[i];
        ASSERT_EQ(w.shape(), d.shape());
        const int64_t N = w.dim(0), K = w.dim(1);
        const float* want = d.data_as<const float>();
        int64_t differ = 0;
        if (block) {
          ASSERT_EQ(w.dtype(), DType::kBF16) << "linear " << i;
          EXPECT_FALSE(linears[i].second->defined());
          for (int64_t e = 0; e < N * K; ++e)
            differ += w.data_as<const uint16_t>()[e] != f32_to_bf16(want[e]);
        } else {
          ASSERT_EQ(w.dtype(), DType::kF8E4M3) << "linear " << i;
          const Tensor& s = *linears[i].second;
          ASSERT_TRUE(s.defined());
          ASSERT_EQ(s.numel(), N);
          const auto* q = static_cast<const uint8_t*>(w.data());
          for (int64_t n = 0; n < N; ++n) {
            for (int64_t k = 0; k < K; ++k) {
              differ += f8e4m3_to_f32(q[n * K + k]) * s.data_as<const float>()[n] != want[n * K + k];
            }
          }
        }
        EXPECT_EQ(differ, 0) << "layer " << l << " linear " << i;
      }
    }
    // Embeddings and norms are the same tensors either way.
    EXPECT_EQ((*rows)->weights().tok_embd.dtype(), (*deq)->weights().tok_embd.dtype());
  }
  // Sources without FP8 weights have no such view.
  ModelSpec plain;
  plain.path = NS_SOURCE_DIR "/tests/fixtures/families/llama3/hf";
  auto src = open_model_source(plain);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ(src->tensors->with_fp8_rows(), nullptr);
  EXPECT_EQ(src->tensors->row_scales("blk.0.attn_q.weight").status().code(), StatusCode::kNotFound);
}

// The head_dim-64 checkpoint the CUDA test (hf_fp8_cuda_test.cc) uploads:
// its planted scale error (every scale kFp8CudaPlant off) moves the CPU's
// logits, in the GPU's FP8 arithmetic as that test's reference runs it
// (Workspace::fp8_tokens), well past the CUDA test's NMSE bound, so that
// test's plant has teeth.
TEST(HfFp8Checkpoint, TheCudaTestsPlantedScalesMoveTheLogits) {
  ThreadPool pool(2);
  std::string leaf = "ns_fp8_cuda_shape_";
  leaf += std::to_string(::getpid());
  const fs::path base = fs::temp_directory_path() / leaf;
  std::vector<int32_t> ids(40);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 97 + 13) % 300);
  for (const bool per_tensor : {false, true}) {
    SCOPED_TRACE(per_tensor ? "per tensor" : "per channel");
    std::vector<float> logits[2];
    for (int planted = 0; planted < 2; ++planted) {
      const fs::path dir = base / (per_tensor ? (planted ? "tp" : "t") : (planted ? "cp" : "c"));
      testing::write_fp8_hf_folder(dir, {}, per_tensor, planted ? testing::kFp8CudaPlant : 1.0f);
      auto f = testing::open_fp8_folder(dir.string());
      ASSERT_TRUE(f.ok()) << f.status().to_string();
      auto m = CpuModel::load(f->config, f->tensors, pool);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      logits[planted] = testing::cpu_prefill_logits(**m, ids, /*fp8_tokens=*/true);
      ASSERT_EQ(logits[planted].size(), ids.size() * 300);
    }
    double mean = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      mean += testing::nmse(logits[1].data() + t * 300, logits[0].data() + t * 300, 300) /
              static_cast<double>(ids.size());
    }
    std::printf(
        "%s: scales x %.2f, logits NMSE over %zu positions, mean %.3g (the CUDA test's bound on the "
        "mean %.0e)\n",
        per_tensor ? "per tensor" : "per channel", testing::kFp8CudaPlant, ids.size(), mean,
        testing::kFp8CudaMeanNmse);
    EXPECT_GT(mean, 3 * testing::kFp8CudaMeanNmse);
  }
  fs::remove_all(base);
}

// quantization_config: the FP8 schemes are read; every other scheme is
// refused with the key that says why.
json fixture_config(const std::string& scheme) {
  std::ifstream in(kDir + scheme + "/config.json");
  return json::parse(in);
}

TEST(HfFp8Config, ReadsTheFixturesSchemes) {
  auto channel = config_from_hf_json(fixture_config("channel"));
  ASSERT_TRUE(channel.ok()) << channel.status().to_string();
  EXPECT_EQ(channel->fp8.method, HfFp8::Method::kCompressedTensors);
  EXPECT_TRUE(channel->fp8.channel);
  EXPECT_FALSE(channel->fp8.tensor);
  EXPECT_EQ(channel->fp8.block_rows, 0);
  EXPECT_STREQ(channel->fp8.scale_suffix(), "weight_scale");
  auto block = config_from_hf_json(fixture_config("block"));
  ASSERT_TRUE(block.ok()) << block.status().to_string();
  EXPECT_EQ(block->fp8.method, HfFp8::Method::kFp8);
  EXPECT_EQ(block->fp8.block_rows, 48);
  EXPECT_EQ(block->fp8.block_cols, 48);
  EXPECT_STREQ(block->fp8.scale_suffix(), "weight_scale_inv");
  // transformers' defaults: no weight_block_size is 128 x 128; null is one scale a tensor.
  json j = fixture_config("block");
  j["quantization_config"].erase("weight_block_size");
  EXPECT_EQ(config_from_hf_json(j)->fp8.block_rows, 128);
  j["quantization_config"]["weight_block_size"] = nullptr;
  EXPECT_TRUE(config_from_hf_json(j)->fp8.tensor);
  // compressed-tensors' block strategy.
  j = fixture_config("tensor");
  json& w = j["quantization_config"]["config_groups"]["group_0"]["weights"];
  w["strategy"] = "block";
  w["block_structure"] = {128, 64};
  auto ct_block = config_from_hf_json(j);
  ASSERT_TRUE(ct_block.ok()) << ct_block.status().to_string();
  EXPECT_EQ(ct_block->fp8.block_rows, 128);
  EXPECT_EQ(ct_block->fp8.block_cols, 64);
  // No quantization_config: nothing to scale.
  j = fixture_config("channel");
  j.erase("quantization_config");
  EXPECT_FALSE(config_from_hf_json(j)->fp8.any());
}

TEST(HfFp8Config, OtherSchemesAreRefusedByKey) {
  struct Case {
    const char* scheme;  // the fixture whose config is edited
    std::function<void(json&)> edit;
    StatusCode code;
    std::string want;
  };
  auto group = [](json& q) -> json& { return q["config_groups"]["group_0"]; };
  const StatusCode kUn = StatusCode::kUnimplemented, kBad = StatusCode::kInvalidArgument;
  const std::vector<Case> cases = {
      {"channel", [](json& q) { q["quant_method"] = "awq"; }, kUn,
       "'quantization_config.quant_method': 'awq'"},
      {"channel", [](json& q) { q["quant_method"] = "gptq"; }, kUn,
       "'quantization_config.quant_method': 'gptq'"},
      {"channel", [](json& q) { q.erase("quant_method"); }, kBad,
       "'quantization_config.quant_method': missing"},
      {"channel", [&](json& q) { group(q)["weights"]["type"] = "int"; }, kUn,
       "'quantization_config.config_groups.group_0.weights.type': 'int': int8 weights"},
      {"channel", [&](json& q) { group(q)["weights"]["num_bits"] = 4; }, kUn,
       "'quantization_config.config_groups.group_0.weights.num_bits': 4-bit weights"},
      {"channel", [&](json& q) { group(q)["weights"]["symmetric"] = false; }, kUn,
       "'quantization_config.config_groups.group_0.weights.symmetric': asymmetric"},
      {"channel", [&](json& q) { group(q)["weights"]["strategy"] = "group"; }, kUn,
       "'quantization_config.config_groups.group_0.weights.strategy': 'group'"},
      {"channel", [&](json& q) { group(q)["input_activations"]["dynamic"] = false; }, kUn,
       "'quantization_config.config_groups.group_0.input_activations.dynamic': static activation scales"},
      {"channel", [&](json& q) { group(q)["output_activations"] = group(q)["input_activations"]; }, kUn,
       "'quantization_config.config_groups.group_0.output_activations'"},
      {"channel", [](json& q) { q["format"] = "pack-quantized"; }, kUn,
       "'quantization_config.format': 'pack-quantized'"},
      {"channel",
       [](json& q) {
         q["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}};
       },
       kUn, "'quantization_config.kv_cache_scheme': a quantized KV cache"},
      {"channel",
       [](json& q) {
         q["sparsity_config"] = {{"format", "sparse-24-bitmask"}};
       },
       kUn, "'quantization_config.sparsity_config': sparse weights"},
      {"channel", [](json& q) { q["config_groups"] = json::object(); }, kBad,
       "'quantization_config.config_groups': missing or empty"},
      {"tensor", [&](json& q) { group(q)["weights"]["strategy"] = "block"; }, kBad,
       "'quantization_config.config_groups.group_0.weights.block_structure': missing"},
      {"block", [](json& q) { q["activation_scheme"] = "static"; }, kUn,
       "'quantization_config.activation_scheme': 'static'"},
      {"block",
       [](json& q) {
         q["weight_block_size"] = {0, 128};
       },
       kBad, "'quantization_config.weight_block_size': expected [rows, cols]"},
  };
  for (const Case& c : cases) {
    json j = fixture_config(c.scheme);
    c.edit(j["quantization_config"]);
    auto got = config_from_hf_json(j, "config.json");
    ASSERT_FALSE(got.ok()) << c.want;
    EXPECT_EQ(got.status().code(), c.code) << got.status().message();
    EXPECT_NE(got.status().message().find("config.json: " + c.want), std::string::npos)
        << got.status().message();
  }
  // A refused scheme stops the folder from loading, before any weight is read.
  const std::string dir =
      rewrite("channel", "awq", {}, [](json& c) { c["quantization_config"]["quant_method"] = "awq"; });
  ModelSpec spec;
  spec.path = dir;
  EXPECT_EQ(open_model_source(spec).status().code(), StatusCode::kUnimplemented);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace nanoserve
