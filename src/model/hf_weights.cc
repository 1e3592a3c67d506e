#include "model/hf_weights.h"

#include <algorithm>
#include <charconv>
#include <unordered_set>

#include "model/arch.h"
#include "model/hf_gptoss.h"
#include "model/rope_layout.h"
#include "ops/dequantize/dequantize.h"

namespace nanoserve {

namespace {

// The HF name of a per-layer tensor, after "model.layers.N.".
std::optional<std::string_view> hf_layer_name(const ModelConfig& c, std::string_view g) {
  struct Name {
    std::string_view gguf, hf;
  };
  static constexpr Name kNames[] = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"attn_qkv.weight", "self_attn.qkv_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
  };
  if (g == "ffn_up.weight")
    return c.arch_info().fused_qkv_gate_up ? "mlp.gate_up_proj.weight" : "mlp.up_proj.weight";
  if (c.arch_info().sandwich_norms) {  // Gemma: a norm on each side of each block
    if (g == "post_attention_norm.weight") return "post_attention_layernorm.weight";
    if (g == "ffn_norm.weight") return "pre_feedforward_layernorm.weight";
    if (g == "post_ffw_norm.weight") return "post_feedforward_layernorm.weight";
  }
  if (c.arch_info().oss_experts) {  // gpt-oss
    if (g == "attn_output.bias") return "self_attn.o_proj.bias";
    if (g == "attn_sinks.weight") return "self_attn.sinks";
    if (g == "post_attention_norm.weight") return "post_attention_layernorm.weight";
    if (g == "ffn_gate_inp.weight") return "mlp.router.weight";
    if (g == "ffn_gate_inp.bias") return "mlp.router.bias";
  }
  if (g == "ffn_gate_inp.weight")
    return c.arch == "qwen3moe" ? "mlp.gate.weight" : "block_sparse_moe.gate.weight";
  for (const Name& n : kNames) {
    if (g == n.gguf) return n.hf;
  }
  return std::nullopt;
}

// 1 + w in f32, into owned memory: the weight of a (1 + w) RMSNorm as
// transformers applies it (w.float() + 1) and llama.cpp's converter stores it.
Tensor plus_one(const Tensor& w) {
  Tensor out = Tensor::empty(DType::kF32, w.shape());
  dequantize_row(w.dtype(), w.data(), out.data_as<float>(), w.numel());
  float* o = out.data_as<float>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] += 1.0f;
  return out;
}

// "blk.12.attn_q.weight" -> (12, "attn_q.weight").
bool split_layer(std::string_view name, int64_t* layer, std::string_view* rest) {
  if (!name.starts_with("blk.")) return false;
  name.remove_prefix(4);
  const size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 6) return false;
  auto [p, ec] = std::from_chars(name.data(), name.data() + dot, *layer);
  if (ec != std::errc() || p != name.data() + dot || *layer < 0) return false;
  if (dot > 1 && name[0] == '0') return false;  // one spelling per layer
  *rest = name.substr(dot + 1);
  return true;
}

// An expert's tensor, "ffn_gate.E.weight" -> Qwen3-MoE's
// "mlp.experts.E.gate_proj.weight" or Mixtral's "block_sparse_moe.experts.E.w1.weight".
std::optional<std::string> hf_expert_name(const ModelConfig& c, std::string_view g) {
  struct Name {
    std::string_view stem, qwen, mixtral;
  };
  static constexpr Name kNames[] = {
      {"ffn_gate.", "gate_proj", "w1"}, {"ffn_up.", "up_proj", "w3"}, {"ffn_down.", "down_proj", "w2"}};
  for (const Name& n : kNames) {
    if (!g.starts_with(n.stem) || !g.ends_with(".weight")) continue;
    const std::string_view e = g.substr(n.stem.size(), g.size() - n.stem.size() - 7);
    int64_t expert = -1;
    auto [p, ec] = std::from_chars(e.data(), e.data() + e.size(), expert);
    if (e.empty() || ec != std::errc() || p != e.data() + e.size() || expert >= c.n_experts ||
        (e.size() > 1 && e[0] == '0')) {
      return std::nullopt;
    }
    const bool qwen = c.arch == "qwen3moe";
    return std::string(qwen ? "mlp.experts." : "block_sparse_moe.experts.") + std::string(e) + "." +
           std::string(qwen ? n.qwen : n.mixtral) + ".weight";
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> hf_tensor_name(const ModelConfig& c, std::string_view g) {
  if (g == "token_embd.weight") return "model.embed_tokens.weight";
  if (g == "output_norm.weight") return "model.norm.weight";
  if (g == "output.weight") return "lm_head.weight";
  int64_t layer = 0;
  std::string_view rest;
  if (!split_layer(g, &layer, &rest)) return std::nullopt;
  if (c.n_layers > 0 && layer >= c.n_layers) return std::nullopt;
  if (c.n_experts > 0) {
    if (auto e = hf_expert_name(c, rest)) return "model.layers." + std::to_string(layer) + "." + *e;
  }
  const std::vector<std::string> names = arch_layer_tensors(c);  // only the architecture's own
  if (std::find(names.begin(), names.end(), rest) == names.end()) return std::nullopt;
  // gpt-oss's stacked experts are built from several tensors (model/hf_gptoss.h): named by their module.
  if (c.arch_info().oss_experts && gptoss_expert_tensor_name(rest))
    return "model.layers." + std::to_string(layer) + ".mlp.experts";
  auto hf = hf_layer_name(c, rest);
  if (!hf) return std::nullopt;
  return "model.layers." + std::to_string(layer) + "." + std::string(*hf);
}

std::optional<std::string> hf_llama_tensor_name(std::string_view g) {
  ModelConfig llama;
  llama.arch = "llama";
  return hf_tensor_name(llama, g);
}

StatusOr<std::shared_ptr<const HfLlamaTensors>> HfLlamaTensors::create(
    std::shared_ptr<const SafetensorsCheckpoint> ckpt, const ModelConfig& config, const HfFp8& fp8) {
  // A multimodal Gemma 3's text model and what sits beside it.
  std::string prefix = "model.";
  std::vector<std::string> skipped;
  if (config.arch == "gemma3") {
    for (const char* p : {"model.language_model.", "language_model.model."}) {
      if (ckpt->find_tensor(std::string(p) + "embed_tokens.weight") != nullptr) prefix = p;
    }
    if (prefix != "model.") {
      skipped = {"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."};
    }
  }
  std::shared_ptr<const HfLlamaTensors> t(new HfLlamaTensors(std::move(ckpt), config, prefix, fp8, false));
  std::unordered_set<std::string> used;
  for (const char* g : {"token_embd.weight", "output_norm.weight", "output.weight"}) used.insert(*t->stored_name(g));
  const std::vector<std::string> layer_names = arch_layer_tensors(config);
  for (int64_t l = 0; l < config.n_layers; ++l) {
    for (const std::string& n : layer_names) {
      if (auto hf = t->stored_name("blk." + std::to_string(l) + "." + n)) used.insert(*hf);
    }
    if (config.arch_info().oss_experts) {
      for (std::string& n : gptoss_expert_sources(*t->ckpt_, "model.layers." + std::to_string(l) + "."))
        used.insert(std::move(n));
      continue;
    }
    for (int64_t e = 0; e < config.n_experts; ++e) {
      for (const std::string& n : arch_expert_tensors(e)) {
        if (auto hf = hf_tensor_name(config, "blk." + std::to_string(l) + "." + n)) used.insert(*hf);
      }
    }
  }
  // An FP8 weight's scales are read with it.
  std::vector<std::string> scales;
  for (const std::string& name : used) {
    const SafetensorsTensorInfo* info = t->ckpt_->find_tensor(name);
    if (info == nullptr || info->dtype != DType::kF8E4M3) continue;
    if (!fp8.any()) {
      return invalid_argument(t->ckpt_->folder() + ": tensor '" + name.substr(0, 200) +
                              "' is F8_E4M3 but config.json has no quantization_config to scale it");
    }
    if (name.ends_with(".weight")) scales.push_back(name.substr(0, name.size() - 6) + fp8.scale_suffix());
  }
  used.insert(scales.begin(), scales.end());
  for (const std::string& name : t->ckpt_->names()) {
    if (used.count(name) != 0) continue;
    if (std::any_of(skipped.begin(), skipped.end(), [&](const std::string& p) { return name.starts_with(p); }))
      continue;
    // Old checkpoints store the rotary table, which is recomputed from the config.
    if (name.ends_with(".rotary_emb.inv_freq")) continue;
    return invalid_argument(t->ckpt_->folder() + ": tensor '" + name.substr(0, 200) + "' is not one the " +
                            config.arch + " forward with this config.json uses");
  }
  return t;
}

std::optional<std::string> HfLlamaTensors::stored_name(std::string_view name) const {
  auto hf = hf_tensor_name(config_, name);
  if (!hf || text_prefix_ == "model.") return hf;
  if (hf->starts_with("model.")) return text_prefix_ + hf->substr(6);
  // lm_head.weight: beside the text model in the older layout.
  return text_prefix_ == "language_model.model." ? "language_model." + *hf : *hf;
}

std::string HfLlamaTensors::display_name(std::string_view name) const {
  auto hf = stored_name(name);
  return hf ? *hf + " (" + std::string(name) + ")" : std::string(name);
}

bool HfLlamaTensors::contains(std::string_view name) const {
  if (name == "output.weight" && config_.tied_embeddings) return false;
  auto hf = stored_name(name);
  if (hf && hf->ends_with(".mlp.experts")) return true;  // gpt-oss's, built by tensor()
  return hf && ckpt_->find_tensor(*hf) != nullptr;
}

StatusOr<Tensor> HfLlamaTensors::tensor(std::string_view name) const {
  auto hf = stored_name(name);
  if (!hf || (name == "output.weight" && config_.tied_embeddings)) {
    return not_found(ckpt_->folder() + ": no tensor for '" + std::string(name.substr(0, 200)) + "'");
  }
  if (hf->ends_with(".mlp.experts")) {
    const std::string layer_prefix = hf->substr(0, hf->size() - 11);  // "model.layers.N."
    return gptoss_expert_tensor(*ckpt_, config_, layer_prefix, name.substr(name.find('.', 4) + 1));
  }
  const SafetensorsTensorInfo* info = ckpt_->find_tensor(*hf);
  if (info != nullptr && info->dtype == DType::kF8E4M3) return fp8_tensor(name, *hf);
  NS_ASSIGN_OR_RETURN(Tensor t, ckpt_->tensor(*hf));
  if (config_.arch_info().norm_plus_one && name.ends_with("norm.weight") &&
      (t.dtype() == DType::kF32 || t.dtype() == DType::kF16 || t.dtype() == DType::kBF16)) {
    t = plus_one(t);  // another dtype is refused by the loader, naming the tensor
  }
  return rope_rows_to_pairs(config_, name, std::move(t), ckpt_->folder() + ": " + *hf);
}

bool HfLlamaTensors::row_scaled_linear(std::string_view name) {
  const size_t dot = name.starts_with("blk.") ? name.find('.', 4) : std::string_view::npos;
  if (dot == std::string_view::npos) return false;
  const std::string_view rest = name.substr(dot + 1);
  for (const char* n : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_qkv.weight",
                        "attn_output.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}) {
    if (rest == n) return true;
  }
  return false;
}

StatusOr<Tensor> HfLlamaTensors::fp8_tensor(std::string_view name, const std::string& hf) const {
  NS_ASSIGN_OR_RETURN(Fp8Weight f, read_fp8_weight(*ckpt_, fp8_, hf));
  const std::string shown = ckpt_->folder() + ": " + hf;
  if (fp8_rows_ && f.kind != Fp8Scales::kBlock && row_scaled_linear(name)) {
    return rope_rows_to_pairs(config_, name, f.w, shown);
  }
  // Dequantized before the rows move, so that a block's scale follows its rows.
  return rope_rows_to_pairs(config_, name, dequantize_fp8(f, fp8_rows_ ? DType::kBF16 : DType::kF32), shown);
}

StatusOr<Tensor> HfLlamaTensors::row_scales(std::string_view name) const {
  auto hf = stored_name(name);
  const SafetensorsTensorInfo* info = hf ? ckpt_->find_tensor(*hf) : nullptr;
  if (!fp8_rows_ || info == nullptr || info->dtype != DType::kF8E4M3 || !row_scaled_linear(name)) {
    return TensorSource::row_scales(name);
  }
  NS_ASSIGN_OR_RETURN(Fp8Weight f, read_fp8_weight(*ckpt_, fp8_, *hf));
  if (f.kind == Fp8Scales::kBlock) return TensorSource::row_scales(name);
  // [N] scales, permuted as the rows they scale.
  return rope_rows_to_pairs(config_, name, f.scale, ckpt_->folder() + ": " + *hf + " (scales)");
}

std::shared_ptr<const TensorSource> HfLlamaTensors::with_fp8_rows() const {
  if (!fp8_.any()) return nullptr;
  return std::shared_ptr<const HfLlamaTensors>(new HfLlamaTensors(ckpt_, config_, text_prefix_, fp8_, true));
}

}  // namespace nanoserve
