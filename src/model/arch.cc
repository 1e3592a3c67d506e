#include "model/arch.h"

#include <charconv>

#include "model/config.h"

namespace nanoserve {

namespace {

constexpr ArchInfo kArchs[] = {
    {.name = "llama", .experts = ArchExperts::kOptional},
    {.name = "qwen2", .qkv_bias = true, .gguf_rope_pairs = RopePairs::kHalves},
    {.name = "qwen3", .qk_norm = true, .gguf_rope_pairs = RopePairs::kHalves},
    {.name = "phi3", .fused_qkv_gate_up = true, .gguf_rope_pairs = RopePairs::kHalves},
    {.name = "qwen3moe",
     .qk_norm = true,
     .gguf_rope_pairs = RopePairs::kHalves,
     .experts = ArchExperts::kAlways},
    {.name = "gemma2",
     .gguf_rope_pairs = RopePairs::kHalves,
     .hidden_act = "gelu_pytorch_tanh",
     .norm_plus_one = true,
     .sandwich_norms = true,
     .scaled_embedding = true,
     .logit_softcaps = true},
    {.name = "gemma3",
     .qk_norm = true,
     .gguf_rope_pairs = RopePairs::kHalves,
     .hidden_act = "gelu_pytorch_tanh",
     .norm_plus_one = true,
     .sandwich_norms = true,
     .scaled_embedding = true,
     .logit_softcaps = true},
    {.name = "gpt-oss",
     .qkv_bias = true,
     .gguf_rope_pairs = RopePairs::kHalves,
     .experts = ArchExperts::kAlways,
     .o_bias = true,
     .attn_sinks = true,
     .oss_experts = true,
     .ffn_norm_name = "post_attention_norm.weight"},
};

}  // namespace

const ArchInfo* find_arch(std::string_view name) {
  for (const ArchInfo& a : kArchs) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

std::string built_arch_names() {
  std::string s;
  for (const ArchInfo& a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

Status apply_arch(ModelConfig& c) {
  const ArchInfo* a = find_arch(c.arch);
  if (a == nullptr) {
    return unimplemented("architecture '" + c.arch.substr(0, 64) +
                         "' is not supported (built: " + built_arch_names() + ")");
  }
  c.family = a;
  return Status::ok_status();
}

std::vector<std::string> arch_layer_tensors(const ModelConfig& config) {
  const ArchInfo& c = config.arch_info();
  std::vector<std::string> names = {"attn_norm.weight"};
  if (c.fused_qkv_gate_up) {
    names.push_back("attn_qkv.weight");
  } else {
    for (const char* n : {"attn_q.weight", "attn_k.weight", "attn_v.weight"}) names.push_back(n);
  }
  if (c.qkv_bias) {
    for (const char* n : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) names.push_back(n);
  }
  if (c.qk_norm) {
    names.push_back("attn_q_norm.weight");
    names.push_back("attn_k_norm.weight");
  }
  names.push_back("attn_output.weight");
  if (c.o_bias) names.push_back("attn_output.bias");
  if (c.attn_sinks) names.push_back("attn_sinks.weight");
  if (c.sandwich_norms) names.push_back("post_attention_norm.weight");
  names.push_back(c.ffn_norm_name);
  if (config.n_experts > 0) {
    for (const char* n :
         {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}) {
      names.push_back(n);
    }
    if (c.oss_experts) {
      for (const char* n :
           {"ffn_gate_inp.bias", "ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"})
        names.push_back(n);
    }
    return names;
  }
  if (c.fused_qkv_gate_up) {
    names.push_back("ffn_up.weight");  // [gate; up]
  } else {
    names.push_back("ffn_gate.weight");
    names.push_back("ffn_up.weight");
  }
  names.push_back("ffn_down.weight");
  if (c.sandwich_norms) names.push_back("post_ffw_norm.weight");
  return names;
}

std::vector<std::string> arch_expert_tensors(int64_t expert) {
  const std::string e = std::to_string(expert);
  return {"ffn_gate." + e + ".weight", "ffn_up." + e + ".weight", "ffn_down." + e + ".weight"};
}

namespace {

// "ffn_gate.7.weight" -> 7 when 0 <= 7 < n_experts (one spelling per expert); else -1.
int64_t expert_of(std::string_view rest, int64_t n_experts) {
  for (std::string_view stem : {"ffn_gate.", "ffn_up.", "ffn_down."}) {
    if (!rest.starts_with(stem)) continue;
    std::string_view tail = rest.substr(stem.size());
    const size_t dot = tail.find('.');
    if (dot == std::string_view::npos || tail.substr(dot) != ".weight" || dot == 0 ||
        (dot > 1 && tail[0] == '0'))
      return -1;
    int64_t e = -1;
    auto [p, ec] = std::from_chars(tail.data(), tail.data() + dot, e);
    if (ec != std::errc() || p != tail.data() + dot || e < 0 || e >= n_experts) return -1;
    return e;
  }
  return -1;
}

}  // namespace

bool arch_uses_tensor(const ModelConfig& c, std::string_view name) {
  if (name == "token_embd.weight" || name == "output_norm.weight" || name == "output.weight" ||
      name == "rope_freqs.weight") {
    return true;
  }
  if (!name.starts_with("blk.")) return false;
  name.remove_prefix(4);
  const size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 6) return false;
  int64_t layer = -1;
  auto [p, ec] = std::from_chars(name.data(), name.data() + dot, layer);
  if (ec != std::errc() || p != name.data() + dot || layer < 0 || layer >= c.n_layers) return false;
  const std::string_view rest = name.substr(dot + 1);
  for (const std::string& n : arch_layer_tensors(c)) {
    if (rest == n) return true;
  }
  return c.n_experts > 0 && expert_of(rest, c.n_experts) >= 0;
}

}  // namespace nanoserve
