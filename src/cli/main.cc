// nanoserve: generate | serve | bench | inspect | tokenize

#include <CLI/CLI.hpp>

#include <utility>
#include <vector>

#include "cli/commands.h"

int main(int argc, char** argv) {
  using namespace nanoserve::cli;
  CLI::App app{"nanoserve: an LLM inference engine"};
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, CommandRun>> commands;
  auto add = [&](CommandRun run) { commands.emplace_back(app.get_subcommands({}).back(), std::move(run)); };
  add(add_inspect_command(app));
  add(add_tokenize_command(app));
  add(add_generate_command(app));
  add(add_serve_command(app));
  add(add_bench_command(app));
  add(add_render_template_command(app));
  CLI11_PARSE(app, argc, argv);
  for (auto& [sub, run] : commands) {
    if (sub->parsed()) return run();
  }
  return 1;
}
