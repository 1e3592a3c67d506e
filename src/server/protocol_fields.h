#pragma once
// The generation fields beyond the common sampling set, read from the parsed
// body by parse_chat_request / parse_completion_request (protocol.cc):
//   stop_token_ids, min_tokens, logit_bias and best_of, honoured;
//   tools, tool_choice, functions, function_call and parallel_tool_calls,
//   refused by name unless they ask for nothing;
// and the names of the top-level fields that the endpoint does not know,
// which are ignored (as OpenAI does) and reported for the metric.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/protocol.h"

namespace nanoserve::server {

inline constexpr size_t kMaxLogitBias = 300;
inline constexpr size_t kMaxStopTokenIds = 16;
inline constexpr float kMaxLogitBiasValue = 100.0f;

// Reads the fields above into `r` (whose n and stream are already read). The
// first problem, as a 400 naming the field.
std::optional<ApiError> read_extra_fields(const nlohmann::json& body, GenerateRequest* r,
                                          const ProtocolLimits& limits);

// Top-level keys of `body` that `endpoint` neither reads nor refuses, in key order.
std::vector<std::string> unknown_fields(const nlohmann::json& body, Endpoint endpoint);

}  // namespace nanoserve::server
