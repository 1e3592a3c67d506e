// CpuModel::load: the weights of every architecture (model/arch.h) by their
// GGUF names, checked against the config, into ModelWeights.

#include <string>

#include "core/half.h"
#include "io/gguf.h"
#include "io/tensor_source.h"
#include "model/arch.h"
#include "model/dummy_weights.h"
#include "model/model_cpu.h"
#include "model/model_shapes.h"
#include "model/rope_layout.h"
#include "ops/dequantize/dequantize.h"
#include "ops/matmul/matmul.h"
#include "ops/rope/rope_freqs.h"

namespace nanoserve {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// An MXFP4 tensor [..., K] into owned bf16 of the same shape.
Tensor mxfp4_to_bf16(const Tensor& t) {
  Tensor out = Tensor::empty(DType::kBF16, t.shape());
  const int64_t K = t.dim(-1), rows = t.numel() / K;
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(DType::kMXFP4, static_cast<const char*>(t.data()) + dtype_bytes(DType::kMXFP4, r * K),
                   row.data(), K);
    uint16_t* o = static_cast<uint16_t*>(out.data()) + r * K;
    for (int64_t k = 0; k < K; ++k) o[k] = f32_to_bf16(row[static_cast<size_t>(k)]);
  }
  return out;
}

// A [rows, cols] (or [E, n]) tensor as f32, converted into owned memory if stored otherwise.
StatusOr<Tensor> load_f32(const TensorSource& f, const std::string& name, std::vector<int64_t> shape) {
  NS_ASSIGN_OR_RETURN(Tensor t, f.tensor(name));
  if (t.shape() != shape) {
    return invalid_argument("tensor '" + f.display_name(name) + "' has shape " + t.shape_string() +
                            ", the config implies " + shape_str(shape));
  }
  if (t.dtype() == DType::kF32) return t;
  if (t.dtype() == DType::kI32 || t.dtype() == DType::kU8) {
    return invalid_argument("tensor '" + f.display_name(name) + "' is " + dtype_name(t.dtype()) +
                            ", not a weight type");
  }
  Tensor out = Tensor::empty(DType::kF32, shape);
  dequantize_row(t.dtype(), t.data(), out.data_as<float>(), t.numel());
  return out;
}

// A weight the matmul can read, of exactly `shape`.
StatusOr<Tensor> load_matrix(const TensorSource& f, const std::string& name, std::vector<int64_t> shape) {
  NS_ASSIGN_OR_RETURN(Tensor t, f.tensor(name));
  if (t.shape() != shape) {
    return invalid_argument("tensor '" + f.display_name(name) + "' has shape " + t.shape_string() +
                            ", the config implies " + shape_str(shape));
  }
  if (t.dtype() == DType::kI32 || t.dtype() == DType::kU8) {
    return invalid_argument("tensor '" + f.display_name(name) + "' is " + dtype_name(t.dtype()) +
                            ", not a weight type");
  }
  // MXFP4 (gpt-oss's experts in GGUF) is dequantized here to bf16, which the
  // CPU matmul reads; exact, as an E2M1 value times a power of two fits bf16.
  if (t.dtype() == DType::kMXFP4) return mxfp4_to_bf16(t);
  return t;
}

// A layer linear, and its row scales (`scale`) when the source returns it as
// FP8 E4M3 rows (TensorSource::with_fp8_rows()).
StatusOr<Tensor> load_linear(const TensorSource& f, const std::string& name, std::vector<int64_t> shape,
                             Tensor* scale) {
  NS_ASSIGN_OR_RETURN(Tensor t, load_matrix(f, name, shape));
  if (t.dtype() != DType::kF8E4M3) return t;
  NS_ASSIGN_OR_RETURN(*scale, f.row_scales(name));
  if (scale->dtype() != DType::kF32 || scale->ndim() != 1 || scale->dim(0) != shape[0]) {
    return invalid_argument("tensor '" + f.display_name(name) + "': row scales of shape " +
                            scale->shape_string() + ", expected [" + std::to_string(shape[0]) + "] f32");
  }
  return t;
}

// A norm weight as f32 (converted into owned memory if stored otherwise).
StatusOr<Tensor> load_vector(const TensorSource& f, const std::string& name, int64_t n) {
  NS_ASSIGN_OR_RETURN(Tensor t, f.tensor(name));
  if (t.numel() != n || t.ndim() != 1) {
    return invalid_argument("tensor '" + f.display_name(name) + "' has shape " + t.shape_string() +
                            ", expected [" + std::to_string(n) + "]");
  }
  if (t.dtype() == DType::kF32) return t;
  if (t.dtype() == DType::kI32) {
    return invalid_argument("tensor '" + f.display_name(name) + "' is I32, not a weight type");
  }
  Tensor out = Tensor::empty(DType::kF32, {n});
  dequantize_row(t.dtype(), t.data(), out.data_as<float>(), n);
  return out;
}

// One of a layer's expert matrices for every expert: views of the stacked
// [n_experts, rows, cols] ffn_X_exps (a GGUF), else the per-expert
// ffn_X.E (an HF checkpoint, older GGUF files).
Status load_expert_set(const TensorSource& f, const ModelConfig& c, const std::string& p, const char* x,
                       int64_t rows, int64_t cols, std::vector<Tensor>& out) {
  const int64_t E = c.n_experts;
  const std::string stacked = p + "ffn_" + x + "_exps.weight";
  out.clear();
  if (f.contains(stacked)) {
    NS_ASSIGN_OR_RETURN(Tensor t, load_matrix(f, stacked, {E, rows, cols}));
    for (int64_t e = 0; e < E; ++e) out.push_back(t.slice_rows(e, e + 1).reshape({rows, cols}));
    return Status::ok_status();
  }
  for (int64_t e = 0; e < E; ++e) {
    NS_ASSIGN_OR_RETURN(Tensor t,
                        load_matrix(f, p + "ffn_" + x + "." + std::to_string(e) + ".weight", {rows, cols}));
    out.push_back(std::move(t));
  }
  return Status::ok_status();
}

Status load_experts(const TensorSource& f, const ModelConfig& c, const std::string& p, LayerWeights& L) {
  const int64_t dim = c.dim, ffn = c.expert_ffn_dim;
  NS_ASSIGN_OR_RETURN(L.router, load_matrix(f, p + "ffn_gate_inp.weight", {c.n_experts, dim}));
  NS_RETURN_IF_ERROR(load_expert_set(f, c, p, "gate", ffn, dim, L.exp_gate));
  NS_RETURN_IF_ERROR(load_expert_set(f, c, p, "up", ffn, dim, L.exp_up));
  NS_RETURN_IF_ERROR(load_expert_set(f, c, p, "down", dim, ffn, L.exp_down));
  if (c.arch_info().oss_experts) {
    NS_ASSIGN_OR_RETURN(L.router_bias, load_vector(f, p + "ffn_gate_inp.bias", c.n_experts));
    NS_ASSIGN_OR_RETURN(L.exp_gate_bias, load_f32(f, p + "ffn_gate_exps.bias", {c.n_experts, ffn}));
    NS_ASSIGN_OR_RETURN(L.exp_up_bias, load_f32(f, p + "ffn_up_exps.bias", {c.n_experts, ffn}));
    NS_ASSIGN_OR_RETURN(L.exp_down_bias, load_f32(f, p + "ffn_down_exps.bias", {c.n_experts, dim}));
  }
  return Status::ok_status();
}

// The tensors of layer `l`. phi3's fused tensors become row views of one load.
StatusOr<LayerWeights> load_layer(const TensorSource& f, const ModelConfig& c, int64_t l) {
  const ArchInfo& family = c.arch_info();
  const std::string p = "blk." + std::to_string(l) + ".";
  const int64_t dim = c.dim, hd = c.head_dim, ffn = c.ffn_dim;
  const int64_t q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
  LayerWeights L;
  NS_ASSIGN_OR_RETURN(L.attn_norm, load_vector(f, p + "attn_norm.weight", dim));
  if (family.fused_qkv_gate_up) {
    Tensor scale;
    NS_ASSIGN_OR_RETURN(Tensor qkv, load_linear(f, p + "attn_qkv.weight", {q_dim + 2 * kv_dim, dim}, &scale));
    L.wq = qkv.slice_rows(0, q_dim);
    L.wk = qkv.slice_rows(q_dim, q_dim + kv_dim);
    L.wv = qkv.slice_rows(q_dim + kv_dim, q_dim + 2 * kv_dim);
    if (scale.defined()) {
      L.scale.wq = scale.slice_rows(0, q_dim);
      L.scale.wk = scale.slice_rows(q_dim, q_dim + kv_dim);
      L.scale.wv = scale.slice_rows(q_dim + kv_dim, q_dim + 2 * kv_dim);
    }
  } else {
    NS_ASSIGN_OR_RETURN(L.wq, load_linear(f, p + "attn_q.weight", {q_dim, dim}, &L.scale.wq));
    NS_ASSIGN_OR_RETURN(L.wk, load_linear(f, p + "attn_k.weight", {kv_dim, dim}, &L.scale.wk));
    NS_ASSIGN_OR_RETURN(L.wv, load_linear(f, p + "attn_v.weight", {kv_dim, dim}, &L.scale.wv));
  }
  if (family.qkv_bias) {
    NS_ASSIGN_OR_RETURN(L.bq, load_vector(f, p + "attn_q.bias", q_dim));
    NS_ASSIGN_OR_RETURN(L.bk, load_vector(f, p + "attn_k.bias", kv_dim));
    NS_ASSIGN_OR_RETURN(L.bv, load_vector(f, p + "attn_v.bias", kv_dim));
  }
  if (family.qk_norm) {
    NS_ASSIGN_OR_RETURN(L.q_norm, load_vector(f, p + "attn_q_norm.weight", hd));
    NS_ASSIGN_OR_RETURN(L.k_norm, load_vector(f, p + "attn_k_norm.weight", hd));
  }
  NS_ASSIGN_OR_RETURN(L.wo, load_linear(f, p + "attn_output.weight", {dim, q_dim}, &L.scale.wo));
  if (family.o_bias) {
    NS_ASSIGN_OR_RETURN(L.bo, load_vector(f, p + "attn_output.bias", dim));
  }
  if (family.attn_sinks) {
    NS_ASSIGN_OR_RETURN(L.sinks, load_vector(f, p + "attn_sinks.weight", c.n_heads));
  }
  if (family.sandwich_norms) {
    NS_ASSIGN_OR_RETURN(L.post_attn_norm, load_vector(f, p + "post_attention_norm.weight", dim));
    NS_ASSIGN_OR_RETURN(L.post_ffn_norm, load_vector(f, p + "post_ffw_norm.weight", dim));
  }
  NS_ASSIGN_OR_RETURN(L.ffn_norm, load_vector(f, p + family.ffn_norm_name, dim));
  if (c.n_experts > 0) {
    NS_RETURN_IF_ERROR(load_experts(f, c, p, L));
    return L;
  }
  if (family.fused_qkv_gate_up) {
    Tensor scale;
    NS_ASSIGN_OR_RETURN(Tensor gate_up, load_linear(f, p + "ffn_up.weight", {2 * ffn, dim}, &scale));
    L.w_gate = gate_up.slice_rows(0, ffn);
    L.w_up = gate_up.slice_rows(ffn, 2 * ffn);
    if (scale.defined()) {
      L.scale.w_gate = scale.slice_rows(0, ffn);
      L.scale.w_up = scale.slice_rows(ffn, 2 * ffn);
    }
  } else {
    NS_ASSIGN_OR_RETURN(L.w_gate, load_linear(f, p + "ffn_gate.weight", {ffn, dim}, &L.scale.w_gate));
    NS_ASSIGN_OR_RETURN(L.w_up, load_linear(f, p + "ffn_up.weight", {ffn, dim}, &L.scale.w_up));
  }
  NS_ASSIGN_OR_RETURN(L.w_down, load_linear(f, p + "ffn_down.weight", {dim, ffn}, &L.scale.w_down));
  return L;
}

}  // namespace

StatusOr<std::unique_ptr<CpuModel>> CpuModel::load(std::shared_ptr<const GgufFile> file,
                                                       ThreadPool& pool) {
  NS_ASSIGN_OR_RETURN(ModelConfig config, config_from_gguf(*file));
  NS_RETURN_IF_ERROR(check_gguf_supported(*file, config));
  auto tensors = gguf_model_tensors(std::move(file), config);
  return load(config, std::move(tensors), pool);
}

StatusOr<std::unique_ptr<CpuModel>> CpuModel::load(const ModelConfig& given,
                                                       std::shared_ptr<const TensorSource> tensors,
                                                       ThreadPool& pool) {
  NS_RETURN_IF_ERROR(given.validate());
  ModelConfig config = given;
  NS_RETURN_IF_ERROR(apply_arch(config));
  if (tensors->materializes()) {
    const int64_t bytes = model_param_count(config) * 4;  // f32
    const int64_t avail = available_memory_bytes();
    if (avail >= 0 && bytes > avail) {
      return resource_exhausted(tensors->describe() + ": the f32 weights need " +
                                std::to_string(bytes >> 20) + " MiB but only " + std::to_string(avail >> 20) +
                                " MiB of memory are available; pick a smaller --model-shape");
    }
  }
  std::unique_ptr<CpuModel> m(new CpuModel(tensors, config, pool));
  const TensorSource& f = *tensors;
  ModelWeights& w = m->weights_;
  NS_ASSIGN_OR_RETURN(w.tok_embd, load_matrix(f, "token_embd.weight", {config.vocab_size, config.dim}));
  NS_ASSIGN_OR_RETURN(w.output_norm, load_vector(f, "output_norm.weight", config.dim));
  if (!config.tied_embeddings) {
    NS_ASSIGN_OR_RETURN(w.lm_head, load_matrix(f, "output.weight", {config.vocab_size, config.dim}));
  } else {
    w.lm_head = w.tok_embd;
  }
  for (int64_t l = 0; l < config.n_layers; ++l) {
    NS_ASSIGN_OR_RETURN(LayerWeights L, load_layer(f, config, l));
    w.layers.push_back(std::move(L));
  }
  // The CPU matmul's packed copies of the quantized weights, made once here.
  matmul_prepare(w.lm_head);
  for (const LayerWeights& L : w.layers) {
    for (const Tensor* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) matmul_prepare(*t);
    for (const std::vector<Tensor>* set : {&L.exp_gate, &L.exp_up, &L.exp_down}) {
      for (const Tensor& t : *set) matmul_prepare(t);
    }
  }
  std::vector<float> freq_factors;
  if (f.contains("rope_freqs.weight")) {
    NS_ASSIGN_OR_RETURN(Tensor rf, load_vector(f, "rope_freqs.weight", config.rope_dim / 2));
    freq_factors.assign(rf.data_as<const float>(), rf.data_as<const float>() + rf.numel());
  }
  m->rope_attention_factor_ = nanoserve::rope_attention_factor(config.rope_scaling);
  m->inv_freq_ = rope_inv_freqs(config.rope_dim, config.rope_theta, config.rope_scaling, freq_factors);
  if (config.rope_local_theta > 0.0f) {  // Gemma 3's local layers: their own theta, no scaling
    m->inv_freq_local_ = rope_inv_freqs(config.rope_dim, config.rope_local_theta, RopeScaling{}, {});
  }
  return m;
}

}  // namespace nanoserve
