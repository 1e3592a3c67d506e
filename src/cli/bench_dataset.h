#pragma once
// Prompts from a file, as vLLM's benchmarks read them, for `bench` and
// `bench serve` (--dataset-name NAME --dataset-path FILE):
//
//   sharegpt  a JSON list of {"conversations": [{"from": "human", "value": P},
//             {"from": "gpt", "value": C}, ...]}: the first turn is the prompt,
//             the second the reference reply, whose token count (special
//             tokens included, as vLLM counts) is the request's output length
//             (unless --sharegpt-output-len). As vLLM does: the list is
//             shuffled with --seed (our own shuffle, so not vLLM's order),
//             entries with fewer than two turns are skipped, and so are pairs
//             with fewer than 4 prompt or reply tokens, a prompt over 1024
//             tokens, or over 2048 together.
//   custom    JSON Lines, one {"prompt": P} a line (other keys ignored); every
//             request's output length is --custom-output-len (vLLM's default
//             256). Taken in file order.
//
// Both take the first --num-prompts that pass; fewer is an error naming the
// file and how many it gave.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace nanoserve::cli {

struct DatasetFlags {
  std::string path;
  std::optional<int> sharegpt_output_len;
  int custom_output_len = 256;
};

struct DatasetPrompt {
  std::string prompt;
  int32_t prompt_len = 0;  // tokens, by the tokenizer given
  int32_t output_len = 0;
};

// Registers --dataset-path, --sharegpt-output-len, --custom-output-len.
void add_dataset_flags(CLI::App* sub, DatasetFlags& flags);

// Tokens of a text, by the model's tokenizer (no special tokens added).
using CountTokens = std::function<StatusOr<int64_t>(const std::string&)>;

// The first `num_prompts` prompts of dataset `name` ("sharegpt" or "custom")
// at flags.path. INVALID_ARGUMENT naming the file, the line or entry, and the
// field for a malformed file, or when it holds too few.
StatusOr<std::vector<DatasetPrompt>> load_dataset(const std::string& name, const DatasetFlags& flags,
                                                  int num_prompts, uint64_t seed, const CountTokens& count);

}  // namespace nanoserve::cli
