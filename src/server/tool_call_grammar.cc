#include "server/tool_call_grammar.h"

#include "grammar/json_schema_compiler.h"

namespace pagoda::server {

using namespace grammar;

Result<Grammar> tool_call_grammar(const api::ToolCallFormat& format, const nlohmann::ordered_json& tools,
                                  const std::string& only, bool parallel) {
  GrammarBuilder b;
  std::vector<ExprPtr> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& fn = tools[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    nlohmann::ordered_json params = fn.contains("parameters") && !fn["parameters"].is_null() ? fn["parameters"]
                                                                                             : nlohmann::ordered_json{{"type", "object"}};
    auto args = add_json_schema(&b, params, "tool" + std::to_string(i) + "-");
    if (!args.ok()) return invalid_argument("tools[{}].function.parameters: {}", i, args.status().message());
    calls.push_back(ex::seq({ex::lit("{\"name\": " + json_quote(name) + ", \"" + format.arguments_key + "\": "), *args, ex::lit("}")}));
  }
  if (calls.empty()) return invalid_argument("no tool named '{}'", only);
  b.define("call", ex::alt(std::move(calls)));
  const ExprPtr call = ex::ref("call");
  ExprPtr root;
  if (format.name == "hermes") {
    const ExprPtr one = ex::seq({ex::lit(format.begin + "\n"), call, ex::lit("\n" + format.end)});
    root = parallel ? ex::seq({one, ex::star(ex::seq({ex::lit("\n"), one}))}) : one;
  } else if (format.list) {
    root = ex::seq({ex::lit(format.begin + "["), call, parallel ? ex::star(ex::seq({ex::lit(", "), call})) : ex::empty(), ex::lit("]")});
  } else if (!format.separator.empty()) {
    root = parallel ? ex::seq({call, ex::star(ex::seq({ex::lit(format.separator + " "), call}))}) : call;
  } else {
    root = parallel ? ex::seq({ex::lit("["), call, ex::star(ex::seq({ex::lit(", "), call})), ex::lit("]")}) : call;
  }
  b.define("root", root);
  return b.build("root");
}

}  // namespace pagoda::server
