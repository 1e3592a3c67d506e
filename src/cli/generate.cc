#include <cstdio>

#include "cli/commands.h"

namespace nanoserve::cli {

CommandRun add_generate_command(CLI::App& app) {
  app.add_subcommand("generate", "(not built yet)");
  return [] {
    std::fprintf(stderr, "nanoserve generate: not built yet\n");
    return 2;
  };
}

}  // namespace nanoserve::cli
