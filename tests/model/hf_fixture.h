#pragma once
// The default model exported as a Hugging Face folder (f32 safetensors in two
// shards, tokenizer.json, ...) by tests/fixtures/hf/make_hf_folder.py. It is
// about 540 MB, so it lives under build/ and scripts/test makes it before the
// tests run; NANOSERVE_HF_FIXTURE points elsewhere. Tests that need it skip,
// saying how to make it, when it is absent.

#include <cstdlib>
#include <filesystem>
#include <string>

namespace nanoserve::testing {

inline std::string hf_fixture_dir() {
  if (const char* env = std::getenv("NANOSERVE_HF_FIXTURE"); env != nullptr && *env) return env;
  return NS_SOURCE_DIR "/build/fixtures/hf/smollm2-135m";
}

inline bool hf_fixture_present() {
  return std::filesystem::exists(std::filesystem::path(hf_fixture_dir()) / "config.json");
}

inline const char* kHfFixtureHint =
    "the HF export of the default model is missing: run .venv/bin/python tests/fixtures/hf/make_hf_folder.py "
    "(scripts/test does)";

}  // namespace nanoserve::testing
