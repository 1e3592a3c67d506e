#pragma once
// Each subcommand registers its flags on the app and returns the function
// that runs it once parsed. One file per subcommand.

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace nanoserve::cli {

using CommandRun = std::function<int()>;

CommandRun add_inspect_command(CLI::App& app);
CommandRun add_tokenize_command(CLI::App& app);
CommandRun add_generate_command(CLI::App& app);
CommandRun add_serve_command(CLI::App& app);
CommandRun add_bench_command(CLI::App& app);
// `bench serve`, a subcommand of `bench` (bench_serve.cc).
CommandRun add_bench_serve_command(CLI::App& bench);
CommandRun add_render_template_command(CLI::App& app);
CommandRun add_run_batch_command(CLI::App& app);

// The default model: $NANOSERVE_MODEL, else models/<default> beside the
// source tree or the working directory.
std::string default_model_path();

}  // namespace nanoserve::cli
