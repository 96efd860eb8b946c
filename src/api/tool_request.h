// The tool-calling fields of a chat request: tools, tool_choice, parallel_tool_calls.
//
//   tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}]
//   tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name": N}}
//   parallel_tool_calls: bool (default true)
//
// Checked here: shapes, unique names matching [A-Za-z0-9_-]{1,64}, a named choice that exists,
// a choice other than "none" needs tools. Tools keep their key order (the chat template renders
// them; the grammar generates arguments in parameter order).
#pragma once

#include <optional>
#include <string_view>

#include "api/openai_request.h"

namespace pagoda::api {

std::optional<ApiError> parse_tools(std::string_view body, const nlohmann::json& parsed, ChatRequest* out);

}  // namespace pagoda::api
