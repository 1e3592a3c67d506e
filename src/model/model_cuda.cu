#include "model/model_cuda.h"

#include <algorithm>
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
#include "model/model_cuda_step.cuh"
#include "model/step_graphs.cuh"
#include "ops/dequantize/dequantize.h"
#include "ops/fill/fill_cuda.cuh"
#include "ops/matmul/linear_cuda.cuh"
#include "ops/matmul/matmul_cuda.cuh"
#include "ops/moe/moe_cuda.cuh"
#include "ops/paged_attention/paged_attention_cuda.cuh"
#include "ops/sample/sample_cuda.cuh"

namespace nanoserve {

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

PagedAttentionKernel attention_kernel(const ModelConfig& c, DType kv_dtype) {
  return paged_attention_tiles_support(static_cast<int>(c.head_dim), static_cast<int>(c.n_rep()),
                                       static_cast<int>(c.sliding_window), c.attn_softcap,
                                       c.arch_info().attn_sinks, kv_dtype)
             ? PagedAttentionKernel::kTiles
             : PagedAttentionKernel::kSplit;
}

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
