#pragma once
// CUDA RoPE fused with the KV write: the fused QKV GEMM's output goes straight
// to q (rotated) and to the paged K/V pools (k rotated, v as is). Plain C++
// declarations (no CUDA header); the kernel is in rope_cuda.cu. rope_ref (CPU)
// is the truth it is tested against, and its pairing is the one used here:
// ADJACENT pairs (2i, 2i + 1) of each head, rotated by positions[t] * inv_freq[i]
// (the GGUF llama layout; see rope.h).

#include <cstdint>

#include "core/cuda/device_memory.cuh"
#include "core/kv_quant.h"
#include "core/tensor.h"

namespace nanoserve {

// What some families add to the projection before the rotation, all f32
// device pointers or null (model/arch.h):
//   qkv_bias  [(n_heads + 2 n_kv_heads) * head_dim]  added to every row of qkv (qwen2)
//   q_norm, k_norm  [head_dim]  an RMSNorm of each q and k head, over head_dim,
//                   after the bias and before the rotation (qwen3); both or neither
//   rotated_scale   what the rotated q and k heads (every element) are multiplied
//                   by after the rotation, in f32 before the bf16 rounding: YaRN's
//                   attention factor (gpt-oss; rope_attention_factor), 1 otherwise
//                   (the same bits as without it)
struct RopeKvExtras {
  const float* qkv_bias = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float norm_eps = 0.0f;
  float rotated_scale = 1.0f;
};

// For every token t of the step:
//   q_out[t, h]              = rope(q head h of qkv[t])
//   k_pool[slot_mapping[t], kh] = rope(k head kh of qkv[t])
//   v_pool[slot_mapping[t], kh] = v head kh of qkv[t]   (bitwise, without a bias)
// with `extras` applied first (each element widened to f32, rounded to bf16 once).
// where rope rotates the first rope_dim dims of a head and leaves the rest.
//   qkv: [T, (n_heads + 2 n_kv_heads) * head_dim] bf16: q heads, then k heads, then v heads
//   positions, slot_mapping: [T] i32 device pointers; slot = block * block_size + offset
//   inv_freq: [rope_dim / 2] f32 device pointer (rope_inv_freqs: any scaling already applied)
//   q_out: [T, n_heads, head_dim] bf16
//   k_pool, v_pool: [num_blocks, block_size, n_kv_heads, head_dim] bf16, as paged_attention_cuda reads them;
//                   or f8e4m3: the bf16 row above, each element quantized with
//                   kv_scales (core/kv_quant.h), which only such pools read
// A slot < 0 is not written (a token whose K/V is not kept); neither is a slot
// >= num_blocks * block_size (it would be out of bounds: the pool is never
// written outside itself). q is written for every token.
// PRECOND: head_dim even, 0 < rope_dim <= head_dim, rope_dim even; with the
// norms, head_dim a power of two in [16, 256] and 16-byte aligned tensors
// (a head's lanes then share one warp).
void rope_kv_write_cuda(const Tensor& qkv, const int32_t* positions, const int32_t* slot_mapping,
                        const float* inv_freq, int32_t rope_dim, int32_t n_heads, int32_t n_kv_heads,
                        const Tensor& q_out, const Tensor& k_pool, const Tensor& v_pool, cuda::Stream s,
                        const RopeKvExtras& extras = {}, const KvScales& kv_scales = {});

}  // namespace nanoserve
