#include "cli/engine_flags.h"

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include <unistd.h>

#include "cli/commands.h"
#include "cli/vllm_flags.h"
#include "core/logging.h"
#include "engine/load_engine.h"
#include "model/model_shapes.h"

namespace nanoserve::cli {

namespace {

// "123", "512K", "512M", "2G" (binary multiples) -> bytes.
StatusOr<int64_t> parse_bytes(const std::string& s) {
  if (s.empty()) return invalid_argument("--kv-cache-memory: empty");
  size_t i = 0;
  int64_t v = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    if (v > (std::numeric_limits<int64_t>::max() - 9) / 10)
      return invalid_argument("--kv-cache-memory: too large");
    v = v * 10 + (s[i] - '0');
    ++i;
  }
  if (i == 0)
    return invalid_argument("--kv-cache-memory: '" + s + "' is not a byte count (e.g. 1073741824, 512M, 2G)");
  int shift = 0;
  if (i < s.size()) {
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(s[i])));
    shift = u == 'K' ? 10 : u == 'M' ? 20 : u == 'G' ? 30 : -1;
    ++i;
    if (i < s.size() && (s[i] == 'i' || s[i] == 'I')) ++i;
    if (i < s.size() && (s[i] == 'b' || s[i] == 'B')) ++i;
    if (shift < 0 || i != s.size())
      return invalid_argument("--kv-cache-memory: '" + s +
                              "' is not a byte count (e.g. 1073741824, 512M, 2G)");
  }
  if (v > (std::numeric_limits<int64_t>::max() >> shift))
    return invalid_argument("--kv-cache-memory: too large");
  v <<= shift;
  if (v <= 0) return invalid_argument("--kv-cache-memory must be > 0");
  return v;
}

}  // namespace

void add_engine_flags(CLI::App* sub, EngineFlags& f) {
  EngineConfig& c = f.config;
  sub->add_option("--max-num-seqs", f.max_num_seqs,
                  "Most sequences in one step (default: 64 on the CPU, 256 on CUDA)");
  sub->add_option("--max-num-batched-tokens", f.max_num_batched_tokens,
                  "Token budget of one step, the prefill chunk (default: 512 on the CPU, 2048 on CUDA)");
  sub->add_option("--max-model-len", c.max_model_len,
                  "Longest prompt + output (0: the model's context length; more than it needs "
                  "--allow-long-max-model-len)")
      ->capture_default_str();
  sub->add_flag("--allow-long-max-model-len", f.allow_long_max_model_len,
                "Take a --max-model-len above the model's context length (as vLLM's "
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, also read); positions past it were never trained");
  sub->add_option("--block-size", c.block_size, "Tokens per KV block")->capture_default_str();
  sub->add_option("--num-blocks", c.num_blocks, "KV pool size in blocks (overrides --kv-cache-memory)");
  sub->add_option("--kv-cache-memory", f.kv_cache_memory,
                  "KV pool size in bytes, K+V of all layers (e.g. 512M, 2G; default 1G)");
  sub->add_option("--kv-cache-dtype", f.kv_cache_dtype,
                  "KV cache element type (auto: f32 on the CPU, bf16 on CUDA; fp8 = fp8_e4m3: E4M3 with "
                  "per-layer scales)")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2"}))
      ->capture_default_str();
  sub->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", c.enable_prefix_caching,
                "Reuse the cached KV blocks of a shared prompt prefix (default on)");
  sub->add_option("--threads", f.threads, "Worker threads (0: all cores)")->capture_default_str();
  sub->add_option("--device", f.device, "auto (CUDA when built with it and a GPU is present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  sub->add_option(
      "--gpu-memory-utilization", f.gpu_memory_utilization,
      "CUDA: fraction of GPU memory for weights, KV cache and buffers together (default 0.9); the "
      "KV pool gets what is left (unless --num-blocks or --kv-cache-memory sets it)");
  sub->add_flag("--cublas-prefill", c.cublas_prefill,
                "CUDA: run the linears of steps of more than 64 tokens through cuBLASLt's per-shape kernels: "
                "faster prefill, but greedy output is then no longer bitwise the same alone and in a batch");
  sub->add_flag("--enforce-eager", c.enforce_eager,
                "CUDA: launch every step's kernels from the host instead of replaying CUDA graphs");
  sub->add_flag_callback(
      "--async-scheduling", [&c] { c.async_scheduling = true; },
      "Launch each step before making the last one's text and outputs, so that they overlap the "
      "device's work (default: on with CUDA, unless speculative decoding is on)");
  sub->add_flag_callback(
      "--no-async-scheduling", [&c] { c.async_scheduling = false; },
      "Run one step at a time: schedule, compute, make the outputs, then the next step");
  sub->add_option("--load-format", f.load_format,
                  "auto (a folder: Hugging Face safetensors; a file: GGUF), gguf, safetensors, or dummy "
                  "(random weights)")
      ->capture_default_str();
  std::string shapes;
  for (const std::string& n : model_shape_names()) shapes += (shapes.empty() ? "" : ", ") + n;
  sub->add_option("--model-shape", f.model_shape,
                  "With --load-format dummy: the shape of the random model (" + shapes +
                      "); the tokenizer is -m's or the default model's");
  sub->add_option("--speculative-config", f.speculative_config,
                  "Speculative decoding, as JSON: {\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                  "\"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2} or {\"model\": PATH, "
                  "\"num_speculative_tokens\": 4}; the output is the same as without it");
  sub->add_option("--preemption-mode", f.preemption_mode,
                  "How a preempted request gives its KV blocks back: auto (swap them out to the --swap-space "
                  "area where that costs less than recomputing the tokens, else recompute), swap (whenever "
                  "the area has room) or recompute")
      ->check(CLI::IsMember({"auto", "swap", "recompute"}))
      ->capture_default_str();
  add_vllm_engine_flags(sub, f);
}

StatusOr<EngineConfig> engine_config_from_flags(const EngineFlags& f) {
  EngineConfig c = f.config;
  if (!f.kv_cache_memory.empty()) {
    NS_ASSIGN_OR_RETURN(c.kv_cache_bytes, parse_bytes(f.kv_cache_memory));
  }
  if (f.kv_cache_dtype == "f32") {
    c.kv_cache_dtype = DType::kF32;
  } else if (f.kv_cache_dtype == "f16") {
    c.kv_cache_dtype = DType::kF16;
  } else if (f.kv_cache_dtype == "bf16") {
    c.kv_cache_dtype = DType::kBF16;
  } else if (f.kv_cache_dtype == "fp8" || f.kv_cache_dtype == "fp8_e4m3") {
    c.kv_cache_dtype = DType::kF8E4M3;  // vLLM's fp8 is E4M3 too
  } else if (f.kv_cache_dtype == "fp8_e5m2") {
    return invalid_argument(
        "--kv-cache-dtype fp8_e5m2: the E5M2 KV cache is not implemented; fp8 (fp8_e4m3) is");
  } else if (f.kv_cache_dtype != "auto") {
    return invalid_argument("--kv-cache-dtype: '" + f.kv_cache_dtype +
                            "' is not auto, f32, f16, bf16, fp8 or fp8_e4m3");
  }
  if (f.device == "cpu") {
    c.device = Device::kCPU;
  } else if (f.device == "cuda") {
    c.device = Device::kCUDA;
  } else if (f.device != "auto") {
    return invalid_argument("--device: '" + f.device + "' is not auto, cpu or cuda");
  }
  if (f.gpu_memory_utilization.has_value()) {
    c.gpu_memory_utilization = *f.gpu_memory_utilization;
    if (!(c.gpu_memory_utilization > 0.0 && c.gpu_memory_utilization <= 1.0)) {
      return invalid_argument("--gpu-memory-utilization must be in (0, 1]");
    }
  }
  NS_ASSIGN_OR_RETURN(const Device device, resolve_device(c.device));
  set_step_limits(device, f.max_num_seqs, f.max_num_batched_tokens, &c);
  // Below one the runner's step buffers would be empty: refused here, by name,
  // before a command starts anything.
  if (c.max_num_seqs < 1) return invalid_argument("--max-num-seqs must be >= 1");
  if (c.max_num_batched_tokens < 1) return invalid_argument("--max-num-batched-tokens must be >= 1");
  if (c.max_model_len < 0)
    return invalid_argument("--max-model-len must be >= 0 (0: the model's context length)");
  if (c.num_blocks < 0) return invalid_argument("--num-blocks must be >= 0");
  if (c.block_size < 1) return invalid_argument("--block-size must be >= 1");
  if (f.threads < 0) return invalid_argument("--threads must be >= 0");
  // --load-format and --model-shape alone; the model itself is model_spec_from_flags'.
  NS_RETURN_IF_ERROR(parse_load_format(f.load_format).status());
  if (!f.model_shape.empty()) NS_RETURN_IF_ERROR(model_shape(f.model_shape).status());
  if (StatusOr<SpeculativeConfig> spec = parse_speculative_config(f.speculative_config); spec.ok()) {
    c.speculative = *spec;
  } else {
    return invalid_argument("--speculative-config: " + spec.status().message());
  }
  if (f.preemption_mode == "swap") {
    c.preemption_mode = PreemptionMode::kSwap;
  } else if (f.preemption_mode == "recompute") {
    c.preemption_mode = PreemptionMode::kRecompute;
  } else if (f.preemption_mode != "auto") {
    return invalid_argument("--preemption-mode: '" + f.preemption_mode + "' is not auto, swap or recompute");
  }
  NS_RETURN_IF_ERROR(apply_vllm_engine_flags(f, device, &c));
  return c;
}

Status check_flags_against_model(const EngineFlags& f, const ModelSpec& spec) {
  if (auto device = resolve_device(f.device == "cpu"    ? std::optional<Device>(Device::kCPU)
                                   : f.device == "cuda" ? std::optional<Device>(Device::kCUDA)
                                                        : std::nullopt);
      device.ok()) {
    note_vllm_engine_flags(f, *device);
  }
  if (!f.download_dir.empty() && spec.hub_id.empty()) {
    NS_LOG(INFO) << "--download-dir: MODEL '" << spec.path << "' is a local path; nothing is downloaded";
  }
  // More threads than cores only contend for them (every step waits on its
  // slowest thread); the count is still honoured.
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores > 0 && f.threads > static_cast<int>(cores)) {
    NS_LOG(WARNING) << "--threads " << f.threads << " is more than the " << cores
                    << " cores here: the extra threads only contend for them and slow each step";
  }
  const int64_t asked = f.config.max_model_len;
  if (asked <= 0) return Status::ok_status();
  NS_ASSIGN_OR_RETURN(ModelConfig mc, read_model_config(spec));
  if (mc.context_length <= 0 || asked <= mc.context_length) return Status::ok_status();
  const char* env = std::getenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN");
  const bool allowed = f.allow_long_max_model_len || (env != nullptr && std::strcmp(env, "1") == 0);
  const std::string what = "--max-model-len " + std::to_string(asked) +
                           " is above the model's context length " + std::to_string(mc.context_length);
  if (!allowed) {
    return invalid_argument(what +
                            " (context_length / max_position_embeddings of its config); positions past it "
                            "were never trained. Pass --allow-long-max-model-len (or set "
                            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1) to take it anyway");
  }
  NS_LOG(WARNING) << what << "; taken as asked (--allow-long-max-model-len): output past "
                  << mc.context_length << " tokens may be wrong";
  return Status::ok_status();
}

StatusOr<ModelSpec> model_spec_from_flags(const EngineFlags& f, const std::string& model_arg) {
  ModelSpec spec;
  NS_ASSIGN_OR_RETURN(spec.format, parse_load_format(f.load_format));
  spec.path = model_arg.empty() ? default_model_path() : model_arg;
  if (!f.model_shape.empty()) {
    if (spec.format != LoadFormat::kDummy) {
      return invalid_argument("--model-shape needs --load-format dummy (it gives random weights a shape)");
    }
    NS_RETURN_IF_ERROR(model_shape(f.model_shape).status());
    spec.model_shape = f.model_shape;
    spec.tokenizer_path = spec.path;
  }
  if (!f.tokenizer.empty()) {
    if (!f.model_shape.empty())
      return invalid_argument("--tokenizer: with --model-shape the tokenizer is -m's");
    spec.tokenizer_path = f.tokenizer;
  }
  // A hub id is looked up in the cache and downloaded when absent; a path is taken as it is.
  const bool progress = isatty(STDERR_FILENO) != 0;
  NS_ASSIGN_OR_RETURN(ResolvedModel model,
                      resolve_model_path(spec.path, f.revision, f.download_dir, progress));
  if (spec.tokenizer_path == spec.path) spec.tokenizer_path = model.path;
  spec.path = model.path;
  spec.hub_id = model.hub_id;
  if (!spec.tokenizer_path.empty() && spec.tokenizer_path != spec.path) {
    NS_ASSIGN_OR_RETURN(ResolvedModel tok,
                        resolve_model_path(spec.tokenizer_path, "", f.download_dir, progress));
    spec.tokenizer_path = tok.path;
  }
  return spec;
}

}  // namespace nanoserve::cli
