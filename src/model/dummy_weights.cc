#include "model/dummy_weights.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

namespace nanoserve {

namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return h;
}

}  // namespace

std::string DummyTensors::describe() const {
  return "dummy " + (shape_name_.empty() ? std::string("weights") : shape_name_) + " (seed " +
         std::to_string(seed_) + ")";
}

std::vector<int64_t> DummyTensors::shape_of(std::string_view name) const {
  const ModelConfig& c = config_;
  const int64_t q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
  if (name == "token_embd.weight") return {c.vocab_size, c.dim};
  if (name == "output.weight")
    return c.tied_embeddings ? std::vector<int64_t>{} : std::vector<int64_t>{c.vocab_size, c.dim};
  if (name == "output_norm.weight") return {c.dim};
  if (name.substr(0, 4) != "blk.") return {};
  name.remove_prefix(4);
  const size_t dot = name.find('.');
  int64_t layer = -1;
  if (dot == std::string_view::npos) return {};
  auto [p, ec] = std::from_chars(name.data(), name.data() + dot, layer);
  if (ec != std::errc() || p != name.data() + dot || layer < 0 || layer >= c.n_layers) return {};
  const std::string_view rest = name.substr(dot + 1);
  const ArchInfo& family = c.arch_info();
  if (rest == "attn_norm.weight" || rest == family.ffn_norm_name) return {c.dim};
  if (rest == "post_attention_norm.weight" || rest == "post_ffw_norm.weight")  // gemma's sandwich norms
    return family.sandwich_norms ? std::vector<int64_t>{c.dim} : std::vector<int64_t>{};
  if (family.qkv_bias && rest == "attn_q.bias") return {q};
  if (family.qkv_bias && (rest == "attn_k.bias" || rest == "attn_v.bias")) return {kv};
  if (family.o_bias && rest == "attn_output.bias") return {c.dim};
  if (family.attn_sinks && rest == "attn_sinks.weight") return {c.n_heads};
  if (family.oss_experts && c.n_experts > 0) {
    if (rest == "ffn_gate_inp.bias") return {c.n_experts};
    if (rest == "ffn_gate_exps.bias" || rest == "ffn_up_exps.bias") return {c.n_experts, c.expert_ffn_dim};
    if (rest == "ffn_down_exps.bias") return {c.n_experts, c.dim};
  }
  if (rest == "attn_q.weight") return {q, c.dim};
  if (rest == "attn_k.weight" || rest == "attn_v.weight") return {kv, c.dim};
  if (rest == "attn_output.weight") return {c.dim, q};
  if (rest == "attn_q_norm.weight" || rest == "attn_k_norm.weight") {
    return c.arch_info().qk_norm ? std::vector<int64_t>{c.head_dim} : std::vector<int64_t>{};
  }
  if (c.n_experts > 0) {
    if (rest == "ffn_gate_inp.weight") return {c.n_experts, c.dim};
    if (rest == "ffn_gate_exps.weight" || rest == "ffn_up_exps.weight")
      return {c.n_experts, c.expert_ffn_dim, c.dim};
    if (rest == "ffn_down_exps.weight") return {c.n_experts, c.dim, c.expert_ffn_dim};
    return {};
  }
  if (rest == "ffn_gate.weight" || rest == "ffn_up.weight") return {c.ffn_dim, c.dim};
  if (rest == "ffn_down.weight") return {c.dim, c.ffn_dim};
  return {};
}

bool DummyTensors::contains(std::string_view name) const {
  return !shape_of(name).empty();
}

StatusOr<Tensor> DummyTensors::tensor(std::string_view name) const {
  std::vector<int64_t> shape = shape_of(name);
  if (shape.empty()) return not_found("dummy weights: no tensor '" + std::string(name.substr(0, 200)) + "'");
  Tensor t = Tensor::empty(DType::kF32, shape);
  float* v = t.data_as<float>();
  const int64_t n = t.numel();
  if (shape.size() == 1 || name.ends_with(".bias")) {
    // Norm weights 1; biases and attention sinks 0.
    const bool norm = name.find("norm") != std::string_view::npos;
    for (int64_t i = 0; i < n; ++i) v[i] = norm ? 1.0f : 0.0f;
    return t;
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.back()));
  uint64_t state = seed_ ^ fnv1a(name);
  for (int64_t i = 0; i < n; i += 2) {
    const uint64_t r = splitmix64(state);
    // Two values per draw: 32 random bits each, mapped onto [-scale, scale).
    v[i] = (static_cast<float>(static_cast<uint32_t>(r)) * 0x1p-31f - 1.0f) * scale;
    if (i + 1 < n) v[i + 1] = (static_cast<float>(static_cast<uint32_t>(r >> 32)) * 0x1p-31f - 1.0f) * scale;
  }
  return t;
}

int64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream s(line.substr(13));
      int64_t kib = -1;
      s >> kib;
      return kib < 0 ? -1 : kib * 1024;
    }
  }
  return -1;
}

}  // namespace nanoserve
