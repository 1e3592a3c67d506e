#include <cstdio>

#include "cli/commands.h"

namespace nanoserve::cli {

CommandRun add_tokenize_command(CLI::App& app) {
  app.add_subcommand("tokenize", "(not built yet)");
  return [] {
    std::fprintf(stderr, "nanoserve tokenize: not built yet\n");
    return 2;
  };
}

}  // namespace nanoserve::cli
