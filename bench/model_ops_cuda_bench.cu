// The model's non-attention ops on the GPU at the Llama-3-8B shapes (dim 4096,
// 32 q / 8 kv heads of 128, ffn 14336, vocab 128256): time per call and the
// bandwidth achieved (bytes the op must move / time) against the
// device-to-device copy ceiling measured in the same run; and the linear layers
// at M = 1 to 1,024 through our linear_cuda (its own choice of kernel, and each
// kernel forced from M = 16) and through cuBLASLt's per-shape choice, in TB/s
// (weight + activation bytes / time) and TFLOP/s; and the device sampler over
// the vocabulary.
//
// Each timed unit is a CUDA graph of kCalls calls (launch gaps as a captured
// decode step sees them), cycling over enough copies of the inputs that they
// do not sit in L2 (50 MB); inputs are random (fill_uniform_cuda), never zeros.
//
//   model_ops_cuda_bench [--quick] [--gemms [--ms M,M,..]] [--sweep] [--only NAME:M [--fp8]] [--sample]
//
// --sample: the sampler only. --sweep: every kernel forced at M = 16 .. 1,024 (bench_sweep). --gemms: the
// linears only (--ms: at those M only, e.g. the streaming kernel's 1,8,16,32). --only NAME:M (e.g.
// gate_up:64): the linears only, that one at that M, with linear_cuda's own kernel and cuBLASLt's, or with
// --fp8 linear_cuda over the same weights in FP8 rows alone (the profiler's view of one kernel:
// scripts/gpu-check's profile section). Every run of all the linears has an fp8 row beside ours (bytes: the
// FP8 weight and its scales).

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/device_memory.cuh"
#include "ops/argmax/argmax_cuda.cuh"
#include "ops/embedding/embedding_cuda.cuh"
#include "ops/fill/fill_cuda.cuh"
#include "ops/matmul/linear_cuda.cuh"
#include "ops/matmul/matmul_cuda.cuh"
#include "ops/rmsnorm/rmsnorm_cuda.cuh"
#include "ops/rope/rope_cuda.cuh"
#include "ops/sample/sample_cuda.cuh"
#include "ops/silu_mul/silu_mul_cuda.cuh"

namespace nanoserve {
namespace {

constexpr int kCalls = 20;                 // calls a graph
constexpr int64_t kColdBytes = 256 << 20;  // the copies of an op's inputs span at least this
constexpr int kMaxCopies = 32;

constexpr int64_t kDim = 4096, kHeads = 32, kKvHeads = 8, kHeadDim = 128, kFfn = 14336, kVocab = 128256;

int g_reps = 10;  // graph launches timed; the median is reported

// Median time of one call (ms) of `call(i)` (i: the call's index in the graph)
// captured kCalls times into a graph on `stream`.
double time_graph(cudaStream_t stream, const std::function<void(int)>& call) {
  call(0);  // outside the capture: lazy loading, cuBLASLt's heuristic
  NS_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  NS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kCalls; ++i) call(i);
  NS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  NS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  NS_CUDA_CHECK(cudaEventCreate(&start));
  NS_CUDA_CHECK(cudaEventCreate(&stop));
  NS_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up
  std::vector<float> ms;
  for (int r = 0; r < g_reps; ++r) {
    NS_CUDA_CHECK(cudaEventRecord(start, stream));
    NS_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    NS_CUDA_CHECK(cudaEventRecord(stop, stream));
    NS_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    NS_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t / kCalls);
  }
  NS_CUDA_CHECK(cudaEventDestroy(start));
  NS_CUDA_CHECK(cudaEventDestroy(stop));
  NS_CUDA_CHECK(cudaGraphExecDestroy(exec));
  NS_CUDA_CHECK(cudaGraphDestroy(graph));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Device-to-device copy of 1 GiB: bytes read + written over time (TB/s).
double copy_ceiling_tbs() {
  const int64_t n = int64_t{1} << 30;
  const Tensor a = cuda::empty(DType::kF32, {n / 4}), b = cuda::empty(DType::kF32, {n / 4});
  cudaEvent_t start, stop;
  NS_CUDA_CHECK(cudaEventCreate(&start));
  NS_CUDA_CHECK(cudaEventCreate(&stop));
  float best = 1e30f;
  for (int r = 0; r < 5; ++r) {
    NS_CUDA_CHECK(cudaEventRecord(start));
    NS_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), n, cudaMemcpyDeviceToDevice));
    NS_CUDA_CHECK(cudaEventRecord(stop));
    NS_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    NS_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    best = std::min(best, t);
  }
  NS_CUDA_CHECK(cudaEventDestroy(start));
  NS_CUDA_CHECK(cudaEventDestroy(stop));
  return 2.0 * static_cast<double>(n) / (best * 1e-3) / 1e12;
}

int copies_for(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>(kColdBytes / std::max<int64_t>(bytes, 1), 1, kMaxCopies));
}

Tensor random_tensor(DType dt, std::vector<int64_t> shape, uint64_t seed, float scale = 1.0f) {
  Tensor t = cuda::empty(dt, std::move(shape));
  fill_uniform_cuda(t, seed, scale, nullptr);
  return t;
}

Tensor i32_tensor(const std::vector<int32_t>& v) {
  Tensor t = cuda::empty(DType::kI32, {static_cast<int64_t>(v.size())});
  cuda::copy_bytes_to_device(t.data(), v.data(), static_cast<int64_t>(v.size()) * 4);
  return t;
}

void report(const char* op, const std::string& shape, double ms, double bytes, double ceiling_tbs) {
  const double gbs = bytes / (ms * 1e-3) / 1e9;
  std::printf("%-14s %-28s %9.2f us %9.1f GB/s %6.1f%% of copy\n", op, shape.c_str(), ms * 1e3, gbs,
              100.0 * gbs / (ceiling_tbs * 1e3));
}

// Logits rows of a peaked distribution: normal with standard deviation
// kPeakedSigma, where a model's few likely tokens hold most of the mass (the
// bench prints a row's top-p nucleus). Uniform logits in +-10 spread the
// mass: their top-p 0.9 nucleus at T 0.8 is ~12k tokens, past the sampler's
// 8,192-key window, so the kernel walks both windows and leaves the row to
// the host.
constexpr float kPeakedSigma = 4.0f;
std::vector<float> peaked_host(int64_t R, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, kPeakedSigma);
  std::vector<float> host(static_cast<size_t>(R * kVocab));
  for (float& x : host) x = normal(rng);
  return host;
}
Tensor device_rows(const std::vector<float>& host, int64_t R) {
  Tensor t = cuda::empty(DType::kF32, {R, kVocab});
  cuda::copy_bytes_to_device(t.data(), host.data(), static_cast<int64_t>(host.size()) * 4);
  return t;
}

// The tokens of a row's top-p nucleus at temperature T (the host's count,
// printed beside the peaked rows).
int64_t nucleus_size(std::vector<float> row, float T, double top_p) {
  std::sort(row.begin(), row.end(), std::greater<>());
  double total = 0.0;
  for (const float x : row) total += std::exp(static_cast<double>(x - row[0]) / T);
  double cum = 0.0;
  for (size_t j = 0; j < row.size(); ++j) {
    if (cum >= top_p * total) return static_cast<int64_t>(j);
    cum += std::exp(static_cast<double>(row[j] - row[0]) / T);
  }
  return static_cast<int64_t>(row.size());
}

// The device sampler over the vocabulary (logits uniform in +-10, or peaked),
// each row with the same params; bytes are one read of the rows (the kernel
// makes several passes).
void bench_sample(cudaStream_t s, double ceiling) {
  struct Case {
    const char* name;
    float temperature;
    int32_t top_k;
    float top_p, min_p;
    int32_t num_logprobs;
    bool peaked;
  };
  const Case cases[] = {{"T 1", 1.0f, -1, 1.0f, 0.0f, -1, false},
                        {"T 0.8 k 50 p 0.95", 0.8f, 50, 0.95f, 0.0f, -1, false},
                        {"T 0.8 p 0.9", 0.8f, -1, 0.9f, 0.0f, -1, false},
                        {"T 0.8 min_p 0.05", 0.8f, -1, 1.0f, 0.05f, -1, false},
                        {"T 0.8 k 50 lp 5", 0.8f, 50, 1.0f, 0.0f, 5, false},
                        {"T 0.8 p 0.9 peaked", 0.8f, -1, 0.9f, 0.0f, -1, true},
                        {"T 0.8 min_p 0.05 peaked", 0.8f, -1, 1.0f, 0.05f, -1, true}};
  {
    const std::vector<float> row = peaked_host(1, 900);
    std::printf("peaked logits (normal, sigma %.1f): a row's top-p 0.9 nucleus at T 0.8 is %lld tokens\n",
                static_cast<double>(kPeakedSigma), static_cast<long long>(nucleus_size(row, 0.8f, 0.9)));
  }
  for (int64_t R : {1, 8, 64}) {
    const int n = copies_for(R * kVocab * 4);
    std::vector<Tensor> ls, peaked;
    const std::vector<float> peaked_rows = peaked_host(R, 900);  // each copy the same rows
    for (int i = 0; i < n; ++i) {
      ls.push_back(random_tensor(DType::kF32, {R, kVocab}, 500 + i, 10.0f));
      peaked.push_back(device_rows(peaked_rows, R));
    }
    const Tensor argmax = cuda::empty(DType::kI32, {R}), tokens = cuda::empty(DType::kI32, {R});
    const Tensor scaled = cuda::empty(DType::kF32, {R, kVocab});
    const int64_t words = static_cast<int64_t>(sizeof(SampleRowParams) / 4);
    const int64_t lp_words = static_cast<int64_t>((sizeof(SampleRowLogprobs) + 3) / 4);
    const Tensor params = cuda::empty(DType::kI32, {R * words}),
                 lps = cuda::empty(DType::kI32, {R * lp_words});
    for (const Case& c : cases) {
      std::vector<SampleRowParams> host(static_cast<size_t>(R));
      for (int64_t r = 0; r < R; ++r) {
        SampleRowParams& p = host[static_cast<size_t>(r)];
        p.u = 0.37 + 0.5 * static_cast<double>(r) / static_cast<double>(R);
        p.temperature = c.temperature;
        p.top_k = c.top_k;
        p.top_p = c.top_p;
        p.min_p = c.min_p;
        p.num_logprobs = c.num_logprobs;
      }
      cuda::copy_bytes_to_device(params.data(), host.data(), R * words * 4);
      const auto* pd = params.data_as<const SampleRowParams>();
      auto* lp = c.num_logprobs >= 0 ? lps.data_as<SampleRowLogprobs>() : nullptr;
      const std::vector<Tensor>& rows = c.peaked ? peaked : ls;
      argmax_cuda(rows[0], argmax.data_as<int32_t>(), s);
      const double ms = time_graph(s, [&](int i) {
        sample_cuda(rows[i % n], scaled, pd, argmax.data_as<const int32_t>(), tokens.data_as<int32_t>(), lp, s);
      });
      report("sample", "R " + std::to_string(R) + " " + c.name, ms, static_cast<double>(R * kVocab * 4),
             ceiling);
    }
  }
}

void bench_elementwise(cudaStream_t s, double ceiling, const std::vector<int64_t>& ts) {
  std::printf("\n%-14s %-28s %12s %14s\n", "op", "shape", "time/call", "achieved");
  for (int64_t T : ts) {
    const std::string tshape = "T " + std::to_string(T);
    {  // embedding: bf16 rows in, f32 rows out
      const Tensor table = random_tensor(DType::kBF16, {kVocab, kDim}, 1);
      std::vector<int32_t> ids(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) ids[t] = static_cast<int32_t>((t * 7919) % kVocab);
      const Tensor tok = i32_tensor(ids);
      const int n = copies_for(T * kDim * 4);
      std::vector<Tensor> xs;
      for (int i = 0; i < n; ++i) xs.push_back(cuda::empty(DType::kF32, {T, kDim}));
      const double ms = time_graph(s, [&](int i) {
        embedding_cuda(table, tok.data_as<const int32_t>(), static_cast<int32_t>(T), xs[i % n], s);
      });
      report("embedding", tshape + " dim 4096", ms, static_cast<double>(T * kDim * 6), ceiling);
    }
    {  // rmsnorm and add_rmsnorm
      const int n = copies_for(T * kDim * 12);
      std::vector<Tensor> xs, ds, outs;
      for (int i = 0; i < n; ++i) {
        xs.push_back(random_tensor(DType::kF32, {T, kDim}, 10 + i));
        ds.push_back(random_tensor(DType::kBF16, {T, kDim}, 100 + i, 0.01f));
        outs.push_back(cuda::empty(DType::kBF16, {T, kDim}));
      }
      const Tensor w = random_tensor(DType::kF32, {kDim}, 2);
      double ms = time_graph(s, [&](int i) { rmsnorm_cuda(xs[i % n], w, 1e-5f, outs[i % n], s); });
      report("rmsnorm", tshape + " dim 4096", ms, static_cast<double>(T * kDim * 6), ceiling);
      ms = time_graph(s, [&](int i) { add_rmsnorm_cuda(xs[i % n], ds[i % n], w, 1e-5f, outs[i % n], s); });
      report("add_rmsnorm", tshape + " dim 4096", ms, static_cast<double>(T * kDim * 12), ceiling);
    }
    {  // rope + KV write
      const int64_t width = (kHeads + 2 * kKvHeads) * kHeadDim;
      const int n = copies_for(T * width * 4);
      std::vector<Tensor> qkvs, qs;
      for (int i = 0; i < n; ++i) {
        qkvs.push_back(random_tensor(DType::kBF16, {T, width}, 200 + i));
        qs.push_back(cuda::empty(DType::kBF16, {T, kHeads, kHeadDim}));
      }
      const int64_t block_size = 16, blocks = (T + block_size - 1) / block_size + 1;
      const Tensor kp = cuda::empty(DType::kBF16, {blocks, block_size, kKvHeads, kHeadDim});
      const Tensor vp = cuda::empty(DType::kBF16, {blocks, block_size, kKvHeads, kHeadDim});
      std::vector<int32_t> pos(static_cast<size_t>(T)), slot(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t)
        pos[t] = static_cast<int32_t>(4096 + t), slot[t] = static_cast<int32_t>(t);
      const Tensor pos_d = i32_tensor(pos), slot_d = i32_tensor(slot);
      const Tensor inv = random_tensor(DType::kF32, {kHeadDim / 2}, 3, 0.5f);
      const double ms = time_graph(s, [&](int i) {
        rope_kv_write_cuda(qkvs[i % n], pos_d.data_as<const int32_t>(), slot_d.data_as<const int32_t>(),
                           inv.data_as<const float>(), kHeadDim, kHeads, kKvHeads, qs[i % n], kp, vp, s);
      });
      report("rope_kv_write", tshape + " 32/8 heads of 128", ms, static_cast<double>(T * width * 4), ceiling);
    }
    {  // silu_mul
      const int n = copies_for(T * kFfn * 6);
      std::vector<Tensor> gus, outs;
      for (int i = 0; i < n; ++i) {
        gus.push_back(random_tensor(DType::kBF16, {T, 2 * kFfn}, 300 + i, 4.0f));
        outs.push_back(cuda::empty(DType::kBF16, {T, kFfn}));
      }
      const double ms = time_graph(s, [&](int i) { silu_mul_cuda(gus[i % n], outs[i % n], s); });
      report("silu_mul", tshape + " F 14336", ms, static_cast<double>(T * kFfn * 6), ceiling);
    }
  }
  for (int64_t R : {1, 8, 64}) {  // argmax over the vocabulary
    const int n = copies_for(R * kVocab * 4);
    std::vector<Tensor> ls;
    for (int i = 0; i < n; ++i) ls.push_back(random_tensor(DType::kF32, {R, kVocab}, 400 + i, 10.0f));
    const Tensor out = cuda::empty(DType::kI32, {R});
    const double ms = time_graph(s, [&](int i) { argmax_cuda(ls[i % n], out.data_as<int32_t>(), s); });
    report("argmax", "R " + std::to_string(R) + " V 128256", ms, static_cast<double>(R * kVocab * 4),
           ceiling);
  }
  bench_sample(s, ceiling);
}

// The linears of a Llama-3-8B layer, and its lm_head (f32 out: no FP8 rows).
struct Linear {
  const char* name;
  int64_t K, N;
  DType y;
};
constexpr Linear kLinears[] = {{"qkv", 4096, 6144, DType::kBF16},
                               {"o", 4096, 4096, DType::kBF16},
                               {"gate_up", 4096, 28672, DType::kBF16},
                               {"down", 14336, 4096, DType::kBF16},
                               {"lm_head", 4096, 128256, DType::kF32}};

// Each kernel linear_cuda can be forced to (LinearPath), by the name the tables print.
struct ForcedKernel {
  const char* name;
  LinearPath path;
};
constexpr ForcedKernel kForced[] = {
    {"stream", LinearPath::kStream},           {"128x64", LinearPath::kTile128x64},
    {"128x128", LinearPath::kTile128x128},     {"128x256", LinearPath::kTile128x256},
    {"256x128", LinearPath::kTile256x128},     {"128x128w", LinearPath::kTile128x128WholeK},
    {"128x64w", LinearPath::kTile128x64WholeK}, {"64w", LinearPath::kTile64WholeK},
    {"192x128w", LinearPath::kTile192x128WholeK}};
// Whether a forced kernel exists for the weights' format (the 128 x 256 and
// 256 x 128 tiles are bf16's, the 64-row and 192-row whole-K tiles FP8's;
// "stream" is FP8's decode tile).
bool has_kernel(LinearPath path, bool fp8) {
  if (path == LinearPath::kTile64WholeK || path == LinearPath::kTile192x128WholeK) return fp8;
  return !fp8 || (path != LinearPath::kTile256x128 && path != LinearPath::kTile128x256);
}

// Enough copies of a linear's random bf16 weights that they do not sit in L2,
// and with fp8, as many of the same weights in FP8 rows (--quantization fp8).
struct WeightCopies {
  std::vector<Tensor> bf16;
  std::vector<LinearWeight> fp8;
};
WeightCopies weight_copies(const Linear& l, bool fp8, cudaStream_t s) {
  WeightCopies w;
  const int64_t wbytes = l.N * l.K * 2;
  const int n = copies_for(wbytes);
  for (int i = 0; i < n; ++i) w.bf16.push_back(random_tensor(DType::kBF16, {l.N, l.K}, 500 + i, 0.05f));
  if (fp8) {
    const int n8 = copies_for(wbytes / 2);
    for (int i = 0; i < n8; ++i) w.fp8.push_back(quantize_fp8_rows_cuda(w.bf16[i % n], s));
    NS_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  return w;
}

// only_name empty: every linear at every M of m_list (empty: 1 .. 1,024), with
// the forced kernels from M = 16; else that linear at only_m, ours and cuBLASLt's.
void bench_gemms(cudaStream_t s, double ceiling, const std::string& only_name, int64_t only_m, bool fp8_only,
                 const std::vector<int64_t>& m_list) {
  std::printf("\n%-9s %-16s %4s %10s %9s %9s %9s  %s\n", "linear", "K -> N", "M", "kernel", "time", "TB/s",
              "TFLOP/s", "cuBLASLt choice (algo tile stages splitK reduction cluster)");
  GemmCuda per_shape(32 << 20, GemmPolicy::kPerShape);
  bool found = only_name.empty();
  for (const Linear& l : kLinears) {
    if (!only_name.empty() && only_name != l.name) continue;
    found = true;
    const int64_t wbytes = l.N * l.K * 2;
    const WeightCopies w = weight_copies(l, l.y == DType::kBF16 && (only_name.empty() || fp8_only), s);
    const std::vector<Tensor>& ws = w.bf16;
    const std::vector<LinearWeight>& w8 = w.fp8;
    const size_t n = ws.size();
    const std::vector<int64_t> ms = !only_name.empty() ? std::vector<int64_t>{only_m}
                                    : !m_list.empty()
                                        ? m_list
                                        : std::vector<int64_t>{1, 8, 16, 32, 64, 128, 256, 1024};
    for (int64_t M : ms) {
      const Tensor x = random_tensor(DType::kBF16, {M, l.K}, 600);
      const Tensor y = cuda::empty(l.y, {M, l.N});
      const Tensor scratch = cuda::empty(DType::kBF16, {M * l.K});
      // ours: linear_cuda's own choice; stream / RxT: one kernel (tile) forced (M >= 16);
      // per-shape: cuBLASLt's kernel for the shape.
      struct Kernel {
        const char* name;
        LinearPath path;
        GemmCuda* gemm;
        bool fp8 = false;  // over the FP8 rows w8
      };
      std::vector<Kernel> kernels;
      if (!fp8_only) kernels.push_back({"ours", LinearPath::kAuto, nullptr});
      if (!w8.empty()) kernels.push_back({"fp8", LinearPath::kAuto, nullptr, true});
      if (M >= 16 && only_name.empty()) {
        for (const ForcedKernel& f : kForced) {
          if (has_kernel(f.path, false)) kernels.push_back({f.name, f.path, nullptr});
        }
      }
      if (!fp8_only) kernels.push_back({"per-shape", LinearPath::kAuto, &per_shape});
      for (const Kernel& k : kernels) {
        GemmCuda* gemm = k.gemm;
        const char* kname = k.name;
        const bool fp8 = k.fp8;
        const double ms = time_graph(s, [&](int i) {
          if (fp8) {
            linear_cuda(x, w8[i % w8.size()], y, scratch, s, k.path);
          } else if (gemm == nullptr) {
            linear_cuda(x, ws[i % n], y, scratch, s, k.path);
          } else {
            gemm->matmul(x, ws[i % n], y, s);
          }
        });
        const double bytes = static_cast<double>((fp8 ? wbytes / 2 + l.N * 4 : wbytes) + M * l.K * 2 +
                                                 M * l.N * dtype_bytes(l.y, 1));
        const double tbs = bytes / (ms * 1e-3) / 1e12;
        const double tflops = 2.0 * static_cast<double>(M * l.N * l.K) / (ms * 1e-3) / 1e12;
        std::printf("%-9s %-16s %4lld %10s %7.1f us %9.2f %9.1f", l.name,
                    (std::to_string(l.K) + " -> " + std::to_string(l.N)).c_str(), static_cast<long long>(M),
                    kname, ms * 1e3, tbs, tflops);
        if (gemm != nullptr) {
          const GemmAlgoInfo a = gemm->algo_info(M, l.N, l.K, l.y);
          std::printf("  %d %u %u %d %u %u", a.algo_id, a.tile_id, a.stages_id, a.splitk, a.reduction_scheme,
                      static_cast<unsigned>(a.cluster_shape_id));
        }
        std::printf(" (%.0f%% of copy)\n", 100.0 * tbs / ceiling);
      }
    }
  }
  if (!found) std::printf("no linear named '%s' (qkv, o, gate_up, down, lm_head)\n", only_name.c_str());
}

// --sweep: every kernel forced, bf16 and FP8 rows, at the step sizes between
// the streaming kernel's and the prefill's, one line a linear and M (us, the
// median of three rounds in rotated order): what choose_tile's rule is read
// from.
void bench_sweep(cudaStream_t s) {
  std::printf("\nsweep, us: %-7s %5s %-5s %8s", "linear", "M", "dtype", "ours");
  for (const ForcedKernel& f : kForced) std::printf(" %8s", f.name);
  std::printf(" %8s\n", "cuBLASLt");
  GemmCuda per_shape(32 << 20, GemmPolicy::kPerShape);
  for (const Linear& l : kLinears) {
    if (l.y != DType::kBF16) continue;  // the lm_head: no FP8 rows
    const WeightCopies w = weight_copies(l, true, s);
    const std::vector<Tensor>& ws = w.bf16;
    const std::vector<LinearWeight>& w8 = w.fp8;
    const size_t n = ws.size();
    for (int64_t M : {16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024}) {
      const Tensor x = random_tensor(DType::kBF16, {M, l.K}, 600);
      const Tensor y = cuda::empty(DType::kBF16, {M, l.N});
      const Tensor scratch = cuda::empty(DType::kBF16, {M * l.K});
      for (const bool fp8 : {false, true}) {
        // kRounds rounds, each starting three kernels later, and each kernel's
        // median over them: a kernel's figure does not depend on what ran
        // before it (a first run after cuBLASLt's read slow by up to 30%).
        // Kernel 0 is ours (kAuto), 1 .. kForced the forced ones, the last cuBLASLt.
        constexpr int kRounds = 3, kKernels = std::size(kForced) + 2;
        std::vector<double> us[kKernels];
        for (int round = 0; round < kRounds; ++round) {
          for (int j = 0; j < kKernels; ++j) {
            const int k = (j + round * 3) % kKernels;
            if (k == kKernels - 1) {  // cuBLASLt, bf16 weights only
              if (!fp8)
                us[k].push_back(time_graph(s, [&](int i) { per_shape.matmul(x, ws[i % n], y, s); }) * 1e3);
              continue;
            }
            const LinearPath path = k == 0 ? LinearPath::kAuto : kForced[k - 1].path;
            if (!has_kernel(path, fp8)) continue;
            us[k].push_back(time_graph(s,
                                       [&](int i) {
                                         if (fp8) {
                                           linear_cuda(x, w8[i % w8.size()], y, scratch, s, path);
                                         } else {
                                           linear_cuda(x, ws[i % n], y, scratch, s, path);
                                         }
                                       }) *
                            1e3);
          }
        }
        std::printf("sweep, us: %-7s %5lld %-5s", l.name, static_cast<long long>(M), fp8 ? "fp8" : "bf16");
        for (std::vector<double>& v : us) {
          if (v.empty()) {
            std::printf(" %8s", "-");
            continue;
          }
          std::sort(v.begin(), v.end());
          std::printf(" %8.1f", v[v.size() / 2]);
        }
        std::printf("\n");
      }
    }
  }
}

}  // namespace
}  // namespace nanoserve

int main(int argc, char** argv) {
  using namespace nanoserve;
  bool quick = false, gemms_only = false, sample_only = false, fp8_only = false, sweep = false;
  std::string only_name;
  int64_t only_m = 0;
  std::vector<int64_t> m_list;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--sample") == 0) {
      sample_only = true;
    } else if (std::strcmp(argv[i], "--gemms") == 0) {
      gemms_only = true;
    } else if (std::strcmp(argv[i], "--sweep") == 0) {
      sweep = true;
    } else if (std::strcmp(argv[i], "--fp8") == 0) {
      fp8_only = true;
    } else if (std::strcmp(argv[i], "--ms") == 0 && i + 1 < argc) {
      const char* p = argv[++i];
      bool ok = *p != '\0';
      while (ok && *p != '\0') {
        char* end = nullptr;
        const long long m = std::strtoll(p, &end, 10);
        ok = end != p && m >= 1 && m <= 1024 && (*end == '\0' || (*end == ',' && end[1] != '\0'));
        m_list.push_back(m);
        p = *end == ',' ? end + 1 : end;
      }
      if (!ok) {
        std::fprintf(stderr, "--ms: expected M,M,.. with each M in 1..1024, got '%s'\n", argv[i]);
        return 2;
      }
      gemms_only = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      const std::string arg = argv[++i];
      const size_t colon = arg.find(':');
      char* end = nullptr;
      const long long m = colon == std::string::npos ? 0 : std::strtoll(arg.c_str() + colon + 1, &end, 10);
      if (m < 1 || m > 1024 || end == nullptr || *end != '\0') {
        std::fprintf(stderr, "--only: expected NAME:M with M in 1..1024, got '%s'\n", arg.c_str());
        return 2;
      }
      only_name = arg.substr(0, colon);
      only_m = m;
      gemms_only = true;
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--quick] [--gemms [--ms M,M,..]] [--sweep] [--only NAME:M [--fp8]] [--sample]\n",
          argv[0]);
      return 2;
    }
  }
  if (fp8_only && only_name.empty()) {
    std::fprintf(stderr, "--fp8 goes with --only NAME:M\n");
    return 2;
  }
  std::string why;
  if (cuda::device_count(&why) == 0) {
    std::printf("no CUDA device: %s\n", why.c_str());
    return 0;
  }
  if (quick) g_reps = 3;
  const cuda::DeviceInfo info = cuda::device_info();
  const double ceiling = copy_ceiling_tbs();
  std::printf("%s, %d SMs, L2 %lld MB; device-to-device copy %.2f TB/s (read + write)\n", info.name.c_str(),
              info.sm_count, static_cast<long long>(info.l2_bytes >> 20), ceiling);
  cudaStream_t s;
  NS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (sample_only || sweep) {
    if (sample_only) bench_sample(s, ceiling);
    if (sweep) bench_sweep(s);
    NS_CUDA_CHECK(cudaStreamDestroy(s));
    return 0;
  }
  if (!gemms_only) {
    bench_elementwise(s, ceiling, quick ? std::vector<int64_t>{1, 64} : std::vector<int64_t>{1, 64, 1024});
  }
  bench_gemms(s, ceiling, only_name, only_m, fp8_only, m_list);
  NS_CUDA_CHECK(cudaStreamDestroy(s));
  return 0;
}
