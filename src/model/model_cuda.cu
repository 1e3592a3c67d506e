#include "model/model_cuda.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/device_memory.cuh"
#include "core/half.h"
#include "core/logging.h"
#include "model/model_cpu.h"
#include "model/step_graphs.cuh"
#include "ops/argmax/argmax_cuda.cuh"
#include "ops/dequantize/dequantize.h"
#include "ops/embedding/embedding_cuda.cuh"
#include "ops/fill/fill_cuda.cuh"
#include "ops/gather/gather_cuda.cuh"
#include "ops/gelu_mul/gelu_mul_cuda.cuh"
#include "ops/matmul/linear_cuda.cuh"
#include "ops/matmul/matmul_cuda.cuh"
#include "ops/moe/moe_cuda.cuh"
#include "ops/paged_attention/paged_attention_cuda.cuh"
#include "ops/rmsnorm/rmsnorm_cuda.cuh"
#include "ops/rope/rope_cuda.cuh"
#include "ops/rope/rope_freqs.h"
#include "ops/sample/sample_cuda.cuh"
#include "ops/silu_mul/silu_mul_cuda.cuh"
#include "ops/softcap/softcap_cuda.cuh"

namespace nanoserve {

// ---- the step's device state -------------------------------------------------------

struct CudaModel::Step {
  CudaLimits limits;
  cudaStream_t stream = nullptr;
  std::unique_ptr<GemmCuda> gemm;
  std::unique_ptr<DeviceBatch> batch;
  std::unique_ptr<PagedAttentionWorkspaceCuda> attn_ws;
  Tensor x;        // [max_tokens, dim] f32 residual stream
  Tensor xn;       // [max_tokens, dim] bf16 normed input of a sublayer
  Tensor qkv;      // [max_tokens, (n_heads + 2 n_kv_heads) * head_dim] bf16
  Tensor q;        // [max_tokens, n_heads, head_dim] bf16, rotated
  Tensor attn;     // [max_tokens, n_heads, head_dim] bf16 attention output
  Tensor proj;     // [max_tokens, dim] bf16 o_proj / down output, added to x by the next norm
  Tensor gate_up;  // [max_tokens, 2 ffn_dim] bf16
  Tensor act;      // [max_tokens, ffn_dim] bf16 silu(gate) * up
  Tensor xperm;    // linear_scratch_elems bf16: linear_cuda's permuted copy of x, the SwiGLU
  Tensor last;     // [max_logits_rows, dim] bf16 normed rows that need logits
  Tensor logits;   // [max_logits_rows, vocab] f32
  Tensor scaled;   // [max_logits_rows, vocab] f32, the sampler's logits over the temperature
  Tensor argmax;   // [max_logits_rows] i32
  std::unique_ptr<MoeCudaWorkspace> moe;  // the experts' buffers (config.n_experts > 0)
  Tensor kv;       // one allocation: [n_layers][2][num_blocks, block_size, n_kv_heads, head_dim] bf16
  std::shared_ptr<void> logits_host;  // pinned [max_logits_rows, vocab] f32
  std::shared_ptr<void> argmax_host;  // pinned [max_logits_rows] i32

  // The device sampler's rows (ops/sample): params in, ids and logprobs out.
  Tensor sample_params;                        // [max_logits_rows] SampleRowParams, as i32 words
  Tensor sampled;                              // [max_logits_rows] i32
  Tensor sample_logprobs;                      // [max_logits_rows] SampleRowLogprobs, as i32 words
  std::shared_ptr<void> sample_params_host;    // pinned [max_logits_rows] SampleRowParams
  std::shared_ptr<void> sampled_host;          // pinned [max_logits_rows] i32
  std::shared_ptr<void> sample_logprobs_host;  // pinned [max_logits_rows] SampleRowLogprobs
  bool last_sampled = false;                   // the last forward had sample_rows

  int32_t last_rows = 0;
  StepGraphs graphs;

  // The host's time between steps, while the GPU waits: from one step's
  // synchronize to the next step's launch (the engine's commit, outputs and
  // scheduling, then this step's metadata). A gap over kIdleGap is time with
  // no work (a server between requests), not counted.
  static constexpr double kIdleGap = 0.02;
  std::chrono::steady_clock::time_point synced{};
  double host_gap_s = 0.0;
  int64_t host_gaps = 0;
  void note_launch() {
    if (synced == std::chrono::steady_clock::time_point{}) return;
    const double gap = std::chrono::duration<double>(std::chrono::steady_clock::now() - synced).count();
    if (gap > kIdleGap) return;
    host_gap_s += gap;
    ++host_gaps;
  }

  ~Step() {
    if (host_gaps > 0) {
      NS_LOG(INFO) << "host time between steps: " << host_gap_s / static_cast<double>(host_gaps) * 1e6
                   << " us a step, mean of " << host_gaps;
    }
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

CudaModel::CudaModel(ModelConfig config) : config_(std::move(config)) {}
CudaModel::~CudaModel() = default;

// ---- memory ------------------------------------------------------------------------

Status CudaModel::supports(const ModelConfig& c) {
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256) {
    return unimplemented("--device cuda: head_dim " + std::to_string(c.head_dim) +
                         " (the CUDA attention kernels take 64, 128 or 256)");
  }
  if (c.n_rep() > 8) {
    return unimplemented("--device cuda: " + std::to_string(c.n_rep()) +
                         " query heads per kv head (the CUDA attention takes at most 8)");
  }
  const ArchInfo* family = c.arch_info_or_null();
  if (family != nullptr && family->o_bias && c.n_experts == 0) {
    return unimplemented(
        "--device cuda: an o_proj bias without experts (the CUDA forward adds it in the "
        "experts' norm)");
  }
  if (c.n_experts > 0) {
    const std::string why = moe_cuda_unsupported(c.n_experts, c.n_experts_used, c.dim, c.expert_ffn_dim);
    if (!why.empty()) return unimplemented("--device cuda: " + c.arch + " with " + why);
  }
  if (c.rope_dim != c.head_dim) {
    return unimplemented("--device cuda: partial rotary dims (" + std::to_string(c.rope_dim) + " of " +
                         std::to_string(c.head_dim) + ")");
  }
  return Status::ok_status();
}

namespace {

// The model's attention arithmetic, for every step: the tile arithmetic
// where it serves the model's attention (paged_attention_tiles_support), else
// the split kernel. A per-model choice, so a row's bits never depend on the
// step it ran in.
PagedAttentionKernel attention_kernel(const ModelConfig& c, DType kv_dtype) {
  return paged_attention_tiles_support(static_cast<int>(c.head_dim), static_cast<int>(c.n_rep()),
                                       static_cast<int>(c.sliding_window), c.attn_softcap,
                                       c.arch_info().attn_sinks, kv_dtype)
             ? PagedAttentionKernel::kTiles
             : PagedAttentionKernel::kSplit;
}

}  // namespace

int64_t CudaModel::kv_bytes_per_block(const ModelConfig& c, int32_t block_size, DType kv_dtype) {
  return 2 * c.n_layers * dtype_bytes(kv_dtype, int64_t{block_size} * c.n_kv_heads * c.head_dim);
}

Status CudaModel::set_kv_scales(std::vector<KvScales> scales, std::vector<KvScales> read_scales) {
  if (read_scales.empty()) read_scales = scales;
  for (const auto* v : {&scales, &read_scales}) {
    if (static_cast<int64_t>(v->size()) != config_.n_layers) {
      return invalid_argument("KV scales: " + std::to_string(v->size()) + " for " +
                              std::to_string(config_.n_layers) + " layers");
    }
    for (size_t l = 0; l < v->size(); ++l) {
      if (!kv_scale_valid((*v)[l].k) || !kv_scale_valid((*v)[l].v)) {
        return invalid_argument("KV scales of layer " + std::to_string(l) + ": k " +
                                std::to_string((*v)[l].k) + ", v " + std::to_string((*v)[l].v) +
                                " (each must be finite and > 0)");
      }
    }
  }
  kv_scales_ = std::move(scales);
  kv_read_scales_ = std::move(read_scales);
  return Status::ok_status();
}

namespace {

// The linears' scratch (Step::xperm) for steps of up to T tokens, in bf16.
int64_t linear_scratch_elems(const ModelConfig& c, int64_t T) {
  const int64_t max_k = std::max({c.dim, c.ffn_dim, c.n_heads * c.head_dim});
  return std::max(
      {int64_t{1}, linear_cuda_scratch_elems(T, max_k), linear_swiglu_cuda_scratch_elems(T, c.ffn_dim)});
}

}  // namespace

int64_t CudaModel::workspace_bytes(const ModelConfig& c, const CudaLimits& lim) {
  const int64_t T = lim.max_tokens, R = lim.max_logits_rows;
  const int64_t q_dim = c.n_heads * c.head_dim, qkv_dim = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim;
  int64_t b = T * c.dim * 4 + T * c.dim * 2 + T * qkv_dim * 2 + 2 * T * q_dim * 2 + T * c.dim * 2 +
              T * 3 * c.ffn_dim * 2 + R * c.dim * 2 + 2 * R * c.vocab_size * 4 + R * 4 +
              R * static_cast<int64_t>(sizeof(SampleRowParams) + 4 + sizeof(SampleRowLogprobs));
  b += linear_scratch_elems(c, T) * 2;
  // Attention partials: [rows, n_heads, max splits, head_dim] f32 + lse + counters; the block list.
  b += T * c.n_heads * (PagedAttentionWorkspaceCuda::kMaxSplits * (c.head_dim + 1) + 1) * 4;
  b += T * PagedAttentionWorkspaceCuda::kMaxSplits * 4;
  if (c.n_experts > 0) b += moe_cuda_workspace_bytes(T, c.n_experts, c.n_experts_used, c.dim, c.expert_ffn_dim);
  return b + (int64_t{64} << 20);  // GEMM workspace and batch metadata
}

Status CudaModel::allocate(const CudaLimits& limits, int32_t num_blocks, int32_t block_size) {
  const ModelConfig& c = config_;
  if (step_) return failed_precondition("CudaModel::allocate called twice");
  if (limits.max_tokens < 1 || limits.max_seqs < 1 || limits.max_logits_rows < 1 ||
      limits.max_blocks_per_seq < 1) {
    return invalid_argument("CUDA workspace limits must all be >= 1");
  }
  if (num_blocks < 1) return invalid_argument("num_blocks must be >= 1");
  if (block_size < 8 || (block_size & (block_size - 1)) != 0) {
    return invalid_argument("--block-size " + std::to_string(block_size) +
                            ": the CUDA attention needs a power of two >= 8");
  }
  NS_RETURN_IF_ERROR(supports(c));
  if (limits.kv_dtype != DType::kBF16 && limits.kv_dtype != DType::kF8E4M3) {
    return invalid_argument(std::string("CUDA KV pools of ") + dtype_name(limits.kv_dtype) +
                            " (bf16 or f8e4m3)");
  }
  if (kv_scales_.empty()) {
    kv_scales_.assign(static_cast<size_t>(c.n_layers), KvScales{});
    kv_read_scales_ = kv_scales_;
  }
  auto s = std::make_unique<Step>();
  s->limits = limits;
  NS_CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  const int64_t T = limits.max_tokens, R = limits.max_logits_rows;
  const int64_t qkv_dim = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim;
  // cuBLASLt serves the shapes linear_cuda does not (and, opted in, large
  // steps); without the opt-in it keeps one kernel per shape for every M.
  s->gemm = std::make_unique<GemmCuda>(
      32 << 20, limits.cublas_prefill ? GemmPolicy::kPerShape : GemmPolicy::kBatchInvariant);
  s->batch = std::make_unique<DeviceBatch>(limits.max_tokens, limits.max_seqs, limits.max_blocks_per_seq);
  s->attn_ws = std::make_unique<PagedAttentionWorkspaceCuda>(
      limits.max_tokens, static_cast<int32_t>(c.n_heads), static_cast<int32_t>(c.head_dim));
  s->x = cuda::empty(DType::kF32, {T, c.dim});
  s->xn = cuda::empty(DType::kBF16, {T, c.dim});
  s->qkv = cuda::empty(DType::kBF16, {T, qkv_dim});
  s->q = cuda::empty(DType::kBF16, {T, c.n_heads, c.head_dim});
  s->attn = cuda::empty(DType::kBF16, {T, c.n_heads, c.head_dim});
  s->proj = cuda::empty(DType::kBF16, {T, c.dim});
  s->gate_up = cuda::empty(DType::kBF16, {T, 2 * c.ffn_dim});
  s->act = cuda::empty(DType::kBF16, {T, c.ffn_dim});
  s->xperm = cuda::empty(DType::kBF16, {linear_scratch_elems(c, T)});
  if (c.n_experts > 0) {
    s->moe = std::make_unique<MoeCudaWorkspace>(
        make_moe_cuda_workspace(T, c.n_experts, c.n_experts_used, c.dim, c.expert_ffn_dim));
  }
  s->last = cuda::empty(DType::kBF16, {R, c.dim});
  s->logits = cuda::empty(DType::kF32, {R, c.vocab_size});
  s->scaled = cuda::empty(DType::kF32, {R, c.vocab_size});
  s->argmax = cuda::empty(DType::kI32, {R});
  s->logits_host = cuda::pinned_host(R * c.vocab_size * 4);
  s->argmax_host = cuda::pinned_host(R * 4);
  static_assert(sizeof(SampleRowParams) % 4 == 0 && sizeof(SampleRowLogprobs) % 4 == 0);
  s->sample_params = cuda::empty(DType::kI32, {R * static_cast<int64_t>(sizeof(SampleRowParams) / 4)});
  s->sampled = cuda::empty(DType::kI32, {R});
  s->sample_logprobs = cuda::empty(DType::kI32, {R * static_cast<int64_t>(sizeof(SampleRowLogprobs) / 4)});
  s->sample_params_host = cuda::pinned_host(R * static_cast<int64_t>(sizeof(SampleRowParams)));
  s->sampled_host = cuda::pinned_host(R * 4);
  s->sample_logprobs_host = cuda::pinned_host(R * static_cast<int64_t>(sizeof(SampleRowLogprobs)));
  // The pools: one allocation, a K and a V view per layer.
  const DType kv_dt = limits.kv_dtype;
  const int64_t pool_elems = int64_t{num_blocks} * block_size * c.n_kv_heads * c.head_dim;
  const int64_t pool_bytes = dtype_bytes(kv_dt, pool_elems);
  s->kv = cuda::empty(kv_dt, {c.n_layers, 2, pool_elems});
  k_pools_.clear();
  v_pools_.clear();
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto* base = s->kv.data_as<uint8_t>() + l * 2 * pool_bytes;
    const std::vector<int64_t> shape = {num_blocks, block_size, c.n_kv_heads, c.head_dim};
    k_pools_.push_back(Tensor::view(base, kv_dt, shape, s->kv.owner(), Device::kCUDA));
    v_pools_.push_back(Tensor::view(base + pool_bytes, kv_dt, shape, s->kv.owner(), Device::kCUDA));
  }
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  step_ = std::move(s);
  return Status::ok_status();
}

const Tensor& CudaModel::k_pool(int layer) const {
  return k_pools_.at(static_cast<size_t>(layer));
}
const Tensor& CudaModel::v_pool(int layer) const {
  return v_pools_.at(static_cast<size_t>(layer));
}

void* CudaModel::step_stream() const {
  return step_ ? step_->stream : nullptr;
}

int64_t CudaModel::graph_captures() const {
  return step_ ? step_->graphs.captures() : 0;
}

std::vector<int32_t> CudaModel::last_expert_ids() const {
  if (!step_ || !step_->moe) return {};
  const MoeCudaWorkspace& ws = *step_->moe;
  NS_CUDA_CHECK(cudaStreamSynchronize(step_->stream));
  const Tensor host = cuda::to_host(ws.ids.slice_rows(0, ws.n_tokens * ws.top_k));
  return {host.data_as<const int32_t>(), host.data_as<const int32_t>() + host.numel()};
}

Status CudaModel::set_forced_routing(const std::vector<std::vector<int32_t>>& ids,
                                     const std::vector<std::vector<float>>& weights) {
  if (!step_ || !step_->moe) return failed_precondition("set_forced_routing: no experts, or before allocate()");
  if (ids.empty() && weights.empty()) {
    forced_ids_ = Tensor();
    forced_weights_ = Tensor();
    return Status::ok_status();
  }
  const MoeCudaWorkspace& ws = *step_->moe;
  const int64_t stride = ws.max_tokens * ws.top_k;
  if (static_cast<int64_t>(ids.size()) != config_.n_layers || weights.size() != ids.size()) {
    return invalid_argument("set_forced_routing: " + std::to_string(ids.size()) + " and " +
                            std::to_string(weights.size()) + " layers of " + std::to_string(config_.n_layers));
  }
  Tensor host_ids = Tensor::empty(DType::kI32, {config_.n_layers, stride});
  Tensor host_w = Tensor::empty(DType::kF32, {config_.n_layers, stride});
  std::fill_n(host_ids.data_as<int32_t>(), host_ids.numel(), 0);
  std::fill_n(host_w.data_as<float>(), host_w.numel(), 0.0f);
  for (size_t l = 0; l < ids.size(); ++l) {
    const int64_t n = static_cast<int64_t>(ids[l].size());
    if (n > stride || n % ws.top_k != 0 || weights[l].size() != ids[l].size()) {
      return invalid_argument("set_forced_routing: layer " + std::to_string(l) + " has " + std::to_string(n) +
                              " slots and " + std::to_string(weights[l].size()) +
                              " weights (whole tokens of top_k, at most " + std::to_string(stride) + ")");
    }
    for (int64_t i = 0; i < n; ++i) {  // each id in range, a token's ids distinct
      const int32_t e = ids[l][static_cast<size_t>(i)];
      bool repeated = false;
      for (int64_t j = i - i % ws.top_k; j < i; ++j) repeated |= ids[l][static_cast<size_t>(j)] == e;
      if (e < 0 || e >= ws.n_experts || repeated) {
        return invalid_argument("set_forced_routing: expert " + std::to_string(e) + " at slot " +
                                std::to_string(i) + " of layer " + std::to_string(l) +
                                " (each < the experts, a token's distinct)");
      }
    }
    std::copy(ids[l].begin(), ids[l].end(), host_ids.data_as<int32_t>() + static_cast<int64_t>(l) * stride);
    std::copy(weights[l].begin(), weights[l].end(), host_w.data_as<float>() + static_cast<int64_t>(l) * stride);
  }
  forced_ids_ = cuda::to_device(host_ids);
  forced_weights_ = cuda::to_device(host_w);
  return Status::ok_status();
}

std::span<const int32_t> CudaModel::argmax() const {
  if (!step_) return {};
  return {static_cast<const int32_t*>(step_->argmax_host.get()), static_cast<size_t>(step_->last_rows)};
}

std::span<const int32_t> CudaModel::sampled() const {
  if (!step_ || !step_->last_sampled) return {};
  return {static_cast<const int32_t*>(step_->sampled_host.get()), static_cast<size_t>(step_->last_rows)};
}

std::span<const SampleRowLogprobs> CudaModel::sampled_logprobs() const {
  if (!step_ || !step_->last_sampled) return {};
  return {static_cast<const SampleRowLogprobs*>(step_->sample_logprobs_host.get()),
          static_cast<size_t>(step_->last_rows)};
}

std::span<const float> CudaModel::logits_row(int32_t row) {
  NS_CHECK(step_ && row >= 0 && row < step_->last_rows) << "logits_row " << row;
  Step& s = *step_;
  const int64_t V = config_.vocab_size;
  float* dst = static_cast<float*>(s.logits_host.get()) + row * V;
  NS_CUDA_CHECK(cudaMemcpyAsync(dst, s.logits.data_as<const float>() + row * V, static_cast<size_t>(V) * 4,
                                cudaMemcpyDeviceToHost, s.stream));
  NS_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  return {dst, static_cast<size_t>(V)};
}

// ---- the step ----------------------------------------------------------------------

StepLimits CudaModel::step_limits() const {
  NS_CHECK(step_) << "step_limits before allocate";
  const CudaLimits& lim = step_->limits;
  StepLimits s;
  s.vocab_size = config_.vocab_size;
  s.max_tokens = lim.max_tokens;
  s.max_seqs = lim.max_seqs;
  s.max_logits_rows = lim.max_logits_rows;
  s.num_blocks = num_blocks_;
  s.block_size = block_size_;
  s.max_blocks_per_seq = lim.max_blocks_per_seq;
  const int64_t table = int64_t{lim.max_blocks_per_seq} * block_size_;
  s.max_context = lim.max_context > 0 ? std::min(lim.max_context, table) : table;
  s.max_sample_vocab = kSampleMaxVocab;
  return s;
}

// The step's kernels and copies, all on the step's stream, reading the batch
// from the device buffers (db) only: nothing here depends on the host batch
// beyond T, R, the output kind and the attention launch plan, so a captured
// graph of it replays for any batch that agrees on those (the sampler's
// per-row params are in a device buffer, uploaded before the launch).
void CudaModel::enqueue_step(int64_t T, int64_t R, StepOutput output) {
  const ModelConfig& c = config_;
  Step& s = *step_;
  cudaStream_t st = s.stream;
  const float eps = c.norm_eps, scale = c.attention_scale();
  const ArchInfo& family = c.arch_info();
  const bool gelu = std::string_view(family.hidden_act) != "silu";
  const int n_rep = static_cast<int>(c.n_rep());
  const DeviceBatch& db = *s.batch;
  MoeParams moe_params{static_cast<int32_t>(c.n_experts_used), c.expert_weights_norm};
  if (family.oss_experts) {  // gpt-oss: as the CPU forward's
    moe_params.gating = MoeGating::kTopKThenSoftmax;
    moe_params.activation = MoeActivation::kClampedSwiglu;
    moe_params.swiglu_alpha = c.swiglu_alpha;
    moe_params.swiglu_limit = c.swiglu_limit;
  }
  // YaRN's attention factor times the rotated q and k (1: none), as the CPU forward.
  const float rotated_scale = rope_attention_factor(c.rope_scaling);

  Tensor x = s.x.slice_rows(0, T), xn = s.xn.slice_rows(0, T), qkv = s.qkv.slice_rows(0, T);
  Tensor q = s.q.slice_rows(0, T), attn = s.attn.slice_rows(0, T), proj = s.proj.slice_rows(0, T);
  Tensor gate_up = s.gate_up.slice_rows(0, T), act = s.act.slice_rows(0, T);
  Tensor attn2 = attn.reshape({T, c.n_heads * c.head_dim});
  const bool small_step = T <= 64 || !s.limits.cublas_prefill;
  // FP8 weights run only on linear_cuda (make_cuda_runner refuses them with
  // --cublas-prefill); the cuBLASLt fallback takes bf16 weights.
  auto linear = [&](const Tensor& in, const LinearWeight& w, const Tensor& out) {
    if (small_step && linear_cuda_supports(in, w, out)) {
      linear_cuda(in, w, out, s.xperm, st);
    } else {
      NS_CHECK(!w.fp8()) << "FP8 weights of " << w.w.shape_string() << " outside linear_cuda";
      s.gemm->matmul(in, w.w, out, st);
    }
  };

  const PagedAttentionKernel attention = attention_kernel(c, s.limits.kv_dtype);
  // A norm that feeds a linear_cuda writes what the linear reads, and the
  // linear skips its own pass over x (bitwise the same product): for FP8
  // weights their E4M3 tokens (into the linears' scratch), and past the
  // streaming kernel's tokens, x in the tiled kernel's k order.
  auto norm_order = [&](const LinearWeight& w, const Tensor& out) {
    if (!small_step || !linear_cuda_supports(xn, w, out)) return RmsNormOut::kNatural;
    if (w.fp8()) return RmsNormOut::kFp8Tokens;
    return linear_cuda_tiled(T, w) ? RmsNormOut::kLinearTiled : RmsNormOut::kNatural;
  };
  auto norm_out = [&](RmsNormOut order) { return order == RmsNormOut::kFp8Tokens ? s.xperm : xn; };
  auto linear_from_norm = [&](RmsNormOut order, const LinearWeight& w, const Tensor& out) {
    if (order == RmsNormOut::kFp8Tokens) {
      linear_cuda_fp8_tokens(s.xperm, w, out, st);
    } else if (order == RmsNormOut::kLinearTiled) {
      linear_cuda_permuted(xn, w, out, st);
    } else {
      linear(xn, w, out);
    }
  };
  // proj (the sublayer's output) joins x, through its own norm first where
  // the family has sandwich norms (post: that norm's weight), then x is normed.
  auto join_norm = [&](const Tensor& post, const Tensor& w, RmsNormOut out_order) {
    if (post.defined()) {
      post_norm_add_rmsnorm_cuda(x, proj, post, w, eps, norm_out(out_order), st, out_order);
    } else {
      add_rmsnorm_cuda(x, proj, w, eps, norm_out(out_order), st, out_order);
    }
  };
  const float embed_scale = !family.scaled_embedding ? 1.0f
                            : c.embed_scale > 0.0f   ? c.embed_scale
                                                     : std::sqrt(static_cast<float>(c.dim));
  embedding_cuda(weights_.tok_embd, db.tokens(), static_cast<int32_t>(T), x, st, embed_scale);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const CudaLayer& L = weights_.layers[static_cast<size_t>(l)];
    // The previous layer's down output joins the residual inside the norm.
    const RmsNormOut qkv_in = norm_order(L.wqkv, qkv);
    if (l == 0) {
      rmsnorm_cuda(x, L.attn_norm, eps, norm_out(qkv_in), st, qkv_in);
    } else {
      join_norm(weights_.layers[static_cast<size_t>(l - 1)].post_ffn_norm, L.attn_norm, qkv_in);
    }
    linear_from_norm(qkv_in, L.wqkv, qkv);
    RopeKvExtras extras;  // the family's bias and q/k norm, fused into the rotation
    if (L.qkv_bias.defined()) extras.qkv_bias = L.qkv_bias.data_as<const float>();
    if (L.q_norm.defined()) {
      extras.q_norm = L.q_norm.data_as<const float>();
      extras.k_norm = L.k_norm.data_as<const float>();
      extras.norm_eps = eps;
    }
    extras.rotated_scale = rotated_scale;
    const Tensor& inv_freq = c.layer_local_rope(l) ? weights_.inv_freq_local : weights_.inv_freq;
    rope_kv_write_cuda(qkv, db.positions(), db.slot_mapping(), inv_freq.data_as<const float>(),
                       static_cast<int32_t>(c.rope_dim), static_cast<int32_t>(c.n_heads),
                       static_cast<int32_t>(c.n_kv_heads), q, k_pools_[static_cast<size_t>(l)],
                       v_pools_[static_cast<size_t>(l)], st, extras, kv_scales_[static_cast<size_t>(l)]);
    paged_attention_cuda(q, k_pools_[static_cast<size_t>(l)], v_pools_[static_cast<size_t>(l)], db, n_rep,
                         scale, *s.attn_ws, attn, st, attention, static_cast<int>(c.layer_window(l)),
                         c.attn_softcap, L.sinks.defined() ? L.sinks.data_as<const float>() : nullptr,
                         kv_read_scales_[static_cast<size_t>(l)]);
    linear(attn2, L.wo, proj);
    if (L.router.defined()) {  // experts: routed on the device, then the grouped expert GEMM
      add_rmsnorm_cuda(x, proj, L.ffn_norm, eps, xn, st, RmsNormOut::kNatural,
                       L.o_bias.defined() ? &L.o_bias : nullptr);
      MoeCudaBiases biases;
      if (L.router_bias.defined()) {
        biases.router = L.router_bias.data_as<const float>();
        biases.gate_up = L.exp_gate_up_bias.data_as<const float>();
        biases.down = L.exp_down_bias.data_as<const float>();
      }
      MoeForcedRouting forced;
      if (forced_ids_.defined()) {
        forced.ids = forced_ids_.data_as<const int32_t>() + l * forced_ids_.dim(1);
        forced.weights = forced_weights_.data_as<const float>() + l * forced_weights_.dim(1);
      }
      moe_ffn_cuda(xn, L.router, L.exp_gate_up, L.exp_down, moe_params, *s.moe, proj, st, biases, forced);
      continue;
    }
    NS_CHECK(!L.o_bias.defined()) << "an o_proj bias outside a layer with experts";
    const RmsNormOut gate_up_in = norm_order(L.w_gate_up, gate_up);
    join_norm(L.post_attn_norm, L.ffn_norm, gate_up_in);
    linear_from_norm(gate_up_in, L.w_gate_up, gate_up);
    if (gelu) {  // GeGLU (gemma): its own pass, then the linear
      gelu_tanh_mul_cuda(gate_up, act, st);
      linear(act, L.w_down, proj);
    } else if (small_step && linear_swiglu_cuda_supports(gate_up, L.w_down, proj)) {
      linear_swiglu_cuda(gate_up, L.w_down, proj, s.xperm, st);  // the SwiGLU in the tiled kernel's permute
    } else {
      silu_mul_cuda(gate_up, act, st);
      linear(act, L.w_down, proj);
    }
  }
  join_norm(weights_.layers.back().post_ffn_norm, weights_.output_norm, RmsNormOut::kNatural);
  if (R > 0) {
    Tensor last = s.last.slice_rows(0, R), logits = s.logits.slice_rows(0, R);
    gather_rows_cuda(xn, db.logits_rows(), static_cast<int32_t>(R), last, st);
    linear(last, weights_.lm_head, logits);
    if (c.final_softcap > 0.0f) softcap_cuda(logits, c.final_softcap, st);  // before argmax and sampling
    argmax_cuda(logits, s.argmax.data_as<int32_t>(), st);
    NS_CUDA_CHECK(cudaMemcpyAsync(s.argmax_host.get(), s.argmax.data(), static_cast<size_t>(R) * 4,
                                  cudaMemcpyDeviceToHost, st));
    if (output == StepOutput::kLogits) {
      NS_CUDA_CHECK(cudaMemcpyAsync(s.logits_host.get(), logits.data(),
                                    static_cast<size_t>(R * c.vocab_size) * 4, cudaMemcpyDeviceToHost, st));
    }
    if (output == StepOutput::kSampled || output == StepOutput::kSampledLogprobs) {
      const bool lp = output == StepOutput::kSampledLogprobs;
      auto* lp_dev = lp ? s.sample_logprobs.data_as<SampleRowLogprobs>() : nullptr;
      sample_cuda(logits, s.scaled, s.sample_params.data_as<const SampleRowParams>(),
                  s.argmax.data_as<const int32_t>(), s.sampled.data_as<int32_t>(), lp_dev, st);
      NS_CUDA_CHECK(cudaMemcpyAsync(s.sampled_host.get(), s.sampled.data(), static_cast<size_t>(R) * 4,
                                    cudaMemcpyDeviceToHost, st));
      if (lp) {
        NS_CUDA_CHECK(cudaMemcpyAsync(s.sample_logprobs_host.get(), lp_dev,
                                      static_cast<size_t>(R) * sizeof(SampleRowLogprobs),
                                      cudaMemcpyDeviceToHost, st));
      }
    }
  }
}

StatusOr<Tensor> CudaModel::forward(const ForwardBatch& batch, bool want_logits) {
  NS_RETURN_IF_ERROR(launch(batch, want_logits));
  return wait();
}

Status CudaModel::launch(const ForwardBatch& batch, bool want_logits) {
  const ModelConfig& c = config_;
  Step& s = *step_;
  cudaStream_t st = s.stream;
  const int64_t T = batch.num_tokens(), R = static_cast<int64_t>(batch.logits_rows.size());
  s.batch->upload(batch, st);
  StepOutput output = want_logits ? StepOutput::kLogits : StepOutput::kArgmax;
  const bool sample = !batch.sample_rows.empty() && R > 0;
  if (sample) {
    // One copy of the rows' params into the buffer the (captured) sampler reads.
    bool any_logprobs = false;
    for (const SampleRowParams& p : batch.sample_rows) any_logprobs |= p.num_logprobs >= 0;
    output = any_logprobs ? StepOutput::kSampledLogprobs : StepOutput::kSampled;
    const size_t bytes = static_cast<size_t>(R) * sizeof(SampleRowParams);
    std::memcpy(s.sample_params_host.get(), batch.sample_rows.data(), bytes);
    NS_CUDA_CHECK(cudaMemcpyAsync(s.sample_params.data(), s.sample_params_host.get(), bytes,
                                  cudaMemcpyHostToDevice, st));
  }
  s.note_launch();
  if (s.limits.cuda_graphs && T <= CudaLimits::kGraphMaxTokens && !forced_ids_.defined()) {
    // The attention's launches are baked into the graph: those of the window,
    // and where some layers have none (Gemma's global layers), theirs too.
    auto attn_key = [&](int64_t window) {
      return paged_attention_cuda_launch_key(*s.batch, k_pools_[0], static_cast<int>(c.n_rep()), *s.attn_ws,
                                             attention_kernel(c, s.limits.kv_dtype),
                                             static_cast<int>(window));
    };
    bool global_layers = false;
    for (int64_t l = 0; l < c.n_layers; ++l) global_layers |= c.sliding_window > 0 && c.layer_window(l) == 0;
    const GraphKey key{static_cast<int32_t>(T),    static_cast<int32_t>(R),
                       batch.max_blocks_per_seq,   static_cast<uint8_t>(output),
                       attn_key(c.sliding_window), global_layers ? attn_key(0) : 0};
    s.graphs.launch(key, st, [&] { enqueue_step(T, R, output); });
  } else {
    enqueue_step(T, R, output);
  }
  s.last_rows = static_cast<int32_t>(R);
  s.last_sampled = sample;
  return Status();
}

StatusOr<Tensor> CudaModel::wait() {
  Step& s = *step_;
  NS_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  s.synced = std::chrono::steady_clock::now();
  return Tensor::view(s.logits_host.get(), DType::kF32, {s.last_rows, config_.vocab_size}, s.logits_host);
}

}  // namespace nanoserve
