#include <cstdio>

#include "cli/commands.h"

namespace nanoserve::cli {

CommandRun add_inspect_command(CLI::App& app) {
  app.add_subcommand("inspect", "(not built yet)");
  return [] {
    std::fprintf(stderr, "nanoserve inspect: not built yet\n");
    return 2;
  };
}

}  // namespace nanoserve::cli
