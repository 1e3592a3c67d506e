#pragma once
// nanoserve inspect FOLDER: what a Hugging Face folder holds.

#include <string>

namespace nanoserve::cli {

// Prints the folder's shards, ModelConfig, tokenizer and tensors; exits 1 with
// the Status when the folder does not load.
int run_inspect_hf(const std::string& folder, bool no_tensors);

}  // namespace nanoserve::cli
