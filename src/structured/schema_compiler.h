#pragma once
// JSON schema -> Grammar. The supported subset is listed in
// docs/structured_output.md; any other keyword is refused by name, with its
// place in the schema as a JSON pointer ("unsupported keyword 'pattern' at
// #/properties/name").

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "structured/grammar.h"

namespace nanoserve::structured {

// response_format json_schema: the value the schema describes. Objects keep
// the schema's property order, so an ordered_json schema (as the request
// sent it) is generated in that order; a sorted json one in sorted order.
StatusOr<Grammar> compile_schema(const nlohmann::ordered_json& schema);
// response_format json_object: any JSON object.
Grammar json_object_grammar();

}  // namespace nanoserve::structured
