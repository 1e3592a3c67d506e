// nanoserve inspect [MODEL]
//
// Prints what a GGUF file holds (a Hugging Face folder: cli/inspect_hf.h): format facts, the model's
// hyperparameters (ModelConfig), the tokenizer, the chat template, and a table of tensors with per-dtype
// totals. --metadata lists every metadata key too. A broken file prints its Status and exits 1.

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "cli/commands.h"
#include "cli/inspect_hf.h"
#include "cli/model_arg.h"
#include "io/gguf.h"
#include "model/config.h"
#include "model/model_source.h"

namespace nanoserve::cli {

namespace {

struct InspectArgs {
  ModelArg model_arg;
  std::string model;  // resolved from model_arg
  bool metadata = false;
  bool no_tensors = false;
};

std::string human_bytes(uint64_t n) {
  char buf[32];
  if (n >= (uint64_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(n) / (1 << 30));
  } else if (n >= (uint64_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(n) / (1 << 20));
  } else if (n >= 1024) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(n) / 1024);
  } else {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " B", n);
  }
  return buf;
}

// One line, control characters escaped, at most `max` bytes.
std::string one_line(const std::string& s, size_t max = 80) {
  std::string out;
  for (unsigned char c : s.substr(0, max)) {
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

std::string value_summary(const GgufValue& v) {
  if (const std::string* s = v.as_string()) return "\"" + one_line(*s, 60) + "\"";
  if (const GgufArray* a = v.as_array()) {
    std::string out = "[" + std::to_string(a->items.size()) + " x " + gguf_type_name(a->elem_type) + "]";
    if (!a->items.empty() && a->elem_type != GgufType::kArray) out += " first " + value_summary(a->items[0]);
    return out;
  }
  if (auto b = v.as_bool()) return *b ? "true" : "false";
  if (v.type == GgufType::kF32 || v.type == GgufType::kF64) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", *v.as_float());
    return buf;
  }
  if (auto i = v.as_int()) return std::to_string(*i);
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return std::to_string(*u);
  return "?";
}

// "<id> '<text>'" for a special token key, or "-" when absent.
std::string token_desc(const GgufFile& f, const char* key, const GgufArray* tokens) {
  auto id = f.get_int(key);
  if (!id.ok()) return "-";
  std::string out = std::to_string(*id);
  if (tokens != nullptr && *id >= 0 && static_cast<uint64_t>(*id) < tokens->items.size()) {
    if (const std::string* s = tokens->items[static_cast<size_t>(*id)].as_string())
      out += " '" + one_line(*s, 40) + "'";
  }
  return out;
}

std::string string_or(const GgufFile& f, const char* key, const char* fallback) {
  auto s = f.get_string(key);
  return s.ok() ? *s : fallback;
}

void print_config(const ModelConfig& c) {
  std::printf("architecture: %s\n", c.arch.c_str());
  std::printf("  layers %" PRId64 ", dim %" PRId64 ", ffn %" PRId64 ", vocab %" PRId64 ", context %" PRId64
              "\n",
              c.n_layers, c.dim, c.ffn_dim, c.vocab_size, c.context_length);
  std::printf("  heads %" PRId64 ", kv heads %" PRId64 " (n_rep %" PRId64 "), head_dim %" PRId64 "\n",
              c.n_heads, c.n_kv_heads, c.n_rep(), c.head_dim);
  const char* scaling = "none";
  if (c.rope_scaling.type == RopeScaling::Type::kLinear) scaling = "linear";
  if (c.rope_scaling.type == RopeScaling::Type::kLlama3) scaling = "llama3";
  if (c.rope_scaling.type == RopeScaling::Type::kYarn) scaling = "yarn";
  std::printf("  rope theta %g, rope dim %" PRId64 ", scaling %s", c.rope_theta, c.rope_dim, scaling);
  if (c.rope_scaling.type != RopeScaling::Type::kNone) std::printf(" x%g", c.rope_scaling.factor);
  if (c.rope_scaling.freq_factors_tensor) std::printf(" (rope_freqs.weight)");
  if (c.rope_scaling.type == RopeScaling::Type::kYarn) {
    std::printf(" over %" PRId64 " positions (beta %g / %g%s), q and k x %g",
                c.rope_scaling.original_context_length, c.rope_scaling.beta_fast, c.rope_scaling.beta_slow,
                c.rope_scaling.truncate ? "" : ", not truncated", rope_attention_factor(c.rope_scaling));
  }
  std::printf("\n  rms norm eps %g, embeddings %s\n", c.norm_eps,
              c.tied_embeddings ? "tied (no output.weight)" : "separate");
  if (c.n_experts > 0) {
    std::printf("  experts %" PRId64 " of %" PRId64 " per token, expert ffn %" PRId64 ", weights %s\n",
                c.n_experts_used, c.n_experts, c.expert_ffn_dim,
                c.expert_weights_norm ? "renormalised over the top-k" : "the softmax's");
  }
  const ArchInfo* a = find_arch(c.arch);
  if (a != nullptr && a->oss_experts && c.n_experts > 0) {
    std::printf(
        "  experts: router and expert biases, softmax over the top-k logits, clamped SwiGLU (alpha %g, "
        "limit %g)\n",
        c.swiglu_alpha, c.swiglu_limit);
  }
  if (a != nullptr &&
      (a->qkv_bias || a->qk_norm || a->fused_qkv_gate_up || a->sandwich_norms || a->attn_sinks)) {
    std::string beyond;
    for (const auto& [on, what] : {std::pair<bool, const char*>{a->qkv_bias, "q/k/v biases"},
                                   {a->qk_norm, "q/k head norms"},
                                   {a->fused_qkv_gate_up, "fused qkv and gate_up"},
                                   {a->sandwich_norms, "sandwich norms"},
                                   {a->norm_plus_one, "(1 + w) norms"},
                                   {std::string_view(a->hidden_act) != "silu", "GeGLU (tanh GELU)"},
                                   {a->o_bias, "o bias"},
                                   {a->attn_sinks, "attention sinks"}}) {
      if (on) beyond += (beyond.empty() ? " " : ", ") + std::string(what);
    }
    std::printf("  beyond llama:%s\n", beyond.c_str());
  }
  if (a != nullptr && a->scaled_embedding) {
    std::printf("  embedding x %g\n",
                c.embed_scale > 0.0f ? c.embed_scale : std::sqrt(static_cast<float>(c.dim)));
  }
  if (c.sliding_window > 0) {
    int64_t local = c.n_layers;
    if (!c.sliding_layers.empty()) local = std::count(c.sliding_layers.begin(), c.sliding_layers.end(), 1);
    std::printf("  sliding window %" PRId64 " in %" PRId64 " of %" PRId64 " layers", c.sliding_window, local,
                c.n_layers);
    if (c.rope_local_theta > 0.0f) std::printf(", their rope theta %g (unscaled)", c.rope_local_theta);
    std::printf("\n");
  }
  if (c.attn_softcap > 0.0f || c.final_softcap > 0.0f || c.query_pre_attn_scalar > 0.0f) {
    std::printf("  attention scale %g", c.attention_scale());
    if (c.attn_softcap > 0.0f) std::printf(", attention soft-cap %g", c.attn_softcap);
    if (c.final_softcap > 0.0f) std::printf(", final logit soft-cap %g", c.final_softcap);
    std::printf("\n");
  }
}

void print_tokenizer(const GgufFile& f) {
  const GgufArray* tokens = nullptr;
  if (auto t = f.get_array("tokenizer.ggml.tokens"); t.ok()) tokens = *t;
  size_t n_merges = 0;
  if (auto m = f.get_array("tokenizer.ggml.merges"); m.ok()) n_merges = (*m)->items.size();
  std::printf(
      "tokenizer: %s (pre %s), %zu tokens, %zu merges\n", string_or(f, "tokenizer.ggml.model", "-").c_str(),
      string_or(f, "tokenizer.ggml.pre", "-").c_str(), tokens ? tokens->items.size() : size_t{0}, n_merges);
  std::printf("  bos %s, eos %s, unk %s, pad %s\n",
              token_desc(f, "tokenizer.ggml.bos_token_id", tokens).c_str(),
              token_desc(f, "tokenizer.ggml.eos_token_id", tokens).c_str(),
              token_desc(f, "tokenizer.ggml.unknown_token_id", tokens).c_str(),
              token_desc(f, "tokenizer.ggml.padding_token_id", tokens).c_str());
  auto add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  auto add_eos = f.get_bool("tokenizer.ggml.add_eos_token");
  std::printf("  add bos %s, add eos %s\n", add_bos.ok() ? (*add_bos ? "yes" : "no") : "-",
              add_eos.ok() ? (*add_eos ? "yes" : "no") : "-");
  auto tmpl = f.get_string("tokenizer.chat_template");
  if (!tmpl.ok()) {
    std::printf("chat template: none\n");
    return;
  }
  std::printf("chat template (%zu bytes):\n", tmpl->size());
  // Indented, line by line, as stored.
  std::string line = "  ";
  for (char c : *tmpl) {
    if (c == '\n') {
      std::printf("%s\n", line.c_str());
      line = "  ";
    } else {
      line += c;
    }
  }
  if (line.size() > 2) std::printf("%s\n", line.c_str());
}

void print_tensors(const GgufFile& f) {
  size_t name_width = 4;
  for (const auto& t : f.tensors()) name_width = std::max(name_width, std::min<size_t>(t.name.size(), 48));
  std::printf("tensors:\n  %-*s  %-16s %-5s %12s\n", static_cast<int>(name_width), "name", "shape", "dtype",
              "bytes");
  struct Totals {
    int64_t count = 0, elems = 0, bytes = 0;
  };
  std::map<std::string, Totals> by_dtype;
  Totals all;
  for (const auto& t : f.tensors()) {
    std::string shape = "[";
    int64_t elems = 1;
    for (size_t i = 0; i < t.shape.size(); ++i) {
      shape += (i ? ", " : "") + std::to_string(t.shape[i]);
      elems *= t.shape[i];  // checked at parse time
    }
    shape += "]";
    std::printf("  %-*s  %-16s %-5s %12" PRId64 "\n", static_cast<int>(name_width),
                one_line(t.name, 48).c_str(), shape.c_str(), dtype_name(t.dtype), t.nbytes);
    for (Totals* tot : {&by_dtype[dtype_name(t.dtype)], &all}) {
      tot->count += 1;
      tot->elems += elems;
      tot->bytes += t.nbytes;
    }
  }
  for (const auto& [name, tot] : by_dtype) {
    std::printf("  %-5s %4" PRId64 " tensors %14" PRId64 " params %12s\n", name.c_str(), tot.count, tot.elems,
                human_bytes(static_cast<uint64_t>(tot.bytes)).c_str());
  }
  std::printf("total: %" PRId64 " tensors, %" PRId64 " params, %s of tensor data (%.2f bits/param)\n",
              all.count, all.elems, human_bytes(static_cast<uint64_t>(all.bytes)).c_str(),
              all.elems ? 8.0 * static_cast<double>(all.bytes) / static_cast<double>(all.elems) : 0.0);
}

int run_inspect(const InspectArgs& a) {
  const std::string path = a.model.empty() ? default_model_path() : a.model;
  if (auto format = detect_load_format(path); format.ok() && *format == LoadFormat::kSafetensors) {
    return run_inspect_hf(path, a.no_tensors);
  }
  auto opened = GgufFile::open(path);
  if (!opened.ok()) {
    std::fprintf(stderr, "nanoserve inspect: %s\n", opened.status().to_string().c_str());
    return 1;
  }
  const GgufFile& f = **opened;
  std::printf("file: %s\n", path.c_str());
  std::printf("  GGUF v%u, %s, %zu metadata keys, %zu tensors, alignment %" PRIu64 ", data at %" PRIu64 "\n",
              f.version(), human_bytes(f.file_size()).c_str(), f.metadata().size(), f.tensors().size(),
              f.alignment(), f.data_offset());
  std::printf("  name: %s\n", one_line(string_or(f, "general.name", "-")).c_str());
  if (a.metadata) {
    std::printf("metadata:\n");
    for (const auto& [key, value] : f.metadata()) {
      std::printf("  %-44s %-6s %s\n", one_line(key, 44).c_str(), gguf_type_name(value.type),
                  value_summary(value).c_str());
    }
  }
  // A config error is reported, but the rest is still shown: inspect is how one
  // finds out what is wrong with a file.
  auto config = config_from_gguf(f);
  if (config.ok()) {
    print_config(*config);
  } else {
    std::printf("architecture: %s (%s)\n", string_or(f, "general.architecture", "-").c_str(),
                config.status().to_string().c_str());
  }
  print_tokenizer(f);
  if (!a.no_tensors) print_tensors(f);
  if (!config.ok()) {
    std::fprintf(stderr, "nanoserve inspect: %s\n", config.status().to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

CommandRun add_inspect_command(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* sub = app.add_subcommand("inspect", "Print a model's hyperparameters, tokenizer and tensors");
  add_model_arg(sub, args->model_arg, "GGUF file or Hugging Face folder (default: the bundled default model)");
  sub->add_flag("--metadata", args->metadata, "Also list every metadata key and value");
  sub->add_flag("--no-tensors", args->no_tensors, "Leave out the tensor table");
  return [args] {
    StatusOr<std::string> model = resolve_model_arg(args->model_arg);
    if (!model.ok()) {
      std::fprintf(stderr, "nanoserve inspect: %s\n", model.status().message().c_str());
      return 2;
    }
    args->model = *model;
    return run_inspect(*args);
  };
}

}  // namespace nanoserve::cli
