#pragma once
// Engine flags shared by generate, bench and serve: scheduler limits, the KV
// pool size and dtype, prefix caching, threads.

#include <CLI/CLI.hpp>

#include <string>

#include "core/status.h"
#include "engine/engine.h"

namespace nanoserve::cli {

struct EngineFlags {
  EngineConfig config;
  std::string kv_cache_memory;  // "1073741824", "512M", "2G"
  std::string kv_cache_dtype = "auto";  // auto | f32 | f16 | bf16
  int threads = 0;              // 0: all cores
};

void add_engine_flags(CLI::App* sub, EngineFlags& flags);

// The EngineConfig the flags describe; INVALID_ARGUMENT naming the flag.
StatusOr<EngineConfig> engine_config_from_flags(const EngineFlags& flags);

}  // namespace nanoserve::cli
