#pragma once
// The model of a command, given as `nanoserve CMD MODEL` (as vLLM takes it)
// or as `-m MODEL`: a .gguf file or a Hugging Face folder. Neither: the
// default model. Both, or two positionals, is an error naming them.

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "core/status.h"

namespace nanoserve::cli {

struct ModelArg {
  std::string flag;                     // -m, --model
  std::vector<std::string> positional;  // MODEL (at most one accepted)
};

// Registers MODEL and -m,--model on `sub`.
void add_model_arg(CLI::App* sub, ModelArg& arg, const std::string& help);

// The model path given (empty: none, the default model applies);
// INVALID_ARGUMENT naming both values when two are given.
StatusOr<std::string> resolve_model_arg(const ModelArg& arg);

}  // namespace nanoserve::cli
