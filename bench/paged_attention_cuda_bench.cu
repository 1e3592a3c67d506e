// Paged decode attention on the GPU: time per call and achieved bandwidth
// (K+V bytes read, plus q and out) against the device-to-device copy ceiling
// measured in the same run. Each timed unit is a CUDA graph of kCallsPerGraph
// calls (launch gaps as the engine's captured decode step sees them), cycling
// over enough copies of the pools that they do not stay in L2. Inputs are
// random (never zeros). Block tables are shuffled over the pool.
//
//   paged_attention_cuda_bench [--csv FILE] [--dump DIR] [--quick] [--shape I]... [--custom B:L]...
//                              [--extend B:L]... [--fp8]
//
// --csv writes one line per measurement for bench/paged_attention_torch.py,
// which times torch SDPA over contiguous KV on the same shapes and prints the
// combined table. --dump writes a small mixed batch (inputs and our output) for
// that script to check against SDPA. --shape I runs only shape I of the list
// (repeatable; for a profiler). --custom B:L replaces the list with decode
// batches of B sequences of L tokens (same heads; repeatable); --extend B:L
// adds (or, alone, replaces the list with) B whole prefills of L tokens each:
// L query rows a sequence, each causal over the sequence (its bytes count the
// K/V once). --fp8 runs every shape over fp8 (E4M3) pools instead of bf16
// (their bytes count one an element).

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/device_memory.cuh"
#include "ops/paged_attention/paged_attention_cuda.cuh"
#include "ops/paged_attention/paged_attention_tuning.cuh"

using namespace nanoserve;

namespace {

constexpr int kCallsPerGraph = 20;
constexpr int kReplays = 25;
constexpr double kCopyCeilingTBs = 4.24;  // docs/benchmarks.md, H200
const KvScales kScales{0.05f, 0.011f};    // an fp8 pool's (any: the bytes are random)

// A hash of an element's index and a seed.
__device__ __forceinline__ uint32_t index_hash(int64_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed ^ static_cast<uint32_t>(i >> 32) * 0x85EBCA77u;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  h *= 0x297A2D39u;
  h ^= h >> 15;
  return h;
}

// Fills bf16 values in [-1, 1) from the hash.
__global__ void fill_random_bf16(uint16_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = static_cast<float>(static_cast<int32_t>(index_hash(i, seed))) * (1.0f / 2147483648.0f);
    uint32_t bits;
    memcpy(&bits, &x, 4);
    p[i] = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
  }
}

// Fills E4M3 bytes of magnitude below 2 (the exponent's top bit clear: never
// NaN) from the hash.
__global__ void fill_random_f8(uint8_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = static_cast<uint8_t>(index_hash(i, seed) & 0xBFu);
  }
}

void fill_random(const Tensor& t, uint32_t seed) {
  if (t.dtype() == DType::kF8E4M3) {
    fill_random_f8<<<1024, 256>>>(t.data_as<uint8_t>(), t.numel(), seed);
  } else {
    fill_random_bf16<<<1024, 256>>>(t.data_as<uint16_t>(), t.numel(), seed);
  }
  NS_CUDA_CHECK_LAUNCH();
}

struct Shape {
  int batch, ctx, n_heads, n_kv, head_dim, block_size;
  bool in_order = false;    // block tables in pool order (a diagnostic: the cost of scattered blocks)
  int rows = 1;             // query rows a sequence: the last `rows` positions (ctx of them: a whole prefill)
  DType kv = DType::kBF16;  // the pools' element (bf16 or fp8)
};

struct Result {
  std::string shape, variant;
  double us, tbs;
  int copies, splits;
};

// A decode batch: every sequence has ctx tokens of history and one query (or,
// with rows > 1, the queries of its last `rows` positions: an extend chunk).
struct Setup {
  Shape s;
  int num_blocks = 0, max_blocks = 0;
  ForwardBatch fb;
  std::vector<Tensor> k_pools, v_pools;  // copies, to cycle over
  Tensor q, out;

  Setup(const Shape& shape, int64_t min_bytes_cycled, uint32_t seed) : s(shape) {
    max_blocks = (s.ctx + s.block_size - 1) / s.block_size;
    num_blocks = s.batch * max_blocks;
    std::mt19937 rng(seed);
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    if (!s.in_order) std::shuffle(perm.begin(), perm.end(), rng);
    fb.max_blocks_per_seq = max_blocks;
    fb.block_tables = perm;
    for (int b = 0; b < s.batch; ++b) {
      fb.seq_ids.push_back(b);
      fb.seq_starts.push_back(b * s.rows);
      fb.context_lens.push_back(s.ctx);
      for (int pos = s.ctx - s.rows; pos < s.ctx; ++pos) {
        fb.tokens.push_back(0);
        fb.positions.push_back(pos);
        fb.slot_mapping.push_back(perm[b * max_blocks + pos / s.block_size] * s.block_size +
                                  pos % s.block_size);
      }
    }
    fb.seq_starts.push_back(s.batch * s.rows);
    const int64_t pool_bytes = int64_t{num_blocks} * s.block_size * s.n_kv * dtype_bytes(s.kv, s.head_dim);
    const int copies =
        static_cast<int>(std::max<int64_t>(1, (min_bytes_cycled + 2 * pool_bytes - 1) / (2 * pool_bytes)));
    for (int c = 0; c < copies; ++c) {
      k_pools.push_back(cuda::empty(s.kv, {num_blocks, s.block_size, s.n_kv, s.head_dim}));
      v_pools.push_back(cuda::empty(s.kv, {num_blocks, s.block_size, s.n_kv, s.head_dim}));
      fill_random(k_pools.back(), seed + 2 * c);
      fill_random(v_pools.back(), seed + 2 * c + 1);
    }
    q = cuda::empty(DType::kBF16, {int64_t{s.batch} * s.rows, s.n_heads, s.head_dim});
    out = cuda::empty(DType::kBF16, {int64_t{s.batch} * s.rows, s.n_heads, s.head_dim});
    fill_random(q, seed + 1000);
  }

  double bytes() const {
    const double kv = 2.0 * s.batch * static_cast<double>(s.ctx) * s.n_kv * dtype_bytes(s.kv, s.head_dim);
    return kv + 2.0 * s.batch * s.rows * s.n_heads * s.head_dim * 2;
  }
};

std::string shape_name(const Shape& s) {
  return "B=" + std::to_string(s.batch) + " L=" + std::to_string(s.ctx) +
         (s.rows > 1 ? " rows=" + std::to_string(s.rows) : "") + (s.kv == DType::kBF16 ? "" : " fp8");
}

// What every call of a shape shares: the step's metadata on the device, the
// workspace, the scale and the GQA ratio.
struct CallState {
  DeviceBatch batch;
  PagedAttentionWorkspaceCuda ws;
  float scale;
  int n_rep;
  explicit CallState(const Setup& su)
      : batch(su.s.batch * su.s.rows, su.s.batch, su.max_blocks),
        ws(su.s.batch * su.s.rows, su.s.n_heads, su.s.head_dim),
        scale(1.0f / std::sqrt(static_cast<float>(su.s.head_dim))),
        n_rep(su.s.n_heads / su.s.n_kv) {
    batch.upload(su.fb);
  }
};

// Median time per call of paged_attention_cuda, from graph replays.
double time_attention(Setup& su, const PagedAttentionTuning& opt) {
  CallState cs(su);
  auto& [batch, ws, scale, n_rep] = cs;
  cudaStream_t stream;
  NS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::vector<Tensor>& k_pools = su.k_pools;
  const std::vector<Tensor>& v_pools = su.v_pools;
  // Warm up outside the graph (module load, first-touch).
  for (size_t c = 0; c < k_pools.size(); ++c) {
    paged_attention_cuda(su.q, k_pools[c], v_pools[c], batch, n_rep, scale, ws, su.out, stream, opt, 0, 0.0f,
                         nullptr, kScales);
  }
  NS_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  NS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kCallsPerGraph; ++i) {
    const size_t c = i % k_pools.size();
    paged_attention_cuda(su.q, k_pools[c], v_pools[c], batch, n_rep, scale, ws, su.out, stream, opt, 0, 0.0f,
                         nullptr, kScales);
  }
  NS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  NS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  NS_CUDA_CHECK(cudaEventCreate(&start));
  NS_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) NS_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  std::vector<float> ms;
  for (int r = 0; r < kReplays; ++r) {
    NS_CUDA_CHECK(cudaEventRecord(start, stream));
    NS_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    NS_CUDA_CHECK(cudaEventRecord(stop, stream));
    NS_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    NS_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  NS_CUDA_CHECK(cudaEventDestroy(start));
  NS_CUDA_CHECK(cudaEventDestroy(stop));
  NS_CUDA_CHECK(cudaGraphExecDestroy(exec));
  NS_CUDA_CHECK(cudaGraphDestroy(graph));
  NS_CUDA_CHECK(cudaStreamDestroy(stream));
  return 1000.0 * ms[ms.size() / 2] / kCallsPerGraph;
}

__global__ void empty_kernel(int* p) {
  if (p != nullptr && threadIdx.x == 1024) *p = 0;  // never true: keeps the kernel from being trivial
}

// Per-launch floor in a graph of kCallsPerGraph empty kernels (132 x 128
// threads), with and without programmatic dependent launch.
double launch_floor_us(bool pdl) {
  cudaStream_t stream;
  NS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(132);
  cfg.blockDim = dim3(128);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  cudaGraph_t graph;
  NS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kCallsPerGraph; ++i) NS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, empty_kernel, nullptr));
  NS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  NS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  NS_CUDA_CHECK(cudaEventCreate(&start));
  NS_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int r = 0; r < kReplays + 3; ++r) {
    NS_CUDA_CHECK(cudaEventRecord(start, stream));
    NS_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    NS_CUDA_CHECK(cudaEventRecord(stop, stream));
    NS_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    NS_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    if (r >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  NS_CUDA_CHECK(cudaEventDestroy(start));
  NS_CUDA_CHECK(cudaEventDestroy(stop));
  NS_CUDA_CHECK(cudaGraphExecDestroy(exec));
  NS_CUDA_CHECK(cudaGraphDestroy(graph));
  NS_CUDA_CHECK(cudaStreamDestroy(stream));
  return 1000.0 * ms[ms.size() / 2] / kCallsPerGraph;
}

// Device-to-device copy of 1 GiB: bytes read + written over time.
double copy_ceiling_tbs() {
  const int64_t n = int64_t{1} << 30;
  Tensor a = cuda::empty(DType::kBF16, {n / 2}), b = cuda::empty(DType::kBF16, {n / 2});
  fill_random(a, 7);
  cudaEvent_t start, stop;
  NS_CUDA_CHECK(cudaEventCreate(&start));
  NS_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int r = 0; r < 12; ++r) {
    NS_CUDA_CHECK(cudaEventRecord(start));
    NS_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), n, cudaMemcpyDeviceToDevice));
    NS_CUDA_CHECK(cudaEventRecord(stop));
    NS_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    NS_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    if (r >= 2) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  NS_CUDA_CHECK(cudaEventDestroy(start));
  NS_CUDA_CHECK(cudaEventDestroy(stop));
  return 2.0 * n / (ms[ms.size() / 2] * 1e-3) / 1e12;
}

// A mixed batch (decodes and an extend chunk, uneven contexts), its inputs and
// our output, for the torch SDPA check. Raw little-endian arrays plus meta.txt.
void dump_problem(const std::string& dir) {
  const int n_heads = 32, n_kv = 8, hd = 128, bs = 16;
  const std::vector<std::pair<int, int>> seqs{{1, 1}, {97, 1}, {2048, 1}, {4000, 1}, {300, 64}, {16384, 1}};
  ForwardBatch fb;
  int max_blocks = 0, total_blocks = 0;
  for (auto [ctx, n] : seqs) {
    max_blocks = std::max(max_blocks, (ctx + bs - 1) / bs);
    total_blocks += (ctx + bs - 1) / bs;
  }
  std::mt19937 rng(1234);
  std::vector<int32_t> perm(total_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  fb.max_blocks_per_seq = max_blocks;
  fb.block_tables.assign(seqs.size() * max_blocks, 0);
  fb.seq_starts.push_back(0);
  int next = 0;
  for (size_t b = 0; b < seqs.size(); ++b) {
    const auto [ctx, n] = seqs[b];
    for (int i = 0; i < (ctx + bs - 1) / bs; ++i) fb.block_tables[b * max_blocks + i] = perm[next++];
    fb.seq_ids.push_back(static_cast<int32_t>(b));
    fb.context_lens.push_back(ctx);
    for (int i = 0; i < n; ++i) {
      const int pos = ctx - n + i;
      fb.tokens.push_back(0);
      fb.positions.push_back(pos);
      fb.slot_mapping.push_back(fb.block_tables[b * max_blocks + pos / bs] * bs + pos % bs);
    }
    fb.seq_starts.push_back(static_cast<int32_t>(fb.tokens.size()));
  }
  const int t = static_cast<int>(fb.tokens.size());
  Tensor k_pool = cuda::empty(DType::kBF16, {total_blocks, bs, n_kv, hd});
  Tensor v_pool = cuda::empty(DType::kBF16, {total_blocks, bs, n_kv, hd});
  Tensor q = cuda::empty(DType::kBF16, {t, n_heads, hd});
  Tensor out = cuda::empty(DType::kBF16, {t, n_heads, hd});
  fill_random(k_pool, 11);
  fill_random(v_pool, 12);
  fill_random(q, 13);
  cuda::fill_bytes(out, 0xFF);
  DeviceBatch batch(t, static_cast<int32_t>(seqs.size()), max_blocks);
  batch.upload(fb);
  PagedAttentionWorkspaceCuda ws(t, n_heads, hd);
  paged_attention_cuda(q, k_pool, v_pool, batch, n_heads / n_kv, 1.0f / std::sqrt(static_cast<float>(hd)), ws,
                       out);
  cuda::synchronize();
  auto write = [&](const std::string& name, const void* p, size_t bytes) {
    std::ofstream f(dir + "/" + name, std::ios::binary);
    f.write(static_cast<const char*>(p), static_cast<std::streamsize>(bytes));
    NS_CHECK(f.good()) << "writing " << dir << "/" << name;
  };
  auto write_dev = [&](const std::string& name, const Tensor& d) {
    const Tensor h = cuda::to_host(d);
    write(name, h.data(), static_cast<size_t>(h.nbytes()));
  };
  write_dev("k_pool.bin", k_pool);
  write_dev("v_pool.bin", v_pool);
  write_dev("q.bin", q);
  write_dev("out.bin", out);
  write("block_tables.bin", fb.block_tables.data(), 4 * fb.block_tables.size());
  write("seq_starts.bin", fb.seq_starts.data(), 4 * fb.seq_starts.size());
  write("positions.bin", fb.positions.data(), 4 * fb.positions.size());
  std::ofstream meta(dir + "/meta.txt");
  meta << "num_seqs " << seqs.size() << "\nnum_tokens " << t << "\nnum_blocks " << total_blocks
       << "\nblock_size " << bs << "\nn_heads " << n_heads << "\nn_kv_heads " << n_kv << "\nhead_dim " << hd
       << "\nmax_blocks_per_seq " << max_blocks << "\n";
  std::printf("dumped a batch of %zu sequences (%d query tokens) to %s\n", seqs.size(), t, dir.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string csv_path, dump_dir;
  bool quick = false;
  std::vector<int> only;
  std::vector<std::pair<int, int>> custom;  // --custom B:L
  std::vector<std::pair<int, int>> extend;  // --extend B:L
  DType kv = DType::kBF16;                  // --fp8: kF8E4M3
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--csv" && i + 1 < argc) {
      csv_path = argv[++i];
    } else if (a == "--dump" && i + 1 < argc) {
      dump_dir = argv[++i];
    } else if (a == "--fp8") {
      kv = DType::kF8E4M3;
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--shape" && i + 1 < argc) {
      only.push_back(std::atoi(argv[++i]));
    } else if (a == "--extend" && i + 1 < argc) {
      int b = 0, l = 0;
      if (std::sscanf(argv[++i], "%d:%d", &b, &l) != 2 || b < 1 || b > 64 || l < 1 || l > 16384) {
        std::fprintf(stderr, "--extend wants B:L (1 <= B <= 64, 1 <= L <= 16384), got %s\n", argv[i]);
        return 2;
      }
      extend.emplace_back(b, l);
    } else if (a == "--custom" && i + 1 < argc) {
      int b = 0, l = 0;
      if (std::sscanf(argv[++i], "%d:%d", &b, &l) != 2 || b < 1 || b > 4096 || l < 1 || l > 131072) {
        std::fprintf(stderr, "--custom wants B:L (1 <= B <= 4096, 1 <= L <= 131072), got %s\n", argv[i]);
        return 2;
      }
      custom.emplace_back(b, l);
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--csv FILE] [--dump DIR] [--quick] [--shape I]... [--custom B:L]... [--extend B:L]... "
          "[--fp8]\n",
          argv[0]);
      return 2;
    }
  }
  std::string why;
  if (cuda::device_count(&why) == 0) {
    std::fprintf(stderr, "no CUDA device: %s\n", why.c_str());
    return 1;
  }
  const cuda::DeviceInfo dev = cuda::device_info();
  std::printf("device: %s, %d SMs, L2 %.0f MB, cc %d.%d\n", dev.name.c_str(), dev.sm_count,
              dev.l2_bytes / 1e6, dev.cc_major, dev.cc_minor);
  if (!dump_dir.empty()) dump_problem(dump_dir);

  const double copy_tbs = copy_ceiling_tbs();
  std::printf("device-to-device copy: %.2f TB/s (read + write), reference ceiling %.2f TB/s\n", copy_tbs,
              kCopyCeilingTBs);
  std::printf("empty kernel in a graph: %.2f us a launch, %.2f us with programmatic dependent launch\n",
              launch_floor_us(false), launch_floor_us(true));

  // Llama-3-8B attention: GQA 32/8, head_dim 128, bf16, block 16.
  std::vector<Shape> shapes{{1, 4096, 32, 8, 128, 16},  {64, 4096, 32, 8, 128, 16},
                            {8, 4096, 32, 8, 128, 16},  {256, 1024, 32, 8, 128, 16},
                            {1, 16384, 32, 8, 128, 16}, {1, 1024, 32, 8, 128, 16},
                            {64, 4096, 32, 8, 128, 32}, {64, 4096, 32, 8, 128, 16, true}};
  if (quick) shapes.resize(2);
  if (!custom.empty()) {
    shapes.clear();
    for (auto [b, l] : custom) shapes.push_back({b, l, 32, 8, 128, 16});
  }
  if (!extend.empty()) {
    if (custom.empty()) shapes.clear();
    for (auto [b, l] : extend) shapes.push_back({b, l, 32, 8, 128, 16, false, l});
  }
  for (Shape& s : shapes) s.kv = kv;
  struct Variant {
    std::string name;
    PagedAttentionTuning opt;
    bool targets_only;
  };
  std::vector<Variant> variants;
  // The default (every shape), then other options one at a time (the target
  // shapes only): set(o) changes the default options o.
  auto add = [&](std::string name, bool targets_only, auto set) {
    PagedAttentionTuning o;
    set(o);
    variants.push_back({std::move(name), o, targets_only});
  };
  add("default", false, [](PagedAttentionTuning&) {});
  add("tiles", false, [](PagedAttentionTuning& o) { o.tiles = true; });
  for (int stages : {2, 3}) {
    add("tiles " + std::to_string(stages) + " stages", true, [=](PagedAttentionTuning& o) {
      o.tiles = true;
      o.stages = stages;
    });
  }
  for (int group : {1, 2, 4}) {
    add("tiles group " + std::to_string(group), true, [=](PagedAttentionTuning& o) {
      o.tiles = true;
      o.split_group = group;
    });
  }
  add("no early K/V", true, [](PagedAttentionTuning& o) { o.early_kv = false; });
  for (int stages : {2, 3, 4}) {
    add(std::to_string(stages) + " stages", true, [=](PagedAttentionTuning& o) { o.stages = stages; });
  }
  for (int tiles : {2, 3}) {
    add("split>=" + std::to_string(tiles) + " tiles", true,
        [=](PagedAttentionTuning& o) { o.min_split_tiles = tiles; });
  }
  add("no held tile", true, [](PagedAttentionTuning& o) { o.hold_first_tile = false; });
  add("held after wait", true, [](PagedAttentionTuning& o) { o.hold_before_wait = false; });
  add("split>=8 tiles", true, [](PagedAttentionTuning& o) { o.min_split_tiles = 8; });
  add("single rows", true, [](PagedAttentionTuning& o) { o.pair_rows = false; });

  std::vector<Result> results;
  const int64_t min_cycled = 4 * dev.l2_bytes;
  auto skipped = [&](size_t i) {
    return !only.empty() && std::find(only.begin(), only.end(), static_cast<int>(i)) == only.end();
  };
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (skipped(i)) continue;
    const Shape& s = shapes[i];
    Setup su(s, min_cycled, 100 + static_cast<uint32_t>(i));
    for (const Variant& v : variants) {
      if (v.targets_only && i >= 2) continue;
      const double us = time_attention(su, v.opt);
      const double tbs = su.bytes() / (us * 1e-6) / 1e12;
      std::string name = shape_name(s);
      if (s.block_size != 16) name += " bs=" + std::to_string(s.block_size);
      if (s.in_order) name += " seq";
      results.push_back({name, v.name, us, tbs, static_cast<int>(su.k_pools.size()),
                         paged_attention_cuda_num_splits(s.ctx, s.head_dim, v.opt)});
      std::printf("%-18s %-15s %9.2f us %6.2f TB/s %5.1f%% of %.2f  (splits %d, %d pool copies)\n",
                  name.c_str(), v.name.c_str(), us, tbs, 100.0 * tbs / kCopyCeilingTBs, kCopyCeilingTBs,
                  results.back().splits, results.back().copies);
      std::fflush(stdout);
    }
  }
  if (!csv_path.empty()) {
    std::ofstream f(csv_path);
    f << "shape,variant,batch,ctx,n_heads,n_kv,head_dim,block_size,us,tbs,copy_tbs\n";
    size_t k = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (skipped(i)) continue;
      for (const Variant& v : variants) {
        if (v.targets_only && i >= 2) continue;
        const Shape& s = shapes[i];
        const Result& r = results[k++];
        f << r.shape << "," << v.name << "," << s.batch << "," << s.ctx << "," << s.n_heads << "," << s.n_kv
          << "," << s.head_dim << "," << s.block_size << "," << r.us << "," << r.tbs << "," << copy_tbs
          << "\n";
      }
    }
  }
  return 0;
}
