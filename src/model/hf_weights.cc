#include "model/hf_weights.h"

#include <charconv>
#include <cstring>
#include <unordered_set>

#include "core/check.h"

namespace nanoserve {

namespace {

struct LayerName {
  const char* gguf;
  const char* hf;
};
constexpr LayerName kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},      {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},       {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

// "blk.12.attn_q.weight" -> (12, "attn_q.weight").
bool split_layer(std::string_view name, std::string_view prefix, int64_t* layer, std::string_view* rest) {
  if (name.substr(0, prefix.size()) != prefix) return false;
  name.remove_prefix(prefix.size());
  const size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 6) return false;
  auto [p, ec] = std::from_chars(name.data(), name.data() + dot, *layer);
  if (ec != std::errc() || p != name.data() + dot || *layer < 0) return false;
  if (dot > 1 && name[0] == '0') return false;  // one spelling per layer
  *rest = name.substr(dot + 1);
  return true;
}

}  // namespace

std::optional<std::string> hf_llama_tensor_name(std::string_view g) {
  if (g == "token_embd.weight") return "model.embed_tokens.weight";
  if (g == "output_norm.weight") return "model.norm.weight";
  if (g == "output.weight") return "lm_head.weight";
  int64_t layer = 0;
  std::string_view rest;
  if (!split_layer(g, "blk.", &layer, &rest)) return std::nullopt;
  for (const LayerName& n : kLayerNames) {
    if (rest == n.gguf) return "model.layers." + std::to_string(layer) + "." + n.hf;
  }
  return std::nullopt;
}

Tensor permute_rope_rows(const Tensor& w, int64_t n_heads, int64_t hd) {
  NS_CHECK(w.ndim() == 2 && w.dim(0) == n_heads * hd && hd % 2 == 0 && !dtype_info(w.dtype()).quantized)
      << "permute_rope_rows: " << w.shape_string();
  const size_t row_bytes = static_cast<size_t>(dtype_bytes(w.dtype(), w.dim(1)));
  Tensor out = Tensor::empty(w.dtype(), w.shape());
  const auto* src = static_cast<const uint8_t*>(w.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  const int64_t half = hd / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t to = h * hd + 2 * i + j, from = h * hd + j * half + i;
        std::memcpy(dst + to * row_bytes, src + from * row_bytes, row_bytes);
      }
    }
  }
  return out;
}

StatusOr<std::shared_ptr<const HfLlamaTensors>> HfLlamaTensors::create(
    std::shared_ptr<const SafetensorsCheckpoint> ckpt, const ModelConfig& config) {
  std::unordered_set<std::string> used = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
  for (int64_t l = 0; l < config.n_layers; ++l) {
    for (const LayerName& n : kLayerNames) used.insert("model.layers." + std::to_string(l) + "." + n.hf);
  }
  for (const std::string& name : ckpt->names()) {
    if (used.count(name) != 0) continue;
    // Old checkpoints store the rotary table, which is recomputed from the config.
    if (name.ends_with(".rotary_emb.inv_freq")) continue;
    return invalid_argument(ckpt->folder() + ": tensor '" + name.substr(0, 200) +
                            "' is not one LlamaForCausalLM with this config.json uses");
  }
  return std::shared_ptr<const HfLlamaTensors>(new HfLlamaTensors(std::move(ckpt), config));
}

std::string HfLlamaTensors::display_name(std::string_view name) const {
  auto hf = hf_llama_tensor_name(name);
  return hf ? *hf + " (" + std::string(name) + ")" : std::string(name);
}

bool HfLlamaTensors::contains(std::string_view name) const {
  if (name == "output.weight" && config_.tied_embeddings) return false;
  auto hf = hf_llama_tensor_name(name);
  return hf && ckpt_->find_tensor(*hf) != nullptr;
}

StatusOr<Tensor> HfLlamaTensors::tensor(std::string_view name) const {
  auto hf = hf_llama_tensor_name(name);
  if (!hf || (name == "output.weight" && config_.tied_embeddings)) {
    return not_found(ckpt_->folder() + ": no tensor for '" + std::string(name.substr(0, 200)) + "'");
  }
  NS_ASSIGN_OR_RETURN(Tensor t, ckpt_->tensor(*hf));
  const bool q = name.ends_with(".attn_q.weight"), k = name.ends_with(".attn_k.weight");
  if (!q && !k) return t;
  const int64_t heads = q ? config_.n_heads : config_.n_kv_heads, hd = config_.head_dim;
  if (t.ndim() != 2 || t.dim(0) != heads * hd || hd % 2 != 0 || config_.rope_dim != hd) {
    return invalid_argument(ckpt_->folder() + ": tensor '" + *hf + "' has shape " + t.shape_string() +
                            ", the config implies [" + std::to_string(heads * hd) + ", " +
                            std::to_string(config_.dim) + "]");
  }
  return permute_rope_rows(t, heads, hd);
}

}  // namespace nanoserve
