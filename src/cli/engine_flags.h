#pragma once
// Engine flags shared by generate, bench and serve: scheduler limits, the KV
// pool size, threads.

#include <CLI/CLI.hpp>

#include <string>

#include "core/status.h"
#include "engine/engine.h"

namespace nanoserve::cli {

struct EngineFlags {
  EngineConfig config;
  std::string kv_cache_memory;  // "1073741824", "512M", "2G"
  int threads = 0;              // 0: all cores
};

void add_engine_flags(CLI::App* sub, EngineFlags& flags);

// The EngineConfig the flags describe; INVALID_ARGUMENT naming the flag.
StatusOr<EngineConfig> engine_config_from_flags(const EngineFlags& flags);

}  // namespace nanoserve::cli
