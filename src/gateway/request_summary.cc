#include "gateway/request_summary.h"

#include <nlohmann/json.hpp>

namespace pagoda::gateway {
namespace {

using json = nlohmann::json;

std::string text_of_content(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array())
    for (const auto& part : content)
      if (part.is_object() && part.contains("text") && part["text"].is_string()) out += part["text"].get<std::string>();
  return out;
}

std::string text_of_prompt(const json& p) {
  if (p.is_string()) return p.get<std::string>();
  if (p.is_array() && !p.empty()) {
    if (p[0].is_string()) return p[0].get<std::string>();
    if (p[0].is_number_integer()) {
      std::string out;
      for (const auto& id : p) out += (out.empty() ? "" : " ") + id.dump();
      return out;
    }
    if (p[0].is_array()) return text_of_prompt(p[0]);
  }
  return {};
}

}  // namespace

Result<RequestSummary> summarize_request(bool chat, const std::string& body, int64_t default_max_tokens) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("the request body is not a JSON object");
  RequestSummary s;
  if (j.contains("model")) {
    if (!j["model"].is_string()) return invalid_argument("'model' must be a string");
    s.model = j["model"].get<std::string>();
  }
  if (j.contains("stream")) {
    if (!j["stream"].is_boolean()) return invalid_argument("'stream' must be a boolean");
    s.stream = j["stream"].get<bool>();
  }
  s.max_tokens = default_max_tokens;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < 0)
      return invalid_argument("'{}' must be a non-negative integer", key);
    s.max_tokens = j[key].get<int64_t>();
  }
  if (chat) {
    if (!j.contains("messages") || !j["messages"].is_array()) return invalid_argument("'messages' must be an array");
    for (const auto& m : j["messages"]) {
      if (!m.is_object()) return invalid_argument("each message must be an object");
      const std::string role = m.contains("role") && m["role"].is_string() ? m["role"].get<std::string>() : "";
      s.affinity_text += role + '\x1f' + (m.contains("content") ? text_of_content(m["content"]) : "") + '\x1e';
    }
  } else {
    if (!j.contains("prompt")) return invalid_argument("'prompt' is required");
    s.affinity_text = text_of_prompt(j["prompt"]);
  }
  s.prompt_chars = static_cast<int64_t>(s.affinity_text.size());
  s.estimated_tokens = (s.prompt_chars + 3) / 4 + s.max_tokens;
  return s;
}

}  // namespace pagoda::gateway
