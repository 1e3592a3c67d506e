// nanoserve: generate | serve | bench | inspect | tokenize | run-batch | version

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/vllm_flags.h"

int main(int argc, char** argv) {
  using namespace nanoserve::cli;
  CLI::App app{"nanoserve: an LLM inference engine"};
  app.require_subcommand(1);
  // `nanoserve --version` and `nanoserve version`: the same line, exit 0.
  const std::string version_line = std::string("nanoserve ") + NANOSERVE_VERSION;
  app.set_version_flag("--version", version_line, "print the version and exit");
  CLI::App* version = app.add_subcommand("version", "print the version and exit");
  std::vector<std::pair<CLI::App*, CommandRun>> commands;
  auto add = [&](CommandRun run) { commands.emplace_back(app.get_subcommands({}).back(), std::move(run)); };
  add(add_inspect_command(app));
  add(add_tokenize_command(app));
  add(add_generate_command(app));
  add(add_serve_command(app));
  add(add_bench_command(app));
  add(add_render_template_command(app));
  add(add_run_batch_command(app));
  // A first word that is no command and no flag: say which, rather than
  // CLI11's "A subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (CLI::App* sub : app.get_subcommands({})) {
      known = known || sub->check_name(argv[1]);
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "nanoserve: unknown command '%s' (commands: %s); see nanoserve --help\n", argv[1],
                   names.c_str());
      return 2;
    }
  }
  // vLLM's -tp/-pp/-dp are two-letter short flags, which CLI11 does not take: given their long names.
  std::vector<std::string> args = expand_vllm_short_flags(argc, argv);
  args.erase(args.begin());
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
  try {
    app.parse(std::move(args));
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (version->parsed()) {
    std::printf("%s\n", version_line.c_str());
    return 0;
  }
  for (auto& [sub, run] : commands) {
    if (sub->parsed()) return run();
  }
  return 1;
}
