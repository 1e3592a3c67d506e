#pragma once
// From HF's rotary layout to the one ops/rope rotates.
//
// HF rotates the pairs (i, i + hd/2) of each head (rotate_half; llama.cpp
// calls it NEOX); ops/rope rotates adjacent pairs (2i, 2i+1), the layout that
// llama.cpp's converter gives llama GGUF files by permuting the q/k rows. The
// same permutation, applied to the rows of q and k, makes one forward serve
// both layouts, since q·k is unchanged when both are permuted alike:
//   our row h*hd + 2i + j  =  HF row h*hd + j*(hd/2) + i      (j in {0, 1}, i < hd/2)
// It applies to every tensor whose rows are q or k head dims:
//   attn_q.weight, attn_k.weight     [heads * hd, dim]
//   attn_q.bias, attn_k.bias         [heads * hd]           (qwen2)
//   attn_q_norm, attn_k_norm         [hd], one head         (qwen3)
//   attn_qkv.weight                  the q rows and k rows of [q; k; v] (phi3)
// Rows are moved whole, so block-quantized weights permute as they are stored.

#include <memory>
#include <string_view>

#include "io/tensor_source.h"
#include "model/config.h"

namespace nanoserve {

class GgufFile;

// Rows of a [n_heads * head_dim, ...] tensor in HF order into adjacent-pair
// order, in owned memory. PRECOND: head_dim even, dim(0) == n_heads * head_dim.
Tensor permute_rope_rows(const Tensor& w, int64_t n_heads, int64_t head_dim);

// `t`, the tensor of GGUF name `name`, into adjacent-pair order if it is one
// of those above; otherwise `t` itself. INVALID_ARGUMENT naming `shown` when
// its first dimension does not match the config.
StatusOr<Tensor> rope_rows_to_pairs(const ModelConfig& config, std::string_view name, Tensor t,
                                    const std::string& shown);

// The tensors of a GGUF file as the forward wants them: as stored for llama,
// through rope_rows_to_pairs for the architectures whose files keep HF's
// halves (model/arch.h).
std::shared_ptr<const TensorSource> gguf_model_tensors(std::shared_ptr<const GgufFile> file,
                                                       const ModelConfig& config);

}  // namespace nanoserve
