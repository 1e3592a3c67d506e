#include "model/config_hf.h"

#include <cmath>
#include <limits>

#include "core/half.h"
#include "io/json_file.h"
#include "model/arch.h"

namespace nanoserve {

namespace {

using nlohmann::json;

constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;

class Reader {
 public:
  Reader(const json& j, const std::string& name) : j_(j), name_(name) {}

  Status error(const std::string& key, const std::string& what) const {
    return invalid_argument(name_ + ": '" + key + "': " + what);
  }
  Status unsupported(const std::string& what) const { return unimplemented(name_ + ": " + what); }

  const json* find(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  // Integer `key` into *out; absent keeps *out unless required.
  Status integer(const std::string& key, bool required, int64_t* out) const {
    const json* v = find(key);
    if (v == nullptr) return required ? error(key, "missing") : Status::ok_status();
    if (!v->is_number_integer())
      return error(key, "expected an integer, found " + std::string(v->type_name()));
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return error(key, "too large");
    }
    *out = v->get<int64_t>();
    return Status::ok_status();
  }
  Status number(const std::string& key, float* out) const { return number_in(j_, key, key, out); }
  Status number_in(const json& obj, const std::string& key, const std::string& shown, float* out) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return Status::ok_status();
    if (!it->is_number()) return error(shown, "expected a number, found " + std::string(it->type_name()));
    const double d = it->get<double>();
    if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max())) {
      return error(shown, std::to_string(d) + " is outside the f32 range");
    }
    *out = static_cast<float>(d);
    return Status::ok_status();
  }
  Status boolean(const std::string& key, bool* out) const {
    const json* v = find(key);
    if (v == nullptr) return Status::ok_status();
    if (!v->is_boolean()) return error(key, "expected true or false, found " + std::string(v->type_name()));
    *out = v->get<bool>();
    return Status::ok_status();
  }
  Status token_ids(const std::string& key, std::vector<int32_t>* out) const {
    const json* v = find(key);
    if (v == nullptr) return Status::ok_status();
    auto one = [&](const json& x) -> Status {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
          x.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return error(key, "expected a token id (a non-negative integer)");
      }
      out->push_back(static_cast<int32_t>(x.get<int64_t>()));
      return Status::ok_status();
    };
    if (v->is_array()) {
      if (v->size() > 1024) return error(key, "more than 1024 ids");
      for (const json& x : *v) NS_RETURN_IF_ERROR(one(x));
      return Status::ok_status();
    }
    return one(*v);
  }

 private:
  const json& j_;
  const std::string& name_;
};

// YaRN, as transformers' _compute_yarn_parameters reads it (gpt-oss).
Status read_yarn(const Reader& r, const json& rs, RopeScaling* out) {
  out->type = RopeScaling::Type::kYarn;
  for (const char* key : {"factor", "original_max_position_embeddings"}) {
    if (rs.find(key) == rs.end()) return r.error(std::string("rope_scaling.") + key, "missing");
  }
  NS_RETURN_IF_ERROR(r.number_in(rs, "factor", "rope_scaling.factor", &out->factor));
  const json& orig = rs["original_max_position_embeddings"];
  if (!orig.is_number_integer())
    return r.error("rope_scaling.original_max_position_embeddings", "expected an integer");
  out->original_context_length = orig.get<int64_t>();
  // beta_fast / beta_slow: null or absent is 32 / 1 (Python's `or`).
  for (auto [key, dst] :
       {std::pair<const char*, float*>{"beta_fast", &out->beta_fast}, {"beta_slow", &out->beta_slow}}) {
    if (auto it = rs.find(key);
        it != rs.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0))
      NS_RETURN_IF_ERROR(r.number_in(rs, key, std::string("rope_scaling.") + key, dst));
  }
  if (auto it = rs.find("attention_factor"); it != rs.end() && !it->is_null())
    NS_RETURN_IF_ERROR(
        r.number_in(rs, "attention_factor", "rope_scaling.attention_factor", &out->attention_factor));
  if (auto it = rs.find("truncate"); it != rs.end()) {
    if (!it->is_boolean()) return r.error("rope_scaling.truncate", "expected a boolean");
    out->truncate = it->get<bool>();
  }
  for (const char* key : {"mscale", "mscale_all_dim"}) {
    if (auto it = rs.find(key);
        it != rs.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0))
      return r.unsupported(std::string("rope_scaling.") + key +
                           ": DeepSeek's YaRN attention factor is not supported");
  }
  return Status::ok_status();
}
Status read_rope_scaling(const Reader& r, const json& rs, RopeScaling* out) {
  if (!rs.is_object()) return r.error("rope_scaling", "expected an object or null");
  auto type_it = rs.find("rope_type");
  if (type_it == rs.end()) type_it = rs.find("type");  // the older key
  if (type_it == rs.end() || !type_it->is_string())
    return r.error("rope_scaling.rope_type", "missing or not a string");
  const std::string type = type_it->get<std::string>();
  if (auto prf = rs.find("partial_rotary_factor");
      prf != rs.end() && !(prf->is_number() && prf->get<double>() == 1.0)) {
    return r.unsupported("rope partial_rotary_factor " + prf->dump().substr(0, 32) + " is not supported");
  }
  if (type == "default") return Status::ok_status();
  if (type == "linear") {
    out->type = RopeScaling::Type::kLinear;
    if (rs.find("factor") == rs.end()) return r.error("rope_scaling.factor", "missing");
    return r.number_in(rs, "factor", "rope_scaling.factor", &out->factor);
  }
  if (type == "yarn") return read_yarn(r, rs, out);
  if (type != "llama3") {
    return r.unsupported("rope_scaling.rope_type '" + type.substr(0, 32) +
                         "' is not supported (default, linear, llama3, yarn)");
  }
  out->type = RopeScaling::Type::kLlama3;
  for (const char* key :
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    if (rs.find(key) == rs.end()) return r.error(std::string("rope_scaling.") + key, "missing");
  }
  NS_RETURN_IF_ERROR(r.number_in(rs, "factor", "rope_scaling.factor", &out->factor));
  NS_RETURN_IF_ERROR(
      r.number_in(rs, "low_freq_factor", "rope_scaling.low_freq_factor", &out->low_freq_factor));
  NS_RETURN_IF_ERROR(
      r.number_in(rs, "high_freq_factor", "rope_scaling.high_freq_factor", &out->high_freq_factor));
  const json& orig = rs["original_max_position_embeddings"];
  if (!orig.is_number_integer()) {
    return r.error("rope_scaling.original_max_position_embeddings", "expected an integer");
  }
  out->original_context_length = orig.get<int64_t>();
  return Status::ok_status();
}

// The HF model types that are built, their class, their architecture here
// (model/arch.h) and their config class's defaults for keys a config.json
// may leave out.
struct HfArch {
  const char* model_type;
  const char* class_name;
  const char* arch;
  int64_t max_position_embeddings;
  float rms_norm_eps;
  int64_t head_dim;  // 0: hidden_size / num_attention_heads
  bool tie_word_embeddings = false;
  bool experts = false;  // a mixture of experts (read_experts)
};
constexpr HfArch kHfArchs[] = {
    {"llama", "LlamaForCausalLM", "llama", 2048, 1e-6f, 0},
    {"mistral", "MistralForCausalLM", "llama", 4096 * 32, 1e-6f, 0},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", 32768, 1e-6f, 0},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", 32768, 1e-6f, 128},
    {"phi3", "Phi3ForCausalLM", "phi3", 4096, 1e-5f, 0},
    {"mixtral", "MixtralForCausalLM", "llama", 4096 * 32, 1e-5f, 0, false, true},
    {"qwen3_moe", "Qwen3MoeForCausalLM", "qwen3moe", 32768, 1e-6f, 0, false, true},
    {"gemma2", "Gemma2ForCausalLM", "gemma2", 8192, 1e-6f, 256, true},
    {"gemma3_text", "Gemma3ForCausalLM", "gemma3", 131072, 1e-6f, 256, true},
    {"gpt_oss", "GptOssForCausalLM", "gpt-oss", 131072, 1e-5f, 64, false, true},
};

// The experts of Mixtral (num_local_experts of intermediate_size, top
// num_experts_per_tok, weights always renormalised) and Qwen3-MoE
// (num_experts of moe_intermediate_size, norm_topk_prob, every layer sparse).
Status read_experts(const Reader& r, const HfArch& arch, ModelConfig& c) {
  const std::string type = arch.model_type;
  const char* count_key =
      r.find("num_experts") != nullptr && type == "qwen3_moe" ? "num_experts" : "num_local_experts";
  // The config classes' defaults where config.json leaves a key out.
  const bool mixtral = type == "mixtral", oss = type == "gpt_oss";
  c.n_experts = mixtral ? 8 : 128;
  c.n_experts_used = mixtral ? 2 : oss ? 4 : 8;
  NS_RETURN_IF_ERROR(r.integer(count_key, false, &c.n_experts));
  NS_RETURN_IF_ERROR(r.integer("num_experts_per_tok", false, &c.n_experts_used));
  if (c.n_experts < 1) return r.error(count_key, "expected at least 1");
  if (c.n_experts_used < 1 || c.n_experts_used > c.n_experts)
    return r.error("num_experts_per_tok", "expected 1 to " + std::to_string(c.n_experts));
  if (mixtral || oss) {
    c.expert_ffn_dim = c.ffn_dim;
    c.expert_weights_norm = true;  // gpt-oss: its softmax over the top-k (ops/moe/moe.h)
  }
  if (mixtral) return Status::ok_status();
  if (oss) {
    NS_RETURN_IF_ERROR(r.number("swiglu_alpha", &c.swiglu_alpha));
    NS_RETURN_IF_ERROR(r.number("swiglu_limit", &c.swiglu_limit));
    // Which layers slide: layer_types, else GptOssConfig's even layers; 128 positions by default.
    int64_t window = 128;
    if (const json* v = r.find("sliding_window"); v != nullptr && !v->is_null())
      NS_RETURN_IF_ERROR(r.integer("sliding_window", false, &window));
    if (window < 0) return r.error("sliding_window", "expected a positive integer or null");
    c.sliding_layers.assign(static_cast<size_t>(c.n_layers), 0);
    for (size_t l = 0; l < c.sliding_layers.size(); l += 2) c.sliding_layers[l] = 1;
    if (const json* types = r.find("layer_types"); types != nullptr && !types->is_null()) {
      if (!types->is_array() || static_cast<int64_t>(types->size()) != c.n_layers)
        return r.error("layer_types", "expected a list of num_hidden_layers types");
      for (size_t l = 0; l < types->size(); ++l) {
        const json& t = (*types)[l];
        if (t != "sliding_attention" && t != "full_attention")
          return r.error("layer_types", "entry " + std::to_string(l) + " " + t.dump().substr(0, 32) +
                                            " (sliding_attention or full_attention)");
        c.sliding_layers[l] = t == "sliding_attention";
      }
    }
    c.sliding_window = window > 0 && window < c.context_length ? window : 0;
    return Status::ok_status();
  }
  c.expert_ffn_dim = 768;
  NS_RETURN_IF_ERROR(r.integer("moe_intermediate_size", false, &c.expert_ffn_dim));
  c.expert_weights_norm = false;  // Qwen3MoeConfig's default
  NS_RETURN_IF_ERROR(r.boolean("norm_topk_prob", &c.expert_weights_norm));
  int64_t step = 1;
  NS_RETURN_IF_ERROR(r.integer("decoder_sparse_step", false, &step));
  if (step != 1) {
    return r.unsupported("decoder_sparse_step = " + std::to_string(step) +
                         ": dense layers between the sparse ones are not supported");
  }
  if (const json* v = r.find("mlp_only_layers"); v != nullptr && !(v->is_array() && v->empty())) {
    return r.unsupported("mlp_only_layers " + v->dump().substr(0, 32) + ": dense layers are not supported");
  }
  return Status::ok_status();
}

bool is_gemma(const HfArch& a) {
  return std::string_view(a.arch).starts_with("gemma");
}

std::string built_hf_names() {
  std::string s;
  for (const HfArch& a : kHfArchs) s += (s.empty() ? "" : ", ") + std::string(a.class_name);
  return s;
}

// Features the forward does not have, refused by name wherever they would
// change the output.
Status refuse_unsupported(const Reader& r, const HfArch& arch) {
  const std::string type = arch.model_type;
  if (type == "qwen2" || type == "qwen3" || type == "qwen3_moe") {
    // Qwen applies its window only with use_sliding_window, and then only
    // from layer max_window_layers on: not a window of every layer.
    bool use = false;
    NS_RETURN_IF_ERROR(r.boolean("use_sliding_window", &use));
    if (use) return r.unsupported("use_sliding_window = true: Qwen's per-layer sliding windows are not supported");
  }
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok"}) {
    if (arch.experts) break;  // read by read_experts
    if (const json* v = r.find(key); v != nullptr && !(v->is_number_integer() && v->get<int64_t>() == 0)) {
      return r.unsupported(std::string("mixture of experts ('") + key + "') is not supported");
    }
  }
  for (const char* key : {"shared_expert_intermediate_size", "n_shared_experts", "first_k_dense_replace"}) {
    if (const json* v = r.find(key); v != nullptr && !(v->is_number_integer() && v->get<int64_t>() == 0)) {
      return r.unsupported(std::string("'") + key +
                           "': shared experts and dense leading layers are not supported");
    }
  }
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    if (!find_arch(arch.arch)->logit_softcaps && r.find(key) != nullptr)  // Gemma's: read_gemma
      return r.unsupported(std::string("'") + key + "': logit soft-capping is not supported");
  }
  // The family's own biases (its row in model/arch.h) are part of it; any other bias is not built.
  const ArchInfo& family = *find_arch(arch.arch);
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (family.qkv_bias && std::string(key) == "attention_bias") continue;
    bool b = false;
    NS_RETURN_IF_ERROR(r.boolean(key, &b));
    if (b) {
      return r.unsupported(std::string("'") + key + "' = true is not supported (the " + arch.arch +
                           " forward has no such biases)");
    }
  }
  for (const char* key : {"hidden_act", "hidden_activation"}) {  // Gemma's classes read the second
    if (const json* v = r.find(key);
        v != nullptr && !(v->is_string() && v->get<std::string>() == family.hidden_act)) {
      return r.unsupported(std::string(key) + " " + v->dump().substr(0, 32) + " is not supported (" +
                           family.hidden_act + ")");
    }
  }
  if (const json* v = r.find("partial_rotary_factor");
      v != nullptr && !(v->is_number() && v->get<double>() == 1.0)) {
    return r.unsupported("partial_rotary_factor " + v->dump().substr(0, 32) + " is not supported");
  }
  return Status::ok_status();
}

// A number that may be null, with the config class's default when the key is
// absent: *out = 0 for null (none).
Status nullable_number(const Reader& r, const json& j, const std::string& key, float class_default,
                       float* out) {
  if (!j.contains(key)) {
    *out = class_default;
    return Status::ok_status();
  }
  *out = 0.0f;
  return r.number(key, out);
}

// Gemma 2 and 3: soft-caps, the attention scale, the alternation of local
// and global layers, the local layers' rope and the embedding scale, with the
// config classes' defaults (Gemma2Config, Gemma3TextConfig).
Status read_gemma(const Reader& r, const json& j, const HfArch& arch, ModelConfig* c) {
  const bool gemma2 = std::string_view(arch.arch) == "gemma2";
  bool bidirectional = false;
  NS_RETURN_IF_ERROR(r.boolean("use_bidirectional_attention", &bidirectional));
  if (bidirectional) return r.unsupported("use_bidirectional_attention = true (an encoder) is not supported");
  NS_RETURN_IF_ERROR(
      nullable_number(r, j, "attn_logit_softcapping", gemma2 ? 50.0f : 0.0f, &c->attn_softcap));
  NS_RETURN_IF_ERROR(
      nullable_number(r, j, "final_logit_softcapping", gemma2 ? 30.0f : 0.0f, &c->final_softcap));
  c->query_pre_attn_scalar = 256.0f;
  NS_RETURN_IF_ERROR(r.number("query_pre_attn_scalar", &c->query_pre_attn_scalar));

  int64_t window = 4096;
  if (j.contains("sliding_window")) {
    window = 0;
    NS_RETURN_IF_ERROR(r.integer("sliding_window", false, &window));
    if (window < 0) return r.error("sliding_window", "expected a positive integer or null");
  }
  // Which layers are local: layer_types, else every sliding_window_pattern-th
  // layer is global (Gemma 2: every other one).
  if (c->n_layers < 1 || c->n_layers > 1024) return Status::ok_status();  // validate() names it
  c->sliding_layers.assign(static_cast<size_t>(c->n_layers), 0);
  if (const json* types = r.find("layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c->n_layers)
      return r.error("layer_types", "expected a list of num_hidden_layers types");
    for (size_t l = 0; l < types->size(); ++l) {
      const json& t = (*types)[l];
      if (t == "sliding_attention") {
        c->sliding_layers[l] = 1;
      } else if (t != "full_attention") {
        return r.error("layer_types", "entry " + std::to_string(l) + " " + t.dump().substr(0, 32) +
                                          " (sliding_attention or full_attention)");
      }
    }
  } else {
    int64_t period = gemma2 ? 2 : 6;
    if (!gemma2) NS_RETURN_IF_ERROR(r.integer("sliding_window_pattern", false, &period));
    if (period < 1) return r.error("sliding_window_pattern", "expected a positive integer");
    for (size_t l = 0; l < c->sliding_layers.size(); ++l)
      c->sliding_layers[l] = (static_cast<int64_t>(l) + 1) % period != 0;
  }
  c->sliding_window = window > 0 && window < c->context_length ? window : 0;

  if (gemma2) {
    c->rope_theta = 10000.0f;  // the generic reading (rope_theta, rope_parameters) follows
  } else {
    // Gemma 3: rope_theta / rope_scaling for the global layers and
    // rope_local_base_freq for the local ones, or (transformers >= 5)
    // rope_parameters with one entry of each kind.
    c->rope_theta = 1000000.0f;
    c->rope_local_theta = 10000.0f;
    NS_RETURN_IF_ERROR(r.number("rope_theta", &c->rope_theta));
    NS_RETURN_IF_ERROR(r.number("rope_local_base_freq", &c->rope_local_theta));
    if (const json* rs = r.find("rope_scaling"))
      NS_RETURN_IF_ERROR(read_rope_scaling(r, *rs, &c->rope_scaling));
    if (const json* rp = r.find("rope_parameters")) {
      if (!rp->is_object()) return r.error("rope_parameters", "expected an object or null");
      for (const char* kind : {"full_attention", "sliding_attention"}) {
        auto it = rp->find(kind);
        if (it == rp->end() || it->is_null()) continue;
        const bool full = std::string_view(kind) == "full_attention";
        if (it->find("rope_theta") != it->end()) {
          NS_RETURN_IF_ERROR(r.number_in(*it, "rope_theta",
                                         std::string("rope_parameters.") + kind + ".rope_theta",
                                         full ? &c->rope_theta : &c->rope_local_theta));
        }
        RopeScaling scaling;
        NS_RETURN_IF_ERROR(read_rope_scaling(r, *it, &scaling));
        if (full) {
          c->rope_scaling = scaling;
        } else if (scaling.type != RopeScaling::Type::kNone) {
          return r.unsupported(
              "rope_parameters.sliding_attention: rope scaling of the local layers is not supported");
        }
      }
    }
  }

  // sqrt(hidden_size) in the checkpoint's dtype, as transformers rounds it to
  // the activations' (its normalizer is a tensor of their dtype).
  std::string dtype = "float32";
  for (const char* key : {"dtype", "torch_dtype"}) {
    if (const json* d = r.find(key); d != nullptr && d->is_string()) dtype = d->get<std::string>();
  }
  const float scale = std::sqrt(static_cast<float>(c->dim));
  c->embed_scale = dtype == "bfloat16"  ? bf16_to_f32(f32_to_bf16(scale))
                   : dtype == "float16" ? fp16_to_f32(f32_to_fp16(scale))
                                        : scale;
  return Status::ok_status();
}

// Gemma3TextConfig's defaults for the keys config_from_hf_json requires: a
// multimodal checkpoint's text_config often gives only what differs from them.
constexpr const char* kGemma3TextDefaults = R"({
  "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8,
  "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208, "bos_token_id": 2, "eos_token_id": 1})";

// Gemma3ForConditionalGeneration: its text_config as a Gemma3ForCausalLM
// (the vision tower's tensors are skipped at load: model/hf_weights.h), with
// the top level's dtype and token ids.
StatusOr<HfModelConfig> gemma3_text_part(const Reader& r, const std::string& name) {
  const json* text = r.find("text_config");
  if (text == nullptr || !text->is_object()) return r.error("text_config", "missing or not an object");
  json merged = json::parse(kGemma3TextDefaults);
  merged.update(*text);
  merged["model_type"] = "gemma3_text";
  merged["architectures"] = json::array({"Gemma3ForCausalLM"});
  for (const char* key : {"dtype", "torch_dtype", "bos_token_id", "eos_token_id", "quantization_config"}) {
    if (const json* v = r.find(key)) merged[key] = *v;
  }
  return config_from_hf_json(merged, name + " (text_config)");
}

}  // namespace

StatusOr<HfModelConfig> config_from_hf_json(const json& j, const std::string& name) {
  if (!j.is_object()) return invalid_argument(name + ": not a JSON object");
  Reader r(j, name);
  const json* model_type = r.find("model_type");
  if (model_type == nullptr || !model_type->is_string())
    return r.error("model_type", "missing or not a string");
  std::string arch_name;
  if (const json* archs = r.find("architectures")) {
    if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
      return r.error("architectures", "expected a list of names");
    }
    arch_name = (*archs)[0].get<std::string>();
  }
  const std::string type = model_type->get<std::string>();
  if (type == "gemma3" && (arch_name.empty() || arch_name == "Gemma3ForConditionalGeneration")) {
    return gemma3_text_part(r, name);
  }
  const HfArch* arch = nullptr;
  for (const HfArch& a : kHfArchs) {
    if (type == a.model_type && (arch_name.empty() || arch_name == a.class_name)) arch = &a;
  }
  if (arch == nullptr) {
    return r.unsupported("architecture '" + (arch_name.empty() ? std::string("?") : arch_name.substr(0, 64)) +
                         "' (model_type '" + type.substr(0, 64) +
                         "') is not supported; built: " + built_hf_names());
  }

  HfModelConfig out;
  ModelConfig& c = out.config;
  c.arch = arch->arch;
  NS_RETURN_IF_ERROR(apply_arch(c));
  NS_RETURN_IF_ERROR(r.integer("hidden_size", true, &c.dim));
  NS_RETURN_IF_ERROR(r.integer("num_hidden_layers", true, &c.n_layers));
  NS_RETURN_IF_ERROR(r.integer("num_attention_heads", true, &c.n_heads));
  c.n_kv_heads = c.n_heads;
  NS_RETURN_IF_ERROR(r.integer("num_key_value_heads", false, &c.n_kv_heads));
  NS_RETURN_IF_ERROR(r.integer("intermediate_size", true, &c.ffn_dim));
  NS_RETURN_IF_ERROR(r.integer("vocab_size", true, &c.vocab_size));
  if (r.find("head_dim") != nullptr) {
    NS_RETURN_IF_ERROR(r.integer("head_dim", true, &c.head_dim));
  } else if (arch->head_dim > 0) {
    c.head_dim = arch->head_dim;
  } else {
    if (c.n_heads <= 0 || c.dim % c.n_heads != 0) {
      return r.error("hidden_size", std::to_string(c.dim) + " is not a multiple of num_attention_heads = " +
                                        std::to_string(c.n_heads) + " (and head_dim is not given)");
    }
    c.head_dim = c.dim / c.n_heads;
  }
  c.rope_dim = c.head_dim;
  c.context_length = arch->max_position_embeddings;  // the config class's defaults
  c.rope_theta = 10000.0f;
  c.norm_eps = arch->rms_norm_eps;
  NS_RETURN_IF_ERROR(r.integer("max_position_embeddings", false, &c.context_length));
  NS_RETURN_IF_ERROR(refuse_unsupported(r, *arch));
  // Mistral's window, in every layer (Qwen's is refused above; it keeps the
  // key with use_sliding_window false, and then has none).
  if (const json* v = r.find("sliding_window");
      v != nullptr && type != "qwen2" && type != "qwen3" && type != "qwen3_moe" && type != "gpt_oss" &&
      !is_gemma(*arch) && !v->is_null() && !(v->is_boolean() && !v->get<bool>())) {
    if (!v->is_number_integer() || v->get<int64_t>() < 1)
      return r.error("sliding_window", "expected a positive integer, false or null");
    c.sliding_window = v->get<int64_t>() < c.context_length ? v->get<int64_t>() : 0;
  }
  if (arch->experts) NS_RETURN_IF_ERROR(read_experts(r, *arch, c));
  if (is_gemma(*arch)) NS_RETURN_IF_ERROR(read_gemma(r, j, *arch, &c));
  NS_RETURN_IF_ERROR(r.number("rms_norm_eps", &c.norm_eps));
  const bool own_rope = arch->arch == std::string_view("gemma3");  // read_gemma read it
  if (!own_rope) NS_RETURN_IF_ERROR(r.number("rope_theta", &c.rope_theta));
  if (const json* rs = r.find("rope_scaling"); rs != nullptr && !own_rope)
    NS_RETURN_IF_ERROR(read_rope_scaling(r, *rs, &c.rope_scaling));
  // transformers >= 5 writes both as one object, rope_parameters, with the
  // theta inside it; it takes precedence where both are present.
  if (const json* rp = r.find("rope_parameters"); rp != nullptr && !rp->is_null() && !own_rope) {
    if (!rp->is_object()) return r.error("rope_parameters", "expected an object or null");
    if (rp->find("rope_theta") != rp->end()) {
      NS_RETURN_IF_ERROR(r.number_in(*rp, "rope_theta", "rope_parameters.rope_theta", &c.rope_theta));
    }
    c.rope_scaling = RopeScaling{};
    NS_RETURN_IF_ERROR(read_rope_scaling(r, *rp, &c.rope_scaling));
  }
  c.tied_embeddings = arch->tie_word_embeddings;
  NS_RETURN_IF_ERROR(r.boolean("tie_word_embeddings", &c.tied_embeddings));

  std::vector<int32_t> bos;
  NS_RETURN_IF_ERROR(r.token_ids("bos_token_id", &bos));
  if (bos.size() > 1) return r.error("bos_token_id", "expected one id");
  if (!bos.empty()) out.bos_id = bos[0];
  NS_RETURN_IF_ERROR(r.token_ids("eos_token_id", &out.eos_ids));
  if (const json* d = r.find("torch_dtype")) {
    if (!d->is_string()) return r.error("torch_dtype", "expected a string");
    out.torch_dtype = d->get<std::string>();
    if (out.torch_dtype != "float32" && out.torch_dtype != "float16" && out.torch_dtype != "bfloat16") {
      return r.unsupported("torch_dtype '" + out.torch_dtype.substr(0, 32) +
                           "' is not supported (float32, float16, bfloat16)");
    }
  }
  // gpt-oss's MXFP4 experts (model/hf_gptoss.h); any other quantization is read_hf_fp8's.
  const json* qc = r.find("quantization_config");
  const json* qm =
      qc != nullptr && qc->is_object() && qc->contains("quant_method") ? &(*qc)["quant_method"] : nullptr;
  if (qm != nullptr && *qm == "mxfp4") {
    if (type != "gpt_oss") return r.unsupported("quantization_config.quant_method 'mxfp4' outside gpt-oss");
    out.mxfp4 = true;
  } else {
    NS_ASSIGN_OR_RETURN(out.fp8, read_hf_fp8(j, name));
  }
  Status st = c.validate();
  if (!st.ok()) return Status(st.code(), name + ": " + st.message());
  return out;
}

StatusOr<HfModelConfig> config_from_hf_file(const std::string& path) {
  NS_ASSIGN_OR_RETURN(json j, read_json_file(path, kMaxConfigBytes));
  return config_from_hf_json(j, path);
}

}  // namespace nanoserve
