#include <cstdio>

#include "cli/commands.h"

namespace nanoserve::cli {

CommandRun add_bench_command(CLI::App& app) {
  app.add_subcommand("bench", "(not built yet)");
  return [] {
    std::fprintf(stderr, "nanoserve bench: not built yet\n");
    return 2;
  };
}

}  // namespace nanoserve::cli
