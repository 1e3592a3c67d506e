#pragma once
// vLLM's command line, taken as it is pasted (docs/vllm-flags.md maps every
// flag). Each flag is honoured where it has a meaning here, or refused with
// its name and the reason; none is taken and then silently dropped.
//
//   engine flags (generate, bench, serve): --dtype, -tp/--tensor-parallel-size,
//     -pp/--pipeline-parallel-size, -dp/--data-parallel-size,
//     --trust-remote-code, --quantization, --tokenizer, --revision, --download-dir
//   serve flags: --seed, --generation-config, --disable-log-requests,
//     --disable-log-stats, --uvicorn-log-level

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/engine_flags.h"
#include "core/status.h"
#include "core/tensor.h"
#include "engine/engine.h"
#include "server/sampling_defaults.h"

namespace nanoserve::cli {

// Registers the engine flags above on `sub` (add_engine_flags calls it).
void add_vllm_engine_flags(CLI::App* sub, EngineFlags& flags);

// Folds the engine flags into `config` for a run on `device`: --dtype sets
// the KV cache dtype where the runner computes in f32 (the CPU), and the
// flags that cannot be honoured are refused, INVALID_ARGUMENT naming the flag
// and the reason: parallel sizes above 1, --quantization other than fp8, a
// --dtype the CUDA runner does not compute in, and GPU-only flags on a CPU run
// (--gpu-memory-utilization, --cublas-prefill, --quantization fp8).
Status apply_vllm_engine_flags(const EngineFlags& flags, Device device, EngineConfig* config);

// The one-time start-up notes for flags taken without effect, or with a
// partial one, on `device` (--trust-remote-code, --enforce-eager on the CPU,
// a half-precision --dtype on the CPU).
void note_vllm_engine_flags(const EngineFlags& flags, Device device);

struct VllmServeFlags {
  std::optional<uint64_t> seed;  // the engine seed of requests that bring none
  // auto (vLLM's default): the model folder's generation_config.json; FOLDER: that folder's;
  // vllm: none. Its sampling defaults apply to the fields a request leaves out.
  std::string generation_config = "auto";
  bool disable_log_requests = false;
  bool disable_log_stats = false;
  std::string uvicorn_log_level;  // critical | error | warning | info | debug | trace
};

void add_vllm_serve_flags(CLI::App* serve, VllmServeFlags& flags);

// Applies the serve flags: the seed into `config`, the log level, and the
// sampling defaults of --generation-config into `defaults` (none for vllm, or
// when the folder has no generation_config.json; a model file's folder is not
// read: a GGUF carries no generation config). INVALID_ARGUMENT naming the flag
// for a FOLDER that is not one, or a file with a bad value.
Status apply_vllm_serve_flags(const VllmServeFlags& flags, const std::string& model_path,
                              EngineConfig* config, server::SamplingDefaults* defaults);

// vLLM's two-letter short flags (-tp 2, -tp=2, and -pp, -dp) as their long
// names, which CLI11 takes; every other argument is kept as it is.
std::vector<std::string> expand_vllm_short_flags(int argc, char** argv);

}  // namespace nanoserve::cli
