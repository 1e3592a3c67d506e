#include "cli/vllm_flags.h"

#include <cstring>
#include <filesystem>

#include "core/logging.h"
#include "io/json_file.h"

namespace nanoserve::cli {

namespace {

namespace fs = std::filesystem;

Status refuse_parallel(const char* flag, int n, const char* what) {
  if (n == 1) return Status::ok_status();
  if (n < 1) return invalid_argument(std::string(flag) + " must be >= 1");
  return invalid_argument(std::string(flag) + " " + std::to_string(n) +
                          ": nanoserve runs a model on one device (" + what + " is not there yet); use 1");
}

}  // namespace

void add_vllm_engine_flags(CLI::App* sub, EngineFlags& f) {
  sub->add_option(
         "--dtype", f.dtype,
         "vLLM's model dtype. CUDA computes in bfloat16 (auto, bfloat16); the CPU computes in float32 "
         "with weights as stored, and a half dtype there sets the KV cache's")
      ->check(CLI::IsMember({"auto", "half", "float16", "bfloat16", "float", "float32"}))
      ->capture_default_str();
  sub->add_option("--tensor-parallel-size", f.tensor_parallel_size, "vLLM's -tp: 1 (one device)")
      ->capture_default_str();
  sub->add_option("--pipeline-parallel-size", f.pipeline_parallel_size, "vLLM's -pp: 1 (one device)")
      ->capture_default_str();
  sub->add_option("--data-parallel-size", f.data_parallel_size, "vLLM's -dp: 1 (one engine)")
      ->capture_default_str();
  sub->add_flag("--trust-remote-code,!--no-trust-remote-code", f.trust_remote_code,
                "Taken for vLLM's command lines; no effect, since nanoserve never runs a model's code");
  sub->add_option("--quantization,-q", f.quantization,
                  "fp8: the linears as FP8 E4M3 rows with per-channel scales (CUDA); others refused");
  sub->add_option("--tokenizer", f.tokenizer,
                  "The tokenizer of another GGUF file or Hugging Face folder (default: the model's)");
  sub->add_option("--revision", f.revision, "A hub model's branch, tag or commit (default: main)");
  sub->add_option("--download-dir", f.download_dir,
                  "Where a hub model is downloaded (default: the Hugging Face cache, $HF_HUB_CACHE)");
  sub->add_option("--distributed-executor-backend", f.distributed_executor_backend,
                  "vLLM's worker launcher: no effect on one device")
      ->check(CLI::IsMember({"mp", "ray", "uni", "external_launcher"}));
  sub->add_flag("--enable-chunked-prefill", f.enable_chunked_prefill,
                "Always on: a long prompt is chunked to the step's token budget");
  sub->add_option("--swap-space", f.swap_space,
                  "Host swap area for preempted requests' KV blocks, in GiB (default 4 on CUDA, 0 on the "
                  "CPU; see --preemption-mode)");
  sub->add_flag("--enable-lora", f.enable_lora, "Refused: LoRA adapters are not supported");
  sub->add_option("--lora-modules", f.lora_modules, "Refused: LoRA adapters are not supported")
      ->expected(1, -1);
}

Status apply_vllm_engine_flags(const EngineFlags& f, Device device, EngineConfig* c) {
  NS_RETURN_IF_ERROR(refuse_parallel("--tensor-parallel-size", f.tensor_parallel_size, "tensor parallelism"));
  NS_RETURN_IF_ERROR(
      refuse_parallel("--pipeline-parallel-size", f.pipeline_parallel_size, "pipeline parallelism"));
  NS_RETURN_IF_ERROR(refuse_parallel("--data-parallel-size", f.data_parallel_size, "data parallelism"));
  if (f.enable_lora || !f.lora_modules.empty()) {
    return invalid_argument(std::string(f.enable_lora ? "--enable-lora" : "--lora-modules") +
                            ": LoRA adapters are not supported; merge the adapter into the weights first");
  }
  if (f.swap_space.has_value()) {
    if (!(*f.swap_space >= 0.0 && *f.swap_space <= 1 << 20))
      return invalid_argument("--swap-space must be in [0, 1048576] GiB");
    c->swap_space_bytes = static_cast<int64_t>(*f.swap_space * static_cast<double>(int64_t{1} << 30));
  }
  if (!f.quantization.empty()) {
    if (f.quantization != "fp8") {
      return invalid_argument("--quantization " + f.quantization +
                              ": not supported; fp8 (CUDA) is, and quantized weights are read as GGUF files "
                              "(Q8_0, Q4_0, Q4_1, Q4_K, Q6_K) without the flag");
    }
    if (device != Device::kCUDA) {
      return invalid_argument("--quantization fp8: this run is on the CPU; FP8 weights run on --device cuda "
                              "(on the CPU, read a quantized GGUF)");
    }
    c->fp8_weights = true;
  }
  const bool half = f.dtype == "half" || f.dtype == "float16";
  const bool bf16 = f.dtype == "bfloat16";
  const bool f32 = f.dtype == "float" || f.dtype == "float32";
  if (device == Device::kCUDA) {
    if (half || f32) {
      return invalid_argument("--dtype " + f.dtype +
                              ": the CUDA runner computes in bfloat16 (auto or bfloat16)");
    }
    return Status::ok_status();
  }
  // The CPU: no GPU memory to divide, no cuBLASLt. Refused rather than dropped.
  if (f.gpu_memory_utilization.has_value()) {
    return invalid_argument(
        "--gpu-memory-utilization: this run is on the CPU, which has no GPU memory to share "
        "out; size the KV pool with --kv-cache-memory (default 1G) instead");
  }
  if (c->cublas_prefill) {
    return invalid_argument("--cublas-prefill: this run is on the CPU; cuBLASLt is CUDA's");
  }
  // The CPU computes in f32 with the weights as stored; the KV cache is the
  // state it keeps in the dtype asked for.
  if (!c->kv_cache_dtype.has_value() && (half || bf16 || f32)) {
    c->kv_cache_dtype = half ? DType::kF16 : bf16 ? DType::kBF16 : DType::kF32;
  }
  return Status::ok_status();
}

void note_vllm_engine_flags(const EngineFlags& f, Device device) {
  if (f.trust_remote_code) {
    NS_LOG(INFO) << "--trust-remote-code: no effect; nanoserve never runs code that comes with a model";
  }
  if (!f.distributed_executor_backend.empty()) {
    NS_LOG(INFO) << "--distributed-executor-backend " << f.distributed_executor_backend
                 << ": no effect; the model runs in this process on one device";
  }
  if (device != Device::kCPU) return;
  if (f.config.enforce_eager) {
    NS_LOG(INFO) << "--enforce-eager: the CPU runner always runs each step eagerly (no graphs to capture)";
  }
  if (f.config.async_scheduling.value_or(false)) {
    NS_LOG(INFO) << "--async-scheduling: the CPU computes each step on the engine's own thread, so nothing "
                 << "overlaps; the outputs are the same";
  }
  if (f.dtype == "half" || f.dtype == "float16" || f.dtype == "bfloat16") {
    NS_LOG(INFO) << "--dtype " << f.dtype
                 << ": the CPU computes in float32 with the weights as stored; the KV "
                 << "cache is " << f.dtype
                 << (f.kv_cache_dtype != "auto" ? " unless --kv-cache-dtype says" : "");
  }
}

void add_vllm_serve_flags(CLI::App* serve, VllmServeFlags& f) {
  serve->add_option(
      "--seed", f.seed,
      "Seed of the requests that bring none (each request's own seed is derived from it and its id)");
  serve
      ->add_option(
          "--generation-config", f.generation_config,
          "auto (default, as vLLM): the model folder's generation_config.json sets the sampling defaults "
          "(temperature, top_p, top_k, min_p, repetition_penalty; max_new_tokens caps max_tokens) of "
          "requests "
          "that omit them; FOLDER: that folder's file; vllm: none (neutral defaults)")
      ->capture_default_str();
  serve->add_flag("--disable-log-requests", f.disable_log_requests, "No log line per request");
  serve->add_flag("--disable-log-stats", f.disable_log_stats, "No periodic statistics line");
  serve
      ->add_option("--uvicorn-log-level", f.uvicorn_log_level,
                   "The log level (vLLM's name for it): critical, error, warning, info, debug, trace")
      ->check(CLI::IsMember({"critical", "error", "warning", "info", "debug", "trace"}));
}

Status apply_vllm_serve_flags(const VllmServeFlags& f, const std::string& model_path, EngineConfig* config,
                              server::SamplingDefaults* defaults) {
  if (f.seed.has_value()) config->seed = *f.seed;
  if (!f.uvicorn_log_level.empty()) {
    const std::string& l = f.uvicorn_log_level;
    set_log_level(l == "debug" || l == "trace" ? LogLevel::kDebug
                  : l == "info"                ? LogLevel::kInfo
                  : l == "warning"             ? LogLevel::kWarning
                                               : LogLevel::kError);
  }
  *defaults = {};
  const std::string& g = f.generation_config;
  if (g.empty() || g == "vllm") return Status::ok_status();
  const fs::path dir = g == "auto" ? fs::path(model_path) : fs::path(g);
  if (g != "auto" && !fs::is_directory(dir)) {
    return invalid_argument("--generation-config " + g +
                            ": not a folder (vllm, auto, or a folder that holds "
                            "generation_config.json)");
  }
  const fs::path file = dir / "generation_config.json";
  if (!fs::is_directory(dir) || !fs::exists(file)) return Status::ok_status();  // no defaults to apply
  StatusOr<nlohmann::json> j = read_json_file(file.string(), uint64_t{1} << 20);
  if (!j.ok()) return invalid_argument("--generation-config " + g + ": " + j.status().message());
  StatusOr<server::SamplingDefaults> d = server::sampling_defaults_from_generation_config(*j);
  if (!d.ok())
    return invalid_argument("--generation-config " + g + ": " + file.string() + ": " + d.status().message());
  *defaults = *d;
  if (!defaults->empty()) {
    NS_LOG(INFO) << "--generation-config " << g << ": requests that omit them get " << file.string()
                 << "'s sampling defaults: " << defaults->describe()
                 << " (--generation-config vllm for neutral defaults)";
  }
  return Status::ok_status();
}

std::vector<std::string> expand_vllm_short_flags(int argc, char** argv) {
  static constexpr std::pair<const char*, const char*> kShort[] = {{"-tp", "--tensor-parallel-size"},
                                                                   {"-pp", "--pipeline-parallel-size"},
                                                                   {"-dp", "--data-parallel-size"}};
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(argc));
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    for (const auto& [s, l] : kShort) {
      const size_t n = std::strlen(s);
      if (a.compare(0, n, s) == 0 && (a.size() == n || a[n] == '=')) {
        a = l + a.substr(n);
        break;
      }
    }
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace nanoserve::cli
