// The structured-output fields of a completion or chat request -> StructuredOutput.
//
//   response_format: {"type": "text"} | {"type": "json_object"} |
//                    {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
//   structured_outputs (vLLM): {"json": schema | text, "regex", "choice", "grammar", "json_object": true}
//   guided_json / guided_regex / guided_choice / guided_grammar (vLLM, older names)
//
// At most one constraint may be given (a 400 names the second). Options we cannot honour
// (guided_whitespace_pattern, structural_tag, ...) are a 400. Schemas keep their key order (the
// body is re-read as ordered JSON when one of these fields is present): properties are generated
// in schema order. The schema itself is checked when compiled (server side), not here.
#pragma once

#include <optional>
#include <string_view>

#include "api/openai_request.h"

namespace pagoda::api {

std::optional<ApiError> parse_structured_output(std::string_view body, const nlohmann::json& parsed, StructuredOutput* out);

}  // namespace pagoda::api
