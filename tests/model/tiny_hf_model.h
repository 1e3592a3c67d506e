#pragma once
// Test helper: a tiny random LlamaForCausalLM written as a Hugging Face folder
// (config.json, model.safetensors, tokenizer.json), and a plain scalar forward
// that follows HF's modeling_llama over the HF-layout weights: rotate_half
// RoPE on the pairs (i, i + head_dim/2), GQA by kv head h / n_rep. It is the
// oracle for the HF loader's name map and q/k permutation.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "io/safetensors_builder.h"
#include "model/config.h"
#include "ops/rope/rope_freqs.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace nanoserve::testing {

struct TinyHf {
  ModelConfig config;
  std::map<std::string, std::vector<float>> w;  // HF name -> row-major values
  std::map<std::string, std::vector<int64_t>> shape;
};

// 2 layers, dim 64, 4 heads / 2 kv heads of 16, ffn 96, vocab 300, llama3
// rope scaling with a short original context so that all three bands occur.
inline TinyHf make_tiny_hf(bool tied, uint32_t seed = 1) {
  TinyHf m;
  ModelConfig& c = m.config;
  c.arch = "llama";
  c.n_layers = 2;
  c.dim = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.rope_dim = 16;
  c.ffn_dim = 96;
  c.vocab_size = 300;
  c.context_length = 256;
  c.rope_theta = 10000.0f;
  c.norm_eps = 1e-5f;
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = 8.0f;
  c.rope_scaling.low_freq_factor = 1.0f;
  c.rope_scaling.high_freq_factor = 4.0f;
  c.rope_scaling.original_context_length = 32;
  c.tied_embeddings = tied;
  std::mt19937 rng(seed);
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float mean = 0.0f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::normal_distribution<float> dist(mean, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = dist(rng);
    m.w[name] = std::move(v);
    m.shape[name] = std::move(shape);
  };
  const int64_t q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
  add("model.embed_tokens.weight", {c.vocab_size, c.dim}, 1.0f);
  add("model.norm.weight", {c.dim}, 0.1f, 1.0f);
  if (!tied) add("lm_head.weight", {c.vocab_size, c.dim}, 0.125f);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {c.dim}, 0.1f, 1.0f);
    add(p + "post_attention_layernorm.weight", {c.dim}, 0.1f, 1.0f);
    add(p + "self_attn.q_proj.weight", {q, c.dim}, 0.25f);
    add(p + "self_attn.k_proj.weight", {kv, c.dim}, 0.25f);
    add(p + "self_attn.v_proj.weight", {kv, c.dim}, 0.125f);
    add(p + "self_attn.o_proj.weight", {c.dim, q}, 0.125f);
    add(p + "mlp.gate_proj.weight", {c.ffn_dim, c.dim}, 0.125f);
    add(p + "mlp.up_proj.weight", {c.ffn_dim, c.dim}, 0.125f);
    add(p + "mlp.down_proj.weight", {c.dim, c.ffn_dim}, 0.1f);
  }
  return m;
}

inline nlohmann::json tiny_config_json(const TinyHf& m) {
  const ModelConfig& c = m.config;
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", c.dim},
          {"num_hidden_layers", c.n_layers},
          {"num_attention_heads", c.n_heads},
          {"num_key_value_heads", c.n_kv_heads},
          {"intermediate_size", c.ffn_dim},
          {"vocab_size", c.vocab_size},
          {"max_position_embeddings", c.context_length},
          {"rope_theta", c.rope_theta},
          {"rms_norm_eps", c.norm_eps},
          {"rope_scaling",
           {{"rope_type", "llama3"},
            {"factor", c.rope_scaling.factor},
            {"low_freq_factor", c.rope_scaling.low_freq_factor},
            {"high_freq_factor", c.rope_scaling.high_freq_factor},
            {"original_max_position_embeddings", c.rope_scaling.original_context_length}}},
          {"tie_word_embeddings", c.tied_embeddings},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"bos_token_id", 256},
          {"eos_token_id", {256, 257}},
          {"torch_dtype", "float32"}};
}

// A byte-level BPE tokenizer.json: the 256 byte characters (ids 0..255), two
// special tokens and merges "h e" -> "he", "l l" -> "ll", "he ll" -> "hell".
inline nlohmann::json tiny_tokenizer_json(bool pair_merges = true) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8::append(ch, byte_level::byte_to_code_point(static_cast<uint8_t>(b)));
    vocab[ch] = b;
  }
  vocab["he"] = 258;
  vocab["ll"] = 259;
  vocab["hell"] = 260;
  nlohmann::json merges = nlohmann::json::array();
  for (auto [a, b] : {std::pair{"h", "e"}, std::pair{"l", "l"}, std::pair{"he", "ll"}}) {
    if (pair_merges) {
      merges.push_back({a, b});
    } else {
      merges.push_back(std::string(a) + " " + b);
    }
  }
  auto added = [](int id, const char* text, bool special) {
    return nlohmann::json{{"id", id},        {"content", text},     {"single_word", false}, {"lstrip", false},
                          {"rstrip", false}, {"normalized", false}, {"special", special}};
  };
  return {{"version", "1.0"},
          {"added_tokens", {added(256, "<|begin|>", true), added(257, "<|end|>", true)}},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"post_processor",
           {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
          {"decoder",
           {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

// Writes config.json, model.safetensors (f32, or `dtype` "BF16") and tokenizer.json into dir.
inline void write_tiny_hf_folder(const TinyHf& m, const std::filesystem::path& dir,
                                 const std::string& dtype = "F32") {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << tiny_config_json(m).dump(2);
  std::ofstream(dir / "tokenizer.json") << tiny_tokenizer_json().dump();
  SafetensorsBuilder b;
  b.metadata = "{\"format\":\"pt\"}";
  for (const auto& [name, v] : m.w) {
    std::string shape = "[";
    for (size_t i = 0; i < m.shape.at(name).size(); ++i) {
      if (i > 0) shape += ",";
      shape += std::to_string(m.shape.at(name)[i]);
    }
    shape += "]";
    if (dtype == "BF16") {
      std::vector<uint8_t> bytes(v.size() * 2);
      for (size_t i = 0; i < v.size(); ++i) {
        uint32_t u;
        std::memcpy(&u, &v[i], 4);
        const uint16_t h = static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
        std::memcpy(&bytes[2 * i], &h, 2);
      }
      b.tensor(name, "BF16", shape, bytes);
    } else {
      b.tensor(name, "F32", shape, f32_le(v));
    }
  }
  const auto bytes = b.build();
  std::ofstream(dir / "model.safetensors", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// HF's LlamaForCausalLM forward in plain double-accumulated loops: logits of
// every position of `tokens` ([T][vocab]).
inline std::vector<std::vector<float>> hf_reference_logits(const TinyHf& m,
                                                           const std::vector<int32_t>& tokens) {
  const ModelConfig& c = m.config;
  const int64_t T = static_cast<int64_t>(tokens.size()), D = c.dim, hd = c.head_dim, H = c.n_heads,
                KV = c.n_kv_heads, F = c.ffn_dim, half = hd / 2;
  const std::vector<float> inv = rope_inv_freqs(c.rope_dim, c.rope_theta, c.rope_scaling);
  auto W = [&](const std::string& n) -> const std::vector<float>& { return m.w.at(n); };
  auto linear = [](const std::vector<float>& w, const std::vector<float>& x, int64_t out, int64_t in) {
    std::vector<float> y(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t i = 0; i < in; ++i) s += static_cast<double>(w[o * in + i]) * x[i];
      y[o] = static_cast<float>(s);
    }
    return y;
  };
  auto rmsnorm = [&](const std::vector<float>& x, const std::vector<float>& g) {
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + c.norm_eps);
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(x[i] * r * g[i]);
    return y;
  };
  auto rotate = [&](std::vector<float>& v, int64_t heads, int64_t pos) {  // rotate_half
    for (int64_t h = 0; h < heads; ++h) {
      float* x = v.data() + h * hd;
      for (int64_t i = 0; i < half; ++i) {
        const double a = static_cast<double>(static_cast<float>(pos) * inv[i]);
        const double x1 = x[i], x2 = x[i + half];
        x[i] = static_cast<float>(x1 * std::cos(a) - x2 * std::sin(a));
        x[i + half] = static_cast<float>(x2 * std::cos(a) + x1 * std::sin(a));
      }
    }
  };
  std::vector<std::vector<float>> x(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    x[t].assign(W("model.embed_tokens.weight").begin() + tokens[t] * D,
                W("model.embed_tokens.weight").begin() + (tokens[t] + 1) * D);
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<std::vector<float>> q(T), k(T), v(T);
    for (int64_t t = 0; t < T; ++t) {
      const auto xn = rmsnorm(x[t], W(p + "input_layernorm.weight"));
      q[t] = linear(W(p + "self_attn.q_proj.weight"), xn, H * hd, D);
      k[t] = linear(W(p + "self_attn.k_proj.weight"), xn, KV * hd, D);
      v[t] = linear(W(p + "self_attn.v_proj.weight"), xn, KV * hd, D);
      rotate(q[t], H, t);
      rotate(k[t], KV, t);
    }
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> attn(static_cast<size_t>(H * hd));
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / (H / KV);
        std::vector<double> s(static_cast<size_t>(t + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += static_cast<double>(q[t][h * hd + i]) * k[j][g * hd + i];
          s[j] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (double& e : s) z += (e = std::exp(e - mx));
        for (int64_t i = 0; i < hd; ++i) {
          double o = 0;
          for (int64_t j = 0; j <= t; ++j) o += s[j] / z * v[j][g * hd + i];
          attn[h * hd + i] = static_cast<float>(o);
        }
      }
      const auto o = linear(W(p + "self_attn.o_proj.weight"), attn, D, H * hd);
      for (int64_t i = 0; i < D; ++i) x[t][i] += o[i];
      const auto xn = rmsnorm(x[t], W(p + "post_attention_layernorm.weight"));
      auto gate = linear(W(p + "mlp.gate_proj.weight"), xn, F, D);
      const auto up = linear(W(p + "mlp.up_proj.weight"), xn, F, D);
      for (int64_t i = 0; i < F; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
      const auto down = linear(W(p + "mlp.down_proj.weight"), gate, D, F);
      for (int64_t i = 0; i < D; ++i) x[t][i] += down[i];
    }
  }
  std::vector<std::vector<float>> logits(static_cast<size_t>(T));
  const auto& head = c.tied_embeddings ? W("model.embed_tokens.weight") : W("lm_head.weight");
  for (int64_t t = 0; t < T; ++t)
    logits[t] = linear(head, rmsnorm(x[t], W("model.norm.weight")), c.vocab_size, D);
  return logits;
}

}  // namespace nanoserve::testing
