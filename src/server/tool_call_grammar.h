// The grammar that makes the model emit a tool call (tool_choice "required" or a named
// function): one call, or with parallel_tool_calls one or more, of the given tools, each
// {"name": N, "<arguments key>": <a value valid against the tool's parameters schema>}, wrapped
// in the format's markers (api/tool_call_parser.h), so the parser always finds the calls.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "api/tool_call_parser.h"
#include "grammar/grammar.h"

namespace pagoda::server {

// tools: the request's tools array; only: a function name, or empty for any of them.
Result<grammar::Grammar> tool_call_grammar(const api::ToolCallFormat& format, const nlohmann::ordered_json& tools,
                                           const std::string& only, bool parallel);

}  // namespace pagoda::server
