// CudaModel's weights (model/model_cuda.h): uploading a host model's
// tensors (bf16, or an FP8 checkpoint's E4M3 rows with their scales), dummy
// weights made on the device, and --quantization fp8. The step lives in
// model_cuda.cu.

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/device_memory.cuh"
#include "core/half.h"
#include "core/logging.h"
#include "model/model_cpu.h"
#include "model/model_cuda.h"
#include "ops/dequantize/dequantize.h"
#include "ops/fill/fill_cuda.cuh"
#include "ops/matmul/linear_cuda.cuh"
#include "ops/rope/rope_freqs.h"

namespace nanoserve {

namespace {

// Rows [row0, row0 + src.dim(0)) of the bf16 device matrix `dst` from a host
// weight of any stored dtype: dequantized to f32 a row at a time (an E4M3
// row times its `scale`, [rows] f32, when given), rounded to bf16, and copied
// through a pinned staging buffer.
void upload_rows(const Tensor& src, const Tensor& dst, int64_t row0, const Tensor* scale = nullptr) {
  const int64_t rows = src.dim(0), cols = src.dim(1);
  NS_CHECK(dst.dim(1) == cols && row0 + rows <= dst.dim(0))
      << "upload " << src.shape_string() << " into " << dst.shape_string() << " at row " << row0;
  const int64_t row_bytes = dtype_bytes(src.dtype(), cols);
  constexpr int64_t kChunkRows = 1024;
  std::vector<float> f32(static_cast<size_t>(cols));
  std::shared_ptr<void> stage = cuda::pinned_host(kChunkRows * cols * 2);
  auto* out = static_cast<uint16_t*>(stage.get());
  for (int64_t r = 0; r < rows; r += kChunkRows) {
    const int64_t n = std::min(kChunkRows, rows - r);
    for (int64_t i = 0; i < n; ++i) {
      const auto* row = static_cast<const uint8_t*>(src.data()) + (r + i) * row_bytes;
      dequantize_row(src.dtype(), row, f32.data(), cols);
      if (scale != nullptr) {
        const float sc = scale->data_as<const float>()[r + i];
        for (float& v : f32) v *= sc;
      }
      for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = f32_to_bf16(f32[static_cast<size_t>(j)]);
    }
    cuda::copy_bytes_to_device(dst.data_as<uint16_t>() + (row0 + r) * cols, out, n * cols * 2);
  }
}

Tensor upload_matrix(const Tensor& src) {
  Tensor dst = cuda::empty(DType::kBF16, {src.dim(0), src.dim(1)});
  upload_rows(src, dst, 0);
  return dst;
}

// A norm weight (or any vector) as f32 on the device.
Tensor upload_vector(const Tensor& src) {
  Tensor f32 = Tensor::empty(DType::kF32, {src.numel()});
  dequantize_row(src.dtype(), src.data(), f32.data_as<float>(), src.numel());
  return cuda::to_device(f32);
}

// Vectors of any stored dtype, one after the other, as one f32 device vector.
Tensor upload_concat(std::initializer_list<const Tensor*> parts) {
  int64_t n = 0;
  for (const Tensor* t : parts) n += t->numel();
  Tensor f32 = Tensor::empty(DType::kF32, {n});
  int64_t at = 0;
  for (const Tensor* t : parts) {
    dequantize_row(t->dtype(), t->data(), f32.data_as<float>() + at, t->numel());
    at += t->numel();
  }
  return cuda::to_device(f32);
}

// A linear of row parts stacked in order (q, k, v; gate, up; or one), each
// a host weight with its row scales (undefined unless the weight is FP8 E4M3
// rows: LayerWeights::scale). Where every part is E4M3 with scales and
// linear_cuda takes the shape (K % 64 == 0, N % 16 == 0), the E4M3 bytes go
// up as they are and the scales beside them: an FP8 LinearWeight. Otherwise
// bf16, an E4M3 part times its scales rounded to bf16.
using LinearPart = std::pair<const Tensor*, const Tensor*>;  // (weight, row scales)
LinearWeight upload_linear(std::initializer_list<LinearPart> parts) {
  int64_t rows = 0;
  bool fp8 = true;
  const int64_t cols = parts.begin()->first->dim(1);
  for (const LinearPart& p : parts) {
    rows += p.first->dim(0);
    fp8 = fp8 && p.first->dtype() == DType::kF8E4M3 && p.second->defined();
  }
  if (fp8 && cols % 64 == 0 && rows % 16 == 0) {
    Tensor w = cuda::empty(DType::kF8E4M3, {rows, cols});
    int64_t at = 0;
    std::vector<const Tensor*> scales;
    for (const LinearPart& p : parts) {
      NS_CHECK(p.first->is_contiguous() && p.first->dim(1) == cols) << "FP8 part " << p.first->shape_string();
      cuda::copy_bytes_to_device(static_cast<uint8_t*>(w.data()) + at * cols, p.first->data(),
                                 p.first->nbytes());
      at += p.first->dim(0);
      scales.push_back(p.second);
    }
    Tensor scale = Tensor::empty(DType::kF32, {rows});
    at = 0;
    for (const Tensor* sc : scales) {
      std::copy(sc->data_as<const float>(), sc->data_as<const float>() + sc->numel(),
                scale.data_as<float>() + at);
      at += sc->numel();
    }
    return LinearWeight(std::move(w), cuda::to_device(scale));
  }
  Tensor w = cuda::empty(DType::kBF16, {rows, cols});
  int64_t at = 0;
  for (const LinearPart& p : parts) {
    upload_rows(*p.first, w, at, p.first->dtype() == DType::kF8E4M3 ? p.second : nullptr);
    at += p.first->dim(0);
  }
  return LinearWeight(std::move(w));
}

// A layer's experts (ops/moe/moe_cuda.cuh): the router in f32 and each
// expert's gate and up rows stacked into [E, 2F, dim], its down into
// [E, dim, F], in bf16, from E host tensors of any stored dtype (views into
// a GGUF's stacked ffn_{gate,up,down}_exps, or an HF checkpoint's tensor per
// expert). FP8 E4M3 experts have no row scales here: refused by name.
Status upload_experts(const ModelConfig& c, const LayerWeights& hl, CudaLayer& L) {
  const int64_t E = c.n_experts, F = c.expert_ffn_dim, dim = c.dim;
  if (static_cast<int64_t>(hl.exp_gate.size()) != E || static_cast<int64_t>(hl.exp_up.size()) != E ||
      static_cast<int64_t>(hl.exp_down.size()) != E || !hl.router.defined()) {
    return invalid_argument("upload: a layer's experts do not match the config's " + std::to_string(E));
  }
  for (const std::vector<Tensor>* set : {&hl.exp_gate, &hl.exp_up, &hl.exp_down}) {
    for (const Tensor& t : *set) {
      if (t.dtype() == DType::kF8E4M3) {
        return unimplemented("--device cuda: FP8 E4M3 expert weights (the CUDA experts take bf16)");
      }
    }
  }
  L.router = upload_vector(hl.router).reshape({E, dim});
  if (c.arch_info().oss_experts) {  // gpt-oss's biases; gate and up side by side per expert, as exp_gate_up
    for (const Tensor* b : {&hl.router_bias, &hl.exp_gate_bias, &hl.exp_up_bias, &hl.exp_down_bias}) {
      if (!b->defined()) return invalid_argument("upload: a gpt-oss layer without its expert biases");
    }
    if (hl.router_bias.numel() != E || hl.exp_gate_bias.numel() != E * F || hl.exp_up_bias.numel() != E * F ||
        hl.exp_down_bias.numel() != E * dim) {
      return invalid_argument("upload: the expert biases do not match " + std::to_string(E) + " experts of " +
                              std::to_string(F));
    }
    L.router_bias = upload_vector(hl.router_bias);
    Tensor gate_up_bias = Tensor::empty(DType::kF32, {E, 2 * F});
    const int64_t gate_bytes = dtype_bytes(hl.exp_gate_bias.dtype(), F),
                  up_bytes = dtype_bytes(hl.exp_up_bias.dtype(), F);
    for (int64_t e = 0; e < E; ++e) {
      float* row = gate_up_bias.data_as<float>() + e * 2 * F;
      dequantize_row(hl.exp_gate_bias.dtype(),
                     static_cast<const uint8_t*>(hl.exp_gate_bias.data()) + e * gate_bytes, row, F);
      dequantize_row(hl.exp_up_bias.dtype(),
                     static_cast<const uint8_t*>(hl.exp_up_bias.data()) + e * up_bytes, row + F, F);
    }
    L.exp_gate_up_bias = cuda::to_device(gate_up_bias);
    L.exp_down_bias = upload_vector(hl.exp_down_bias).reshape({E, dim});
  }
  L.exp_gate_up = cuda::empty(DType::kBF16, {E, 2 * F, dim});
  L.exp_down = cuda::empty(DType::kBF16, {E, dim, F});
  const Tensor gate_up = L.exp_gate_up.reshape({E * 2 * F, dim}), down = L.exp_down.reshape({E * dim, F});
  for (int64_t e = 0; e < E; ++e) {
    const auto i = static_cast<size_t>(e);
    upload_rows(hl.exp_gate[i], gate_up, e * 2 * F);
    upload_rows(hl.exp_up[i], gate_up, e * 2 * F + F);
    upload_rows(hl.exp_down[i], down, e * dim);
  }
  return Status::ok_status();
}

Tensor device_floats(std::span<const float> v) {
  Tensor h = Tensor::empty(DType::kF32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), h.data_as<float>());
  return cuda::to_device(h);
}

Tensor device_ones(int64_t n) {
  std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  return device_floats(ones);
}

int64_t bytes_of(const Tensor& t) {
  return t.defined() ? t.nbytes() : 0;
}

// The local layers' rotary table (gemma3), as CpuModel::load makes it: their
// own theta, no scaling. Undefined when every layer rotates alike.
Tensor local_inv_freq(const ModelConfig& c) {
  if (c.rope_local_theta <= 0.0f) return Tensor();
  return device_floats(rope_inv_freqs(c.rope_dim, c.rope_local_theta, RopeScaling{}, {}));
}

// Device bytes of the weights (a tied lm_head once).
int64_t resident_bytes(const CudaWeights& w) {
  int64_t bytes =
      bytes_of(w.tok_embd) + bytes_of(w.output_norm) + bytes_of(w.inv_freq) + bytes_of(w.inv_freq_local);
  if (w.lm_head.data() != w.tok_embd.data()) bytes += bytes_of(w.lm_head);
  for (const CudaLayer& L : w.layers) {
    bytes += bytes_of(L.attn_norm) + L.wqkv.nbytes() + bytes_of(L.qkv_bias) + bytes_of(L.q_norm) +
             bytes_of(L.k_norm) + L.wo.nbytes() + bytes_of(L.ffn_norm) + L.w_gate_up.nbytes() +
             L.w_down.nbytes() + bytes_of(L.post_attn_norm) + bytes_of(L.post_ffn_norm) + bytes_of(L.router) +
             bytes_of(L.exp_gate_up) + bytes_of(L.exp_down) + bytes_of(L.o_bias) + bytes_of(L.sinks) +
             bytes_of(L.router_bias) + bytes_of(L.exp_gate_up_bias) + bytes_of(L.exp_down_bias);
  }
  return bytes;
}

}  // namespace

// ---- weights -----------------------------------------------------------------------

StatusOr<std::unique_ptr<CudaModel>> CudaModel::upload(const ModelConfig& config, const ModelWeights& host,
                                                       std::span<const float> inv_freq) {
  NS_RETURN_IF_ERROR(config.validate());
  if (static_cast<int64_t>(host.layers.size()) != config.n_layers) {
    return invalid_argument("upload: " + std::to_string(host.layers.size()) + " layers, the config has " +
                            std::to_string(config.n_layers));
  }
  std::unique_ptr<CudaModel> m(new CudaModel(config));
  CudaWeights& w = m->weights_;
  const int64_t dim = config.dim, hd = config.head_dim;
  const int64_t q_rows = config.n_heads * hd, kv_rows = config.n_kv_heads * hd;
  w.tok_embd = upload_matrix(host.tok_embd);
  w.output_norm = upload_vector(host.output_norm);
  // Tied embeddings share one device copy, as they share one host tensor.
  w.lm_head = host.lm_head.data() == host.tok_embd.data() ? w.tok_embd : upload_matrix(host.lm_head);
  for (const LayerWeights& hl : host.layers) {
    CudaLayer L;
    L.attn_norm = upload_vector(hl.attn_norm);
    L.wqkv = upload_linear({{&hl.wq, &hl.scale.wq}, {&hl.wk, &hl.scale.wk}, {&hl.wv, &hl.scale.wv}});
    if (config.arch_info().qkv_bias) L.qkv_bias = upload_concat({&hl.bq, &hl.bk, &hl.bv});
    if (config.arch_info().qk_norm) {
      L.q_norm = upload_vector(hl.q_norm);
      L.k_norm = upload_vector(hl.k_norm);
    }
    L.wo = upload_linear({{&hl.wo, &hl.scale.wo}});
    if (config.arch_info().o_bias) L.o_bias = upload_vector(hl.bo);
    if (config.arch_info().attn_sinks) L.sinks = upload_vector(hl.sinks);
    L.ffn_norm = upload_vector(hl.ffn_norm);
    if (config.n_experts > 0) {
      NS_RETURN_IF_ERROR(upload_experts(config, hl, L));
    } else {
      L.w_gate_up = upload_linear({{&hl.w_gate, &hl.scale.w_gate}, {&hl.w_up, &hl.scale.w_up}});
      L.w_down = upload_linear({{&hl.w_down, &hl.scale.w_down}});
    }
    if (config.arch_info().sandwich_norms) {
      L.post_attn_norm = upload_vector(hl.post_attn_norm);
      L.post_ffn_norm = upload_vector(hl.post_ffn_norm);
    }
    NS_CHECK(L.wqkv.rows() == q_rows + 2 * kv_rows && L.wqkv.cols() == dim && L.wo.rows() == dim &&
             (config.n_experts > 0 ||
              (L.w_gate_up.rows() == 2 * config.ffn_dim && L.w_down.cols() == config.ffn_dim)))
        << "upload: the host layer's shapes do not match the config";
    w.layers.push_back(std::move(L));
  }
  w.inv_freq = device_floats(inv_freq);
  w.inv_freq_local = local_inv_freq(config);
  cuda::synchronize();
  m->weight_bytes_ = resident_bytes(w);
  return StatusOr<std::unique_ptr<CudaModel>>(std::move(m));
}

StatusOr<std::unique_ptr<CudaModel>> CudaModel::dummy(const ModelConfig& config,
                                                      std::span<const float> inv_freq, uint64_t seed) {
  NS_RETURN_IF_ERROR(config.validate());
  std::unique_ptr<CudaModel> m(new CudaModel(config));
  CudaWeights& w = m->weights_;
  const int64_t dim = config.dim, hd = config.head_dim, ffn = config.ffn_dim;
  const int64_t qkv_rows = (config.n_heads + 2 * config.n_kv_heads) * hd;
  // Uniform in [-a, a] with a = sqrt(3 / fan_in) keeps each product's variance
  // near its input's, so activations stay finite through the layers.
  uint64_t stream_id = 0;
  auto random = [&](std::vector<int64_t> shape) {
    Tensor t = cuda::empty(DType::kBF16, shape);
    fill_uniform_cuda(t, seed + 0x9e3779b97f4a7c15ull * ++stream_id, std::sqrt(3.0f / shape[1]), nullptr);
    return t;
  };
  w.tok_embd = random({config.vocab_size, dim});
  w.output_norm = device_ones(dim);
  w.lm_head = config.tied_embeddings ? w.tok_embd : random({config.vocab_size, dim});
  for (int64_t l = 0; l < config.n_layers; ++l) {
    CudaLayer L;
    L.attn_norm = device_ones(dim);
    L.wqkv = random({qkv_rows, dim});
    if (config.arch_info().qkv_bias)
      L.qkv_bias = device_floats(std::vector<float>(static_cast<size_t>(qkv_rows), 0.0f));
    if (config.arch_info().qk_norm) {
      L.q_norm = device_ones(hd);
      L.k_norm = device_ones(hd);
    }
    L.wo = random({dim, config.n_heads * hd});
    // gpt-oss's biases and sinks are zero: the bytes and the arithmetic of real ones.
    if (config.arch_info().o_bias)
      L.o_bias = device_floats(std::vector<float>(static_cast<size_t>(dim), 0.0f));
    if (config.arch_info().attn_sinks)
      L.sinks = device_floats(std::vector<float>(static_cast<size_t>(config.n_heads), 0.0f));
    L.ffn_norm = device_ones(dim);
    if (config.n_experts > 0) {  // the fan-in of each expert matrix is its last dimension
      const int64_t E = config.n_experts, F = config.expert_ffn_dim;
      L.router = cuda::empty(DType::kF32, {E, dim});
      L.exp_gate_up = cuda::empty(DType::kBF16, {E, 2 * F, dim});
      L.exp_down = cuda::empty(DType::kBF16, {E, dim, F});
      for (const Tensor* t : {&L.router, &L.exp_gate_up, &L.exp_down}) {
        fill_uniform_cuda(*t, seed + 0x9e3779b97f4a7c15ull * ++stream_id, std::sqrt(3.0f / t->dim(t->ndim() - 1)),
                          nullptr);
      }
      if (config.arch_info().oss_experts) {
        L.router_bias = device_floats(std::vector<float>(static_cast<size_t>(E), 0.0f));
        L.exp_gate_up_bias =
            device_floats(std::vector<float>(static_cast<size_t>(E * 2 * F), 0.0f)).reshape({E, 2 * F});
        L.exp_down_bias =
            device_floats(std::vector<float>(static_cast<size_t>(E * dim), 0.0f)).reshape({E, dim});
      }
    } else {
      L.w_gate_up = random({2 * ffn, dim});
      L.w_down = random({dim, ffn});
    }
    if (config.arch_info().sandwich_norms) {
      L.post_attn_norm = device_ones(dim);
      L.post_ffn_norm = device_ones(dim);
    }
    w.layers.push_back(std::move(L));
  }
  w.inv_freq = device_floats(inv_freq);
  w.inv_freq_local = local_inv_freq(config);
  cuda::synchronize();
  m->weight_bytes_ = resident_bytes(w);
  return StatusOr<std::unique_ptr<CudaModel>>(std::move(m));
}

int64_t CudaModel::fp8_linears() const {
  int64_t n = 0;
  for (const CudaLayer& L : weights_.layers)
    n += L.wqkv.fp8() + L.wo.fp8() + L.w_gate_up.fp8() + L.w_down.fp8();
  return n;
}

Status CudaModel::quantize_fp8() {
  if (step_ != nullptr) return failed_precondition("quantize_fp8: after allocate()");
  if (config_.n_experts > 0) {
    return unimplemented("--quantization fp8: the experts of " + config_.arch + " run in bf16 only on CUDA");
  }
  if (fp8()) return failed_precondition("quantize_fp8: every linear already is FP8");
  for (CudaLayer& L : weights_.layers) {
    for (LinearWeight* lw : {&L.wqkv, &L.wo, &L.w_gate_up, &L.w_down}) {
      if (lw->fp8()) continue;  // an FP8 checkpoint's, as it came
      LinearWeight q = quantize_fp8_rows_cuda(lw->w, nullptr);
      cuda::synchronize();  // before the bf16 copy is freed
      *lw = std::move(q);
    }
  }
  weight_bytes_ = resident_bytes(weights_);
  return Status::ok_status();
}

}  // namespace nanoserve
