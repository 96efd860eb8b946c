#include "api/tool_request.h"

#include <cctype>
#include <set>

namespace pagoda::api {

namespace {
bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}
}  // namespace

std::optional<ApiError> parse_tools(std::string_view body_text, const nlohmann::json& parsed, ChatRequest* out) {
  using ojson = nlohmann::ordered_json;
  auto has = [&](const char* k) {
    auto it = parsed.find(k);
    return it != parsed.end() && !it->is_null();
  };
  if (!has("tools") && !has("tool_choice") && !has("parallel_tool_calls")) return std::nullopt;
  const ojson body = ojson::parse(body_text.begin(), body_text.end(), nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return bad_request("the body is not valid JSON");
  std::set<std::string> names;
  if (has("tools")) {
    const ojson& t = body["tools"];
    if (!t.is_array()) return bad_request("'tools' must be a list", "tools");
    for (size_t i = 0; i < t.size(); ++i) {
      const std::string p = "tools[" + std::to_string(i) + "]";
      const ojson& tool = t[i];
      if (!tool.is_object()) return bad_request("'" + p + "' must be an object", "tools");
      if (!tool.contains("type") || tool["type"] != "function") return bad_request("'" + p + ".type' must be \"function\"", "tools");
      if (!tool.contains("function") || !tool["function"].is_object())
        return bad_request("'" + p + ".function' must be an object", "tools");
      const ojson& f = tool["function"];
      if (!f.contains("name") || !f["name"].is_string() || !valid_name(f["name"].get<std::string>()))
        return bad_request("'" + p + ".function.name' must be 1-64 characters of a-z, A-Z, 0-9, _ and -", "tools");
      if (!names.insert(f["name"].get<std::string>()).second)
        return bad_request("'" + p + ".function.name' repeats the tool '" + f["name"].get<std::string>() + "'", "tools");
      if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
        return bad_request("'" + p + ".function.parameters' must be a JSON Schema object", "tools");
      if (f.contains("description") && !f["description"].is_null() && !f["description"].is_string())
        return bad_request("'" + p + ".function.description' must be a string", "tools");
    }
    if (!t.empty()) out->tools = t;
  }
  if (has("tool_choice")) {
    const ojson& c = body["tool_choice"];
    if (c.is_string()) {
      const std::string s = c.get<std::string>();
      if (s == "none") out->tool_choice = ChatRequest::ToolChoice::kNone;
      else if (s == "auto") out->tool_choice = ChatRequest::ToolChoice::kAuto;
      else if (s == "required") out->tool_choice = ChatRequest::ToolChoice::kRequired;
      else return bad_request("'tool_choice' must be none, auto, required or a named function; got '" + s + "'", "tool_choice");
    } else if (c.is_object() && c.contains("function") && c["function"].is_object() && c["function"].contains("name") &&
               c["function"]["name"].is_string()) {
      if (c.contains("type") && c["type"] != "function") return bad_request("'tool_choice.type' must be \"function\"", "tool_choice");
      out->tool_choice = ChatRequest::ToolChoice::kNamed;
      out->tool_choice_name = c["function"]["name"].get<std::string>();
      if (!names.count(out->tool_choice_name))
        return bad_request("'tool_choice' names the function '" + out->tool_choice_name + "', which is not in 'tools'", "tool_choice");
    } else {
      return bad_request("'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice");
    }
    if (out->tool_choice != ChatRequest::ToolChoice::kNone && out->tools.is_null())
      return bad_request("'tool_choice' other than none needs 'tools'", "tool_choice");
  }
  if (has("parallel_tool_calls")) {
    if (!body["parallel_tool_calls"].is_boolean()) return bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    out->parallel_tool_calls = body["parallel_tool_calls"].get<bool>();
  }
  if (out->tools.is_null()) out->tool_choice = ChatRequest::ToolChoice::kNone;
  return std::nullopt;
}

}  // namespace pagoda::api
