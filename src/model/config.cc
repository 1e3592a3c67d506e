#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>

#include "core/check.h"
#include "core/half.h"
#include "io/gguf.h"
#include "model/arch.h"

namespace nanoserve {

namespace {

// Upper bounds: far beyond any real Llama-family model, low enough that sizes
// derived from them (dim * n_layers, vocab * dim, ...) cannot overflow int64.
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxDim = int64_t{1} << 17;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxFfnDim = int64_t{1} << 20;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxContext = int64_t{1} << 24;
constexpr int64_t kMaxExperts = 4096;

Status range_error(const char* field, int64_t v, int64_t lo, int64_t hi) {
  return invalid_argument(std::string("model config: ") + field + " = " + std::to_string(v) +
                          " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

Status check_range(const char* field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) return range_error(field, v, lo, hi);
  return Status::ok_status();
}

Status check_positive_finite(const char* field, float v) {
  if (!(std::isfinite(v) && v > 0.0f)) {
    return invalid_argument(std::string("model config: ") + field + " = " + std::to_string(v) +
                            " must be positive and finite");
  }
  return Status::ok_status();
}

// Reads `key` as an integer if present. A wrong type names the key.
Status read_int(const GgufFile& f, const std::string& key, bool required, int64_t* out) {
  auto v = f.get_int(key);
  if (v.ok()) {
    *out = *v;
    return Status::ok_status();
  }
  if (v.status().code() == StatusCode::kNotFound && !required) return Status::ok_status();
  return v.status();
}

Status read_float(const GgufFile& f, const std::string& key, float* out) {
  auto v = f.get_float(key);
  if (v.ok()) {
    if (std::isfinite(*v) && std::fabs(*v) > static_cast<double>(std::numeric_limits<float>::max())) {
      return invalid_argument("metadata '" + key + "': " + std::to_string(*v) + " is outside the f32 range");
    }
    *out = static_cast<float>(*v);
    return Status::ok_status();
  }
  if (v.status().code() == StatusCode::kNotFound) return Status::ok_status();
  return v.status();
}

// Gemma's keys and what llama.cpp assumes where a file leaves them out.
Status read_gemma_gguf(const GgufFile& f, ModelConfig* c) {
  const bool gemma2 = c->arch == "gemma2", gemma3 = c->arch == "gemma3";
  if (!gemma2 && !gemma3) return Status::ok_status();
  const std::string p = c->arch + ".";
  NS_RETURN_IF_ERROR(read_float(f, p + "attn_logit_softcapping", &c->attn_softcap));
  NS_RETURN_IF_ERROR(read_float(f, p + "final_logit_softcapping", &c->final_softcap));
  if (gemma2 && f.find(p + "attention.sliding_window") == nullptr) c->sliding_window = 4096;
  // Local layers: an array of bools, one a layer, or a period n whose last
  // layer is global (layer l slides when l % n < n - 1); 2 and 6 by default.
  if (c->sliding_window > 0) {
    c->sliding_layers.assign(static_cast<size_t>(std::clamp<int64_t>(c->n_layers, 0, kMaxLayers)), 1);
    const std::string key = p + "attention.sliding_window_pattern";
    int64_t period = gemma2 ? 2 : 6;
    if (const GgufValue* v = f.find(key); v != nullptr && v->type == GgufType::kArray) {
      NS_ASSIGN_OR_RETURN(const GgufArray* a, f.get_array(key));
      if (static_cast<int64_t>(a->items.size()) != c->n_layers)
        return invalid_argument("metadata '" + key + "': " + std::to_string(a->items.size()) +
                                " entries for " + std::to_string(c->n_layers) + " layers");
      for (size_t l = 0; l < a->items.size(); ++l) {
        const std::optional<bool> b = a->items[l].as_bool();
        if (!b) return invalid_argument("metadata '" + key + "': expected bools");
        c->sliding_layers[l] = *b ? 1 : 0;
      }
    } else {
      NS_RETURN_IF_ERROR(read_int(f, key, false, &period));
      if (period < 0) return invalid_argument("metadata '" + key + "': " + std::to_string(period) + " < 0");
      for (size_t l = 0; l < c->sliding_layers.size(); ++l)
        c->sliding_layers[l] = period == 0 || static_cast<int64_t>(l) % period < period - 1;
    }
    // The local layers' theta: Gemma 3's is 10000 unless stated; Gemma 2's
    // layers all rotate alike unless stated.
    if (gemma3) c->rope_local_theta = 10000.0f;
    NS_RETURN_IF_ERROR(read_float(f, p + "rope.freq_base_swa", &c->rope_local_theta));
  }
  // llama.cpp takes the attention scale from the model's size: the 27B
  // models (46 and 62 layers) scale by dim / n_heads, the others by head_dim.
  const bool is_27b = c->n_layers == (gemma2 ? 46 : 62);
  if (c->n_heads > 0)
    c->query_pre_attn_scalar = static_cast<float>(is_27b ? c->dim / c->n_heads : c->head_dim);
  // sqrt(dim) rounded as transformers would with activations in the
  // embedding table's dtype (f32, as llama.cpp, for the others).
  float scale = std::sqrt(static_cast<float>(c->dim));
  if (const GgufTensorInfo* emb = f.find_tensor("token_embd.weight")) {
    if (emb->dtype == DType::kBF16) scale = bf16_to_f32(f32_to_bf16(scale));
    if (emb->dtype == DType::kF16) scale = fp16_to_f32(f32_to_fp16(scale));
  }
  c->embed_scale = scale;
  return Status::ok_status();
}

}  // namespace

float ModelConfig::attention_scale() const {
  if (query_pre_attn_scalar <= 0.0f) return 1.0f / std::sqrt(static_cast<float>(head_dim));
  return static_cast<float>(1.0 /
                            std::sqrt(static_cast<double>(query_pre_attn_scalar)));  // as Python's **-0.5
}

Status ModelConfig::validate() const {
  if (arch.empty()) return invalid_argument("model config: arch is empty");
  NS_RETURN_IF_ERROR(check_range("n_layers", n_layers, 1, kMaxLayers));
  NS_RETURN_IF_ERROR(check_range("dim", dim, 1, kMaxDim));
  NS_RETURN_IF_ERROR(check_range("n_heads", n_heads, 1, kMaxHeads));
  NS_RETURN_IF_ERROR(check_range("n_kv_heads", n_kv_heads, 1, n_heads));
  if (n_heads % n_kv_heads != 0) {
    return invalid_argument("model config: n_heads = " + std::to_string(n_heads) +
                            " is not a multiple of n_kv_heads = " + std::to_string(n_kv_heads));
  }
  NS_RETURN_IF_ERROR(check_range("head_dim", head_dim, 1, kMaxHeadDim));
  NS_RETURN_IF_ERROR(check_range("rope_dim", rope_dim, 2, head_dim));
  if (rope_dim % 2 != 0) {
    return invalid_argument("model config: rope_dim = " + std::to_string(rope_dim) + " is odd");
  }
  NS_RETURN_IF_ERROR(check_range("ffn_dim", ffn_dim, 1, kMaxFfnDim));
  NS_RETURN_IF_ERROR(check_range("vocab_size", vocab_size, 1, kMaxVocab));
  NS_RETURN_IF_ERROR(check_range("context_length", context_length, 1, kMaxContext));
  NS_RETURN_IF_ERROR(check_range("sliding_window", sliding_window, 0, kMaxContext));
  NS_RETURN_IF_ERROR(check_range("n_experts", n_experts, 0, kMaxExperts));
  if (n_experts > 0) {
    NS_RETURN_IF_ERROR(check_range("n_experts_used", n_experts_used, 1, n_experts));
    NS_RETURN_IF_ERROR(check_range("expert_ffn_dim", expert_ffn_dim, 1, kMaxFfnDim));
  } else if (n_experts_used != 0) {
    return invalid_argument("model config: n_experts_used = " + std::to_string(n_experts_used) +
                            " without experts");
  }
  if (const ArchInfo* a = family != nullptr ? family : find_arch(arch)) {
    if (a->experts == ArchExperts::kAlways && n_experts == 0)
      return invalid_argument("model config: " + arch + " needs experts (n_experts is 0)");
  }
  if (!sliding_layers.empty() && static_cast<int64_t>(sliding_layers.size()) != n_layers) {
    return invalid_argument("model config: sliding layer types for " + std::to_string(sliding_layers.size()) +
                            " layers, but n_layers = " + std::to_string(n_layers));
  }
  for (const auto& [field, v] : {std::pair<const char*, float>{"rope_local_theta", rope_local_theta},
                                 {"attn_softcap", attn_softcap},
                                 {"final_softcap", final_softcap},
                                 {"query_pre_attn_scalar", query_pre_attn_scalar},
                                 {"embed_scale", embed_scale}}) {
    if (v != 0.0f) NS_RETURN_IF_ERROR(check_positive_finite(field, v));  // 0: not used
  }
  NS_RETURN_IF_ERROR(check_positive_finite("rope_theta", rope_theta));
  NS_RETURN_IF_ERROR(check_positive_finite("norm_eps", norm_eps));
  if (norm_eps >= 1.0f)
    return invalid_argument("model config: norm_eps = " + std::to_string(norm_eps) + " >= 1");
  if (rope_scaling.type != RopeScaling::Type::kNone) {
    NS_RETURN_IF_ERROR(check_positive_finite("rope_scaling.factor", rope_scaling.factor));
  }
  if (rope_scaling.type == RopeScaling::Type::kYarn) {
    NS_RETURN_IF_ERROR(check_range("rope_scaling.original_context_length",
                                   rope_scaling.original_context_length, 1, kMaxContext));
    NS_RETURN_IF_ERROR(check_positive_finite("rope_scaling.beta_fast", rope_scaling.beta_fast));
    NS_RETURN_IF_ERROR(check_positive_finite("rope_scaling.beta_slow", rope_scaling.beta_slow));
    if (rope_scaling.attention_factor != 0.0f)
      NS_RETURN_IF_ERROR(
          check_positive_finite("rope_scaling.attention_factor", rope_scaling.attention_factor));
  }
  if (n_experts > 0 && arch_info_or_null() != nullptr && arch_info_or_null()->oss_experts) {
    NS_RETURN_IF_ERROR(check_positive_finite("swiglu_alpha", swiglu_alpha));
    NS_RETURN_IF_ERROR(check_positive_finite("swiglu_limit", swiglu_limit));
  }
  if (rope_scaling.type == RopeScaling::Type::kLlama3) {
    NS_RETURN_IF_ERROR(check_positive_finite("rope_scaling.low_freq_factor", rope_scaling.low_freq_factor));
    NS_RETURN_IF_ERROR(check_positive_finite("rope_scaling.high_freq_factor", rope_scaling.high_freq_factor));
    if (!(rope_scaling.low_freq_factor < rope_scaling.high_freq_factor)) {
      return invalid_argument("model config: rope_scaling.low_freq_factor must be below high_freq_factor");
    }
    NS_RETURN_IF_ERROR(check_range("rope_scaling.original_context_length",
                                   rope_scaling.original_context_length, 1, kMaxContext));
  }
  return Status::ok_status();
}

std::string ModelConfig::to_string() const {
  std::ostringstream s;
  s << "arch " << arch << ", layers " << n_layers << ", dim " << dim << ", heads " << n_heads << " (kv "
    << n_kv_heads << ", head_dim " << head_dim << ", rope_dim " << rope_dim << "), ffn " << ffn_dim
    << ", vocab " << vocab_size << ", context " << context_length << ", rope_theta " << rope_theta
    << ", norm_eps " << norm_eps;
  switch (rope_scaling.type) {
    case RopeScaling::Type::kNone: break;
    case RopeScaling::Type::kLinear: s << ", rope scaling linear x" << rope_scaling.factor; break;
    case RopeScaling::Type::kLlama3:
      s << ", rope scaling llama3 x" << rope_scaling.factor << " (low " << rope_scaling.low_freq_factor
        << ", high " << rope_scaling.high_freq_factor << ", original context "
        << rope_scaling.original_context_length << ")";
      break;
    case RopeScaling::Type::kYarn:
      s << ", rope scaling yarn x" << rope_scaling.factor << " (original context "
        << rope_scaling.original_context_length << ", beta " << rope_scaling.beta_fast << "/"
        << rope_scaling.beta_slow << ", attention factor " << rope_attention_factor(rope_scaling) << ")";
      break;
  }
  if (rope_scaling.freq_factors_tensor) s << ", rope_freqs.weight";
  if (sliding_window > 0) {
    s << ", sliding window " << sliding_window;
    if (!sliding_layers.empty()) {
      int64_t n = 0;
      for (uint8_t b : sliding_layers) n += b != 0;
      s << " (" << n << " of " << n_layers << " layers)";
    }
  }
  if (n_experts > 0) {
    s << ", experts " << n_experts_used << " of " << n_experts << " (ffn " << expert_ffn_dim
      << (expert_weights_norm ? ", weights normalized)" : ")");
  }
  if (rope_local_theta > 0.0f) s << ", local rope_theta " << rope_local_theta;
  if (attn_softcap > 0.0f) s << ", attention soft-cap " << attn_softcap;
  if (final_softcap > 0.0f) s << ", final soft-cap " << final_softcap;
  if (query_pre_attn_scalar > 0.0f) s << ", query_pre_attn_scalar " << query_pre_attn_scalar;
  s << (tied_embeddings ? ", tied embeddings" : ", separate output");
  if (const ArchInfo* a = family != nullptr ? family : find_arch(arch)) {
    if (a->qkv_bias) s << ", qkv bias";
    if (a->qk_norm) s << ", q/k norm";
    if (a->fused_qkv_gate_up) s << ", fused qkv and gate_up";
    if (a->sandwich_norms) s << ", sandwich norms";
    if (a->norm_plus_one) s << ", (1 + w) norms";
    if (a->scaled_embedding)
      s << ", embedding x " << (embed_scale > 0.0f ? embed_scale : std::sqrt(float(dim)));
    if (std::string_view(a->hidden_act) != "silu") s << ", " << a->hidden_act;
    if (a->o_bias) s << ", o bias";
    if (a->attn_sinks) s << ", attention sinks";
    if (a->oss_experts) s << ", clamped SwiGLU (alpha " << swiglu_alpha << ", limit " << swiglu_limit << ")";
  }
  return s.str();
}

StatusOr<ModelConfig> config_from_gguf(const GgufFile& f) {
  ModelConfig c;
  NS_ASSIGN_OR_RETURN(c.arch, f.get_string("general.architecture"));
  if (c.arch.empty() || c.arch.size() > 64) {
    return invalid_argument("metadata 'general.architecture': bad architecture name");
  }
  const std::string p = c.arch + ".";
  NS_RETURN_IF_ERROR(read_int(f, p + "block_count", true, &c.n_layers));
  NS_RETURN_IF_ERROR(read_int(f, p + "embedding_length", true, &c.dim));
  NS_RETURN_IF_ERROR(read_int(f, p + "feed_forward_length", true, &c.ffn_dim));
  NS_RETURN_IF_ERROR(read_int(f, p + "context_length", true, &c.context_length));
  NS_RETURN_IF_ERROR(read_int(f, p + "attention.head_count", true, &c.n_heads));
  c.n_kv_heads = c.n_heads;  // no GQA unless stated
  NS_RETURN_IF_ERROR(read_int(f, p + "attention.head_count_kv", false, &c.n_kv_heads));
  if (c.n_heads <= 0) return range_error("n_heads", c.n_heads, 1, kMaxHeads);
  if (f.find(p + "attention.key_length") != nullptr) {
    NS_RETURN_IF_ERROR(read_int(f, p + "attention.key_length", true, &c.head_dim));
  } else {
    if (c.dim % c.n_heads != 0) {
      return invalid_argument("model config: dim = " + std::to_string(c.dim) +
                              " is not a multiple of n_heads = " + std::to_string(c.n_heads) +
                              " (head_dim must be an integer)");
    }
    c.head_dim = c.dim / c.n_heads;
  }
  c.rope_dim = c.head_dim;
  NS_RETURN_IF_ERROR(read_int(f, p + "rope.dimension_count", false, &c.rope_dim));
  NS_RETURN_IF_ERROR(read_float(f, p + "rope.freq_base", &c.rope_theta));
  NS_RETURN_IF_ERROR(read_float(f, p + "attention.layer_norm_rms_epsilon", &c.norm_eps));
  NS_RETURN_IF_ERROR(read_int(f, p + "attention.sliding_window", false, &c.sliding_window));
  NS_RETURN_IF_ERROR(read_gemma_gguf(f, &c));
  if (c.sliding_window >= c.context_length) c.sliding_window = 0;  // a window that never slides
  NS_RETURN_IF_ERROR(read_int(f, p + "expert_count", false, &c.n_experts));
  NS_RETURN_IF_ERROR(read_int(f, p + "expert_used_count", false, &c.n_experts_used));
  c.expert_ffn_dim = c.ffn_dim;  // Mixtral's; qwen3moe names its own
  NS_RETURN_IF_ERROR(read_int(f, p + "expert_feed_forward_length", false, &c.expert_ffn_dim));
  if (const ArchInfo* a = find_arch(c.arch);
      a != nullptr && a->experts == ArchExperts::kNever && c.n_experts > 0) {
    return unimplemented("metadata '" + p + "expert_count' = " + std::to_string(c.n_experts) +
                         ": mixture of experts is not supported for " + c.arch);
  }
  // llama.cpp renormalises the top-k weights of both qwen3moe and Mixtral
  // unless the file says otherwise.
  if (f.find(p + "expert_weights_norm") != nullptr) {
    NS_ASSIGN_OR_RETURN(c.expert_weights_norm, f.get_bool(p + "expert_weights_norm"));
  }

  // Vocabulary: the explicit key, else the tokenizer's token list.
  if (f.find(p + "vocab_size") != nullptr) {
    NS_RETURN_IF_ERROR(read_int(f, p + "vocab_size", true, &c.vocab_size));
  } else {
    NS_ASSIGN_OR_RETURN(const GgufArray* tokens, f.get_array("tokenizer.ggml.tokens"));
    c.vocab_size = static_cast<int64_t>(tokens->items.size());
  }

  // RoPE scaling. Keys when present; llama.cpp's llama3 conversion instead
  // stores the divisors as the rope_freqs.weight tensor.
  RopeScaling& rs = c.rope_scaling;
  if (const GgufValue* v = f.find(p + "rope.scaling.type")) {
    const std::string* type = v->as_string();
    if (type == nullptr) {
      return invalid_argument("metadata '" + p + "rope.scaling.type': expected a string, found " +
                              gguf_type_name(v->type));
    }
    if (*type == "none") {
      rs.type = RopeScaling::Type::kNone;
    } else if (*type == "linear") {
      rs.type = RopeScaling::Type::kLinear;
    } else if (*type == "llama3") {
      rs.type = RopeScaling::Type::kLlama3;
    } else if (*type == "yarn") {
      rs.type = RopeScaling::Type::kYarn;
      rs.truncate = c.arch != "gpt-oss";  // gpt-oss's config.json: truncate false
    } else {
      return unimplemented("metadata '" + p + "rope.scaling.type': scaling '" + type->substr(0, 32) +
                           "' is not supported (none, linear, llama3, yarn)");
    }
  } else if (f.find(p + "rope.scale_linear") != nullptr) {  // older key for linear scaling
    rs.type = RopeScaling::Type::kLinear;
    NS_RETURN_IF_ERROR(read_float(f, p + "rope.scale_linear", &rs.factor));
  }
  NS_RETURN_IF_ERROR(read_float(f, p + "rope.scaling.factor", &rs.factor));
  NS_RETURN_IF_ERROR(read_float(f, p + "rope.scaling.low_freq_factor", &rs.low_freq_factor));
  NS_RETURN_IF_ERROR(read_float(f, p + "rope.scaling.high_freq_factor", &rs.high_freq_factor));
  NS_RETURN_IF_ERROR(
      read_int(f, p + "rope.scaling.original_context_length", false, &rs.original_context_length));
  NS_RETURN_IF_ERROR(read_float(f, p + "rope.scaling.yarn_beta_fast", &rs.beta_fast));
  NS_RETURN_IF_ERROR(read_float(f, p + "rope.scaling.yarn_beta_slow", &rs.beta_slow));
  if (c.arch == "gpt-oss" && c.sliding_window > 0) {
    // llama.cpp's gpt-oss: the even layers slide, the odd ones attend everything.
    c.sliding_layers.assign(static_cast<size_t>(std::clamp<int64_t>(c.n_layers, 0, kMaxLayers)), 0);
    for (size_t l = 0; l < c.sliding_layers.size(); l += 2) c.sliding_layers[l] = 1;
  }
  if (const GgufTensorInfo* t = f.find_tensor("rope_freqs.weight")) {
    if (t->dtype != DType::kF32 || t->shape.size() != 1 || t->shape[0] * 2 != c.rope_dim) {
      return invalid_argument(
          "tensor 'rope_freqs.weight': expected F32 [rope_dim / 2 = " + std::to_string(c.rope_dim / 2) + "]");
    }
    rs.freq_factors_tensor = true;
    if (rs.type == RopeScaling::Type::kLlama3) rs.type = RopeScaling::Type::kNone;  // the tensor encodes it
  }

  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  if (find_arch(c.arch) != nullptr) NS_RETURN_IF_ERROR(apply_arch(c));  // others: refused at load
  NS_RETURN_IF_ERROR(c.validate());

  // The embedding table must match the hyperparameters: GGUF ne = [dim, vocab].
  if (const GgufTensorInfo* emb = f.find_tensor("token_embd.weight")) {
    if (emb->shape.size() != 2 || emb->shape[0] != c.vocab_size || emb->shape[1] != c.dim) {
      std::string shape;
      for (int64_t d : emb->shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      return invalid_argument("tensor 'token_embd.weight': shape [" + shape +
                              "] does not match [vocab_size " + std::to_string(c.vocab_size) + ", dim " +
                              std::to_string(c.dim) + "]");
    }
  }
  return c;
}

const ArchInfo& ModelConfig::arch_info() const {
  if (family != nullptr) return *family;
  const ArchInfo* a = find_arch(arch);
  NS_CHECK(a != nullptr) << "architecture '" << arch << "' is not built";
  return *a;
}

Status check_gguf_supported(const GgufFile& f, const ModelConfig& c) {
  ModelConfig arch_checked = c;
  NS_RETURN_IF_ERROR(apply_arch(arch_checked));
  const std::string p = c.arch + ".";
  // Keys of features this forward does not have; present and not 0, they would change the output.
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    auto v = f.get_float(p + key);
    if (v.ok() && *v != 0.0 && !arch_checked.family->logit_softcaps) {
      return unimplemented("metadata '" + p + key + "': logit soft-capping is not supported for " + c.arch);
    }
  }
  for (const char* key : {"expert_shared_count", "expert_shared_feed_forward_length",
                          "leading_dense_block_count", "expert_group_count"}) {
    auto n = f.get_int(p + key);
    if (n.ok() && *n > 0) {
      return unimplemented("metadata '" + p + key + "' = " + std::to_string(*n) +
                           ": this mixture of experts is not supported (only routed experts in every layer)");
    }
  }
  if (auto g = f.get_int(p + "expert_gating_func"); g.ok() && *g != 1) {
    return unimplemented("metadata '" + p + "expert_gating_func' = " + std::to_string(*g) +
                         ": only softmax gating (1) is supported");
  }
  if (auto s = f.get_float(p + "expert_weights_scale"); s.ok() && *s != 1.0 && *s != 0.0) {
    return unimplemented("metadata '" + p + "expert_weights_scale': scaled expert weights are not supported");
  }
  if (c.arch != "llama" && c.rope_dim != c.head_dim) {
    return unimplemented("metadata '" + p + "rope.dimension_count' = " + std::to_string(c.rope_dim) +
                         ": partial rotary embeddings (rope_dim below head_dim " +
                         std::to_string(c.head_dim) + ") are not supported for " + c.arch);
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    if (arch_uses_tensor(c, t.name)) continue;
    if (t.name == "rope_factors_long.weight" || t.name == "rope_factors_short.weight") {
      return unimplemented("tensor '" + t.name +
                           "': long-context rope scaling (longrope / su) is not supported");
    }
    return unimplemented("tensor '" + t.name.substr(0, 128) + "' is not used by the " + c.arch +
                         " forward (" + std::to_string(c.n_layers) +
                         " layers); a model that needs it is not supported");
  }
  return Status::ok_status();
}

}  // namespace nanoserve
