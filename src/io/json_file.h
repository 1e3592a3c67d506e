#pragma once
// A whole JSON file (config.json, tokenizer.json, an index), read with a size
// bound and parsed without exceptions. Errors name the file.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace nanoserve {

// NOT_FOUND if the file cannot be opened, INVALID_ARGUMENT if it is larger
// than max_bytes, DATA_LOSS "PATH: not valid JSON (...)" if it does not parse
// or nests deeper than max_depth.
StatusOr<nlohmann::json> read_json_file(const std::string& path, uint64_t max_bytes, int max_depth = 64);

}  // namespace nanoserve
