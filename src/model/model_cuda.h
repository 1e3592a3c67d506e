#pragma once
// The forward pass on a CUDA device, for every family of model/arch.h
// (docs/model_cuda.md).
//
//   x = embed(tokens) (x sqrt(dim): gemma)                      [T, dim] f32 residual stream
// (every linear y = x w^T through linear_cuda, batch-invariant at any T; see CudaLimits)
//   per layer: xn = rmsnorm(x)                                  bf16 (the add of the previous
//                                                               sublayer's output fused in)
//              qkv = xn wqkv^T; rope(q, k) + KV write            one GEMM, one fused kernel
//              (+ qkv bias: qwen2, gpt-oss; per-head q/k RMSNorm: qwen3, gemma3, fused into
//              the rope kernel; gemma3's local layers rotate with their own table;
//              gpt-oss's YaRN attention factor times the rotated q and k)
//              x += o_proj(paged_attention(q))                  in the layer's window, scores
//                                                               soft-capped (gemma2), a sink
//                                                               logit a head (gpt-oss);
//                                                               + o bias (gpt-oss), in the norm
//              x += down(act(gate) * up), gate_up = xn wgu^T    one GEMM for gate and up;
//                                                               act: silu, or tanh GELU (gemma)
//                or the routed experts' (ops/moe/moe_cuda.cuh; gpt-oss: their biases, top-k
//                then softmax, the clamped SwiGLU)
//              (gemma: each sublayer's output normed before it joins x, fused into the next norm)
//   logits = lm_head(rmsnorm(x)[logits_rows])                   [R, vocab] f32, soft-capped
//                                                               (gemma2), greedy argmax too
//
// Weights live on the device in bf16 (norms in f32), uploaded once: F32, F16
// and BF16 tensors are converted, GGUF block formats dequantized; with
// quantize_fp8() the four linears of each layer become FP8 E4M3 rows with a
// scale each (weight-only: activations stay bf16). An FP8 checkpoint's
// per-channel and per-tensor linears upload as such rows directly. q/k/v are
// one matrix, gate/up one matrix. The KV pools are bf16, or FP8 E4M3 with a
// K and a V scale per layer (CudaLimits::kv_dtype, core/kv_quant.h), one pair
// per layer, [num_blocks, block_size, n_kv_heads, head_dim]. Every buffer of the step is
// allocated before the first step; a step allocates nothing.
//
// Plain C++ (no CUDA header): the engine's .cc code built with NANOSERVE_CUDA
// includes it; the definitions live in model_cuda.cu.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/kv_quant.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/model_runner.h"
#include "ops/matmul/linear_weight.h"
#include "step/forward_batch.h"

namespace nanoserve {

struct ModelWeights;

// The linears (LinearWeight) are bf16, or FP8 E4M3 with a scale per row.
struct CudaLayer {
  Tensor attn_norm;    // [dim] f32
  LinearWeight wqkv;   // [(n_heads + 2 n_kv_heads) * head_dim, dim]: q rows, then k, then v
  Tensor qkv_bias;   // [(n_heads + 2 n_kv_heads) * head_dim] f32, families with ArchInfo::qkv_bias
  Tensor q_norm;     // [head_dim] f32, families with ArchInfo::qk_norm
  Tensor k_norm;     // [head_dim] f32, families with ArchInfo::qk_norm
  LinearWeight wo;         // [dim, n_heads * head_dim]
  Tensor o_bias;           // [dim] f32, families with ArchInfo::o_bias (gpt-oss)
  Tensor sinks;            // [n_heads] f32 sink logits, families with ArchInfo::attn_sinks (gpt-oss)
  Tensor ffn_norm;         // [dim] f32
  LinearWeight w_gate_up;  // [2 ffn_dim, dim]: gate rows, then up
  LinearWeight w_down;     // [dim, ffn_dim]
  Tensor post_attn_norm;   // [dim] f32, families with ArchInfo::sandwich_norms (gemma)
  Tensor post_ffn_norm;    // [dim] f32, the same
  // A mixture of experts instead of w_gate_up, w_down (config.n_experts > 0;
  // ops/moe/moe_cuda.cuh), F = expert_ffn_dim:
  Tensor router;        // [n_experts, dim] f32
  Tensor exp_gate_up;   // [n_experts, 2 F, dim] bf16: expert e's gate rows, then its up rows
  Tensor exp_down;      // [n_experts, dim, F] bf16
  // gpt-oss's expert biases (ArchInfo::oss_experts), f32:
  Tensor router_bias;       // [n_experts]
  Tensor exp_gate_up_bias;  // [n_experts, 2 F]: expert e's gate bias, then its up bias
  Tensor exp_down_bias;     // [n_experts, dim]
};

struct CudaWeights {
  Tensor tok_embd;  // [vocab, dim] bf16
  std::vector<CudaLayer> layers;
  Tensor output_norm;  // [dim] f32
  Tensor lm_head;      // [vocab, dim] bf16; tok_embd itself when the embeddings are tied
  Tensor inv_freq;     // [rope_dim / 2] f32, the scaled rotary frequencies
  // [rope_dim / 2] f32, the local layers' (ModelConfig::rope_local_theta,
  // unscaled: gemma3); undefined when every layer rotates with inv_freq.
  Tensor inv_freq_local;
};

// Sizes the step buffers are allocated for.
struct CudaLimits {
  int32_t max_tokens = 512;        // tokens in one step
  int32_t max_seqs = 64;           // sequences in one step
  int32_t max_logits_rows = 64;    // rows that need logits
  int32_t max_blocks_per_seq = 0;  // block-table row stride capacity
  int64_t max_context = 0;         // longest context (0: what the block tables hold)
  // Steps of more than 64 tokens through cuBLASLt's per-shape choice:
  // faster prefill, but a row's bits then depend on the step it ran in.
  // Off: every linear whose shape linear_cuda runs goes through it, at any
  // step size. (Attention is batch-invariant either way.)
  bool cublas_prefill = false;
  // Steps of at most kGraphMaxTokens tokens replay a CUDA graph of the whole
  // forward, captured the second time a (tokens, logits rows, attention plan)
  // combination is seen; off (--enforce-eager) every step is launched.
  bool cuda_graphs = true;
  static constexpr int32_t kGraphMaxTokens = 64;
  // The pools' element: kBF16, or kF8E4M3 (--kv-cache-dtype fp8: twice the
  // tokens in the same bytes; each layer's KvScales, kv_scales()).
  DType kv_dtype = DType::kBF16;
};

class CudaModel {
 public:
  // Uploads the host model's weights (views into a GGUF mapping or host
  // tensors, any stored dtype) to the current device in bf16; a linear the
  // host holds as FP8 E4M3 rows with row scales (LayerWeights::scale: an FP8
  // checkpoint read through TensorSource::with_fp8_rows()) goes up as FP8
  // rows as it is, q/k/v and gate/up concatenating their parts' rows and
  // scales (bf16 where linear_cuda cannot take its shape).
  static StatusOr<std::unique_ptr<CudaModel>> upload(const ModelConfig& config, const ModelWeights& host,
                                                          std::span<const float> inv_freq);
  // Random weights of the config's shape (uniform, fixed seed), made on the device.
  static StatusOr<std::unique_ptr<CudaModel>> dummy(const ModelConfig& config,
                                                         std::span<const float> inv_freq, uint64_t seed);
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  const ModelConfig& config() const { return config_; }
  const CudaWeights& weights() const { return weights_; }
  int64_t weight_bytes() const { return weight_bytes_; }

  // The four linears of every layer to FP8 E4M3 rows, one scale per output
  // channel (quantize_fp8_rows_cuda), each bf16 copy freed as its FP8 one is
  // made; the embeddings and lm_head stay bf16. Linears that came FP8 from an
  // FP8 checkpoint stay as they came. Before allocate().
  // FAILED_PRECONDITION when the step buffers exist or every linear already is FP8.
  Status quantize_fp8();
  // Every linear of every layer is FP8 E4M3 rows (quantize_fp8, or an FP8 checkpoint).
  bool fp8() const {
    return fp8_linears() == 4 * static_cast<int64_t>(weights_.layers.size()) && fp8_linears() > 0;
  }
  // How many of the layers' linears (4 a layer) are FP8.
  int64_t fp8_linears() const;

  // UNIMPLEMENTED naming what the CUDA forward lacks for this model's shape
  // (head_dim other than 64, 128 or 256, more than 8 query heads per kv
  // head, partial rotary dims, experts outside moe_cuda_unsupported's); OK otherwise.
  static Status supports(const ModelConfig& config);
  // K+V bytes of one block over all layers, in the pools' dtype (bf16 or f8e4m3).
  static int64_t kv_bytes_per_block(const ModelConfig& config, int32_t block_size,
                                    DType kv_dtype = DType::kBF16);
  // Device bytes the step buffers of `limits` take (for memory planning before allocate()).
  static int64_t workspace_bytes(const ModelConfig& config, const CudaLimits& limits);

  // Allocates the step buffers and the KV pools. Once, before the first forward.
  Status allocate(const CudaLimits& limits, int32_t num_blocks, int32_t block_size);
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }

  // One step. Writes the batch's K/V into the pools, and returns the logits of
  // batch.logits_rows, in order: [R, vocab] f32 in pinned host memory, valid
  // until the next call. With want_logits false only the device argmax is
  // copied back (greedy rows); argmax() is valid after either. With
  // batch.sample_rows set ([R]) the device samples every row (ops/sample) and
  // only the ids, and the logprobs of rows that ask, come back: sampled() and
  // sampled_logprobs(); the returned logits are then unwritten.
  // PRECOND: batch.validate(step_limits()) passed (the engine validates each
  // step once; nothing here checks it again).
  StatusOr<Tensor> forward(const ForwardBatch& batch, bool want_logits = true);
  // forward() in two halves: launch() uploads the batch and queues the step on
  // the stream, and returns; wait() synchronizes and returns the logits. The
  // batch's host copy is taken by launch(), so the caller may rebuild it; one
  // wait() follows each launch() before anything else is queued.
  Status launch(const ForwardBatch& batch, bool want_logits);
  StatusOr<Tensor> wait();
  // What one step may hold: the limits and the pools of allocate(). After allocate().
  StepLimits step_limits() const;
  // [R] greedy token of each logits row (ties to the lowest id), from the last forward.
  std::span<const int32_t> argmax() const;
  // [R] the device's token of each row of the last forward that had
  // sample_rows (kSampleOnHost: draw it on the host); empty otherwise.
  std::span<const int32_t> sampled() const;
  // [R] logprobs of those rows, meaningful where the row asked and was drawn.
  std::span<const SampleRowLogprobs> sampled_logprobs() const;
  // Row `row` of the last forward's logits, copied to the host now (for a row
  // the device handed back); valid until the next forward.
  std::span<const float> logits_row(int32_t row);

  // The KV pools of a layer (for tests): [num_blocks, block_size, n_kv_heads, head_dim] bf16 or f8e4m3.
  const Tensor& k_pool(int layer) const;
  const Tensor& v_pool(int layer) const;
  // Each layer's K and V scales of an fp8 pool: 1.0 (vLLM's default) unless
  // set. set_kv_scales: one per layer, finite and > 0; before the first
  // forward. read_scales: what the attention dequantizes with, where a test
  // plants a mismatch; empty, the same as `scales`.
  const std::vector<KvScales>& kv_scales() const { return kv_scales_; }
  Status set_kv_scales(std::vector<KvScales> scales, std::vector<KvScales> read_scales = {});
  // Graphs captured so far (for tests and reports).
  int64_t graph_captures() const;
  // The last layer's routing in the last forward: the expert of slot
  // t * top_k + r (for tests; empty without experts).
  std::vector<int32_t> last_expert_ids() const;
  // Teacher-forced routing (tests): per layer, the experts of slot
  // t * top_k + r (highest rank first) and their weights, which the next
  // forwards take in place of their own routing (moe_route_cuda's
  // MoeForcedRouting); a forward of T tokens reads each layer's first
  // T * top_k. Forwards run without CUDA graphs while it is set; empty:
  // cleared. After allocate().
  Status set_forced_routing(const std::vector<std::vector<int32_t>>& ids,
                            const std::vector<std::vector<float>>& weights);

  // The swap area (docs/kvcache.md, "Swapping"; model_cuda_swap.cu): pinned
  // host memory in the pools' layout, [n_layers][2][num_slots, block_size,
  // n_kv_heads, head_dim] bf16. After allocate(), once.
  Status allocate_swap(int32_t num_slots);
  int32_t num_swap_slots() const { return num_swap_slots_; }
  // [n_layers][2][num_slots, ...] the swap area's bytes (for tests; read after a synchronize).
  const void* swap_host() const { return swap_host_.get(); }
  // Queues the copy of each block's K and V, every layer, to its slot (out)
  // or from its slot into the block, on the step's stream: ordered before the
  // next forward. One cudaMemcpy2DAsync per run of consecutive (block, slot)
  // pairs and per K or V, covering every layer.
  Status swap_blocks(std::span<const BlockCopy> copies, bool out);

 private:
  struct Step;  // device workspace, stream, GEMM handle, batch buffers
  explicit CudaModel(ModelConfig config);
  // What a step copies back: the argmax only, the logits, or the device sampler's ids (+ logprobs).
  enum class StepOutput : uint8_t { kArgmax, kLogits, kSampled, kSampledLogprobs };
  void enqueue_step(int64_t T, int64_t R, StepOutput output);

  ModelConfig config_;
  CudaWeights weights_;
  int64_t weight_bytes_ = 0;
  int32_t num_blocks_ = 0, block_size_ = 0;
  std::vector<Tensor> k_pools_, v_pools_;  // [n_layers] views into one allocation each
  Tensor forced_ids_;      // [n_layers, max_tokens * top_k] i32, defined while set_forced_routing holds
  Tensor forced_weights_;  // [n_layers, max_tokens * top_k] f32, with forced_ids_
  std::vector<KvScales> kv_scales_, kv_read_scales_;  // [n_layers]: the KV write's, the attention's
  std::unique_ptr<Step> step_;
  void* step_stream() const;         // the step's cudaStream_t (model_cuda.cu), for the swap copies
  std::shared_ptr<void> swap_host_;  // pinned, layout above
  int32_t num_swap_slots_ = 0;
};

}  // namespace nanoserve
