#include <cstdio>

#include "cli/commands.h"

namespace nanoserve::cli {

CommandRun add_serve_command(CLI::App& app) {
  app.add_subcommand("serve", "(not built yet)");
  return [] {
    std::fprintf(stderr, "nanoserve serve: not built yet\n");
    return 2;
  };
}

}  // namespace nanoserve::cli
