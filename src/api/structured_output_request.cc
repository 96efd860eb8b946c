#include "api/structured_output_request.h"

namespace pagoda::api {

namespace {

using ojson = nlohmann::ordered_json;
using Kind = StructuredOutput::Kind;

std::optional<ApiError> set(StructuredOutput* out, Kind kind, std::string text, std::vector<std::string> choices,
                            const std::string& param) {
  if (out->kind != Kind::kNone)
    return bad_request("'" + param + "' and '" + out->param + "' both constrain the output; give only one", param);
  out->kind = kind;
  out->text = std::move(text);
  out->choices = std::move(choices);
  out->param = param;
  return std::nullopt;
}

std::optional<ApiError> schema_field(const ojson& v, const std::string& param, StructuredOutput* out) {
  if (v.is_string()) return set(out, Kind::kJsonSchema, v.get<std::string>(), {}, param);
  if (v.is_object() || v.is_boolean()) return set(out, Kind::kJsonSchema, v.dump(), {}, param);
  return bad_request("'" + param + "' must be a JSON Schema (an object, or its JSON text)", param);
}

std::optional<ApiError> string_field(const ojson& v, const std::string& param, Kind kind, StructuredOutput* out) {
  if (!v.is_string() || v.get<std::string>().empty()) return bad_request("'" + param + "' must be a non-empty string", param);
  return set(out, kind, v.get<std::string>(), {}, param);
}

std::optional<ApiError> choice_field(const ojson& v, const std::string& param, StructuredOutput* out) {
  if (!v.is_array() || v.empty()) return bad_request("'" + param + "' must be a non-empty list of strings", param);
  std::vector<std::string> choices;
  for (const auto& c : v) {
    if (!c.is_string() || c.get<std::string>().empty()) return bad_request("'" + param + "' must list non-empty strings", param);
    choices.push_back(c.get<std::string>());
  }
  return set(out, Kind::kChoice, {}, std::move(choices), param);
}

bool given(const ojson& body, const char* key) { return body.contains(key) && !body[key].is_null(); }

}  // namespace

std::optional<ApiError> parse_structured_output(std::string_view body_text, const nlohmann::json& parsed, StructuredOutput* out) {
  static const char* const kFields[] = {"response_format", "structured_outputs", "guided_json", "guided_regex",
                                        "guided_choice", "guided_grammar", "guided_whitespace_pattern", "guided_decoding_backend"};
  bool any = false;
  for (const char* k : kFields) {
    auto it = parsed.find(k);
    any |= it != parsed.end() && !it->is_null();
  }
  if (!any) return std::nullopt;
  // Key order matters for schemas (properties are generated in order): read the body again.
  const ojson body = ojson::parse(body_text.begin(), body_text.end(), nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return bad_request("the body is not valid JSON");

  if (given(body, "response_format")) {
    const ojson& rf = body["response_format"];
    if (!rf.is_object()) return bad_request("'response_format' must be an object", "response_format");
    const auto t = rf.find("type");
    if (t == rf.end() || !t->is_string()) return bad_request("'response_format.type' must be a string", "response_format");
    const std::string type = t->get<std::string>();
    if (type == "json_object") {
      if (auto e = set(out, Kind::kJsonObject, {}, {}, "response_format")) return e;
    } else if (type == "json_schema") {
      const auto js = rf.find("json_schema");
      if (js == rf.end() || !js->is_object())
        return bad_request("'response_format.json_schema' must be an object with a 'schema'", "response_format");
      const auto schema = js->find("schema");
      if (schema == js->end() || schema->is_null())
        return bad_request("'response_format.json_schema.schema' is required", "response_format");
      if (auto name = js->find("name"); name != js->end() && !name->is_string())
        return bad_request("'response_format.json_schema.name' must be a string", "response_format");
      if (auto e = schema_field(*schema, "response_format", out)) return e;
    } else if (type != "text") {
      return bad_request("'response_format.type' must be one of text, json_object, json_schema; got '" + type + "'",
                         "response_format");
    }
  }
  if (given(body, "structured_outputs")) {
    const ojson& so = body["structured_outputs"];
    if (!so.is_object()) return bad_request("'structured_outputs' must be an object", "structured_outputs");
    for (auto it = so.begin(); it != so.end(); ++it) {
      const std::string& k = it.key();
      const ojson& v = it.value();
      const std::string param = "structured_outputs." + k;
      if (v.is_null()) continue;
      if (k == "json") {
        if (auto e = schema_field(v, param, out)) return e;
      } else if (k == "regex") {
        if (auto e = string_field(v, param, Kind::kRegex, out)) return e;
      } else if (k == "grammar") {
        if (auto e = string_field(v, param, Kind::kGrammar, out)) return e;
      } else if (k == "choice") {
        if (auto e = choice_field(v, param, out)) return e;
      } else if (k == "json_object") {
        if (!v.is_boolean()) return bad_request("'" + param + "' must be a boolean", param);
        if (v.get<bool>())
          if (auto e = set(out, Kind::kJsonObject, {}, {}, param)) return e;
      } else if (k == "disable_fallback" || k == "disable_any_whitespace" || k == "disable_additional_properties") {
        // Our engine has no fallback, never emits free whitespace and treats a missing
        // additionalProperties as false: these ask for what we already do.
        if (!v.is_boolean()) return bad_request("'" + param + "' must be a boolean", param);
      } else if (k == "backend" || k == "_backend" || k == "_backend_was_auto") {
        continue;  // engine selection: we have one
      } else {
        return bad_request("'" + param + "' is not supported", param);
      }
    }
  }
  if (given(body, "guided_json"))
    if (auto e = schema_field(body["guided_json"], "guided_json", out)) return e;
  if (given(body, "guided_regex"))
    if (auto e = string_field(body["guided_regex"], "guided_regex", Kind::kRegex, out)) return e;
  if (given(body, "guided_grammar"))
    if (auto e = string_field(body["guided_grammar"], "guided_grammar", Kind::kGrammar, out)) return e;
  if (given(body, "guided_choice"))
    if (auto e = choice_field(body["guided_choice"], "guided_choice", out)) return e;
  if (given(body, "guided_whitespace_pattern"))
    return bad_request("'guided_whitespace_pattern' is not supported", "guided_whitespace_pattern");
  if (given(body, "guided_decoding_backend") && !body["guided_decoding_backend"].is_string())
    return bad_request("'guided_decoding_backend' must be a string", "guided_decoding_backend");
  return std::nullopt;
}

}  // namespace pagoda::api
