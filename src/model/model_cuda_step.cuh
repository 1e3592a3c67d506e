#pragma once
// The CUDA model's step state (CudaModel::Step) and the per-model attention
// choice, shared by model_cuda.cu (memory, launch, wait) and
// model_cuda_forward.cu (the layer stack). Included from those .cu files only.

#include <chrono>
#include <memory>

#include "core/cuda/device_memory.cuh"
#include "core/logging.h"
#include "model/model_cuda.h"
#include "model/step_graphs.cuh"
#include "ops/matmul/matmul_cuda.cuh"
#include "ops/moe/moe_cuda.cuh"
#include "ops/paged_attention/paged_attention_cuda.cuh"

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

// The model's attention arithmetic, for every step: the tile arithmetic
// where it serves the model's attention (paged_attention_tiles_support), else
// the split kernel. A per-model choice, so a row's bits never depend on the
// step it ran in.
PagedAttentionKernel attention_kernel(const ModelConfig& c, DType kv_dtype);

}  // namespace nanoserve
