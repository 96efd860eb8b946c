#include "api/openai_request.h"

#include "api/structured_output_request.h"
#include "api/tool_request.h"

#include <cmath>
#include <limits>

namespace pagoda::api {
namespace {

using json = nlohmann::json;

// Field readers: nullopt when the field is absent or null, an error when it has the wrong type or
// range. Each names the field in the error's `param`.
class Fields {
 public:
  explicit Fields(const json& obj) : obj_(obj) {}

  const json* get(const char* name) const {
    auto it = obj_.find(name);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::optional<ApiError> boolean(const char* name, bool* out) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) return bad_request(std::string("'") + name + "' must be a boolean", name);
    *out = v->get<bool>();
    return std::nullopt;
  }

  std::optional<ApiError> string(const char* name, std::string* out) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) return bad_request(std::string("'") + name + "' must be a string", name);
    *out = v->get<std::string>();
    return std::nullopt;
  }

  std::optional<ApiError> number(const char* name, float* out, double lo, double hi, bool lo_open = false) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) return bad_request(std::string("'") + name + "' must be a number", name);
    const double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi || (lo_open && d == lo))
      return bad_request(fmt(name, lo, hi, lo_open, d), name);
    *out = static_cast<float>(d);
    return std::nullopt;
  }

  std::optional<ApiError> integer(const char* name, int64_t* out, int64_t lo, int64_t hi) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!is_integer(*v)) return bad_request(std::string("'") + name + "' must be an integer", name);
    int64_t x;
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return bad_request(std::string("'") + name + "' is too large", name);
      x = static_cast<int64_t>(u);
    } else if (v->is_number_integer()) {
      x = v->get<int64_t>();
    } else {
      const double d = v->get<double>();
      if (d < -9.2e18 || d > 9.2e18) return bad_request(std::string("'") + name + "' is out of range", name);
      x = static_cast<int64_t>(d);
    }
    if (x < lo || x > hi)
      return bad_request(std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                             "], got " + std::to_string(x),
                         name);
    *out = x;
    return std::nullopt;
  }

  std::optional<ApiError> int32(const char* name, int32_t* out, int64_t lo, int64_t hi) const {
    int64_t x = *out;
    if (auto e = integer(name, &x, lo, hi)) return e;
    *out = static_cast<int32_t>(x);
    return std::nullopt;
  }

  static bool is_integer(const json& v) {
    if (v.is_number_integer()) return true;
    // 3.0 is an integer to Python clients that send floats.
    if (v.is_number_float()) {
      const double d = v.get<double>();
      return std::isfinite(d) && d == std::floor(d);
    }
    return false;
  }

 private:
  static std::string fmt(const char* name, double lo, double hi, bool lo_open, double got) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "'%s' must be in %s%g, %g], got %g", name, lo_open ? "(" : "[", lo, hi, got);
    return buf;
  }
  const json& obj_;
};

#define PAGODA_API_TRY(expr)          \
  do {                                \
    if (auto _e = (expr)) return _e;  \
  } while (0)

// Depth of nesting of JSON brackets outside strings; rejects bodies that would nest too deep
// before the parser sees them.
bool depth_ok(std::string_view s, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

std::optional<ApiError> token_id_array(const json& arr, const char* name, std::vector<int32_t>* out) {
  out->clear();
  out->reserve(arr.size());
  for (const auto& t : arr) {
    if (!Fields::is_integer(t)) return bad_request(std::string("'") + name + "' must be a list of integer token ids", name);
    const double d = t.get<double>();
    if (d < 0 || d > std::numeric_limits<int32_t>::max())
      return bad_request(std::string("'") + name + "' holds an out-of-range token id", name);
    out->push_back(static_cast<int32_t>(d));
  }
  return std::nullopt;
}

// logit_bias: {"<token id>": bias}, ids as decimal strings (OpenAI's shape), bias in [-100, 100].
std::optional<ApiError> parse_logit_bias(const json& lb, std::vector<std::pair<int32_t, float>>* out) {
  if (!lb.is_object()) return bad_request("'logit_bias' must be an object mapping token ids to biases", "logit_bias");
  out->clear();
  for (auto it = lb.begin(); it != lb.end(); ++it) {
    const std::string& key = it.key();
    int64_t id = -1;
    if (!key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos) id = std::stoll(key);
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      return bad_request("'logit_bias' keys must be token ids (non-negative integers as strings); got '" + key + "'",
                         "logit_bias");
    const json& v = it.value();
    if (!v.is_number()) return bad_request("'logit_bias' value for token " + key + " must be a number", "logit_bias");
    const double b = v.get<double>();
    if (!std::isfinite(b) || b < -kMaxLogitBias || b > kMaxLogitBias) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "'logit_bias' value for token %s must be in [-100, 100], got %g", key.c_str(), b);
      return bad_request(buf, "logit_bias");
    }
    out->emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_options(const json& body, GenerationOptions* o, bool chat) {
  Fields f(body);
  PAGODA_API_TRY(f.number("temperature", &o->temperature, 0, 2));
  PAGODA_API_TRY(f.number("top_p", &o->top_p, 0, 1, /*lo_open=*/true));
  PAGODA_API_TRY(f.int32("top_k", &o->top_k, -1, 1 << 30));
  if (o->top_k < 0) o->top_k = 0;
  PAGODA_API_TRY(f.number("min_p", &o->min_p, 0, 1));
  PAGODA_API_TRY(f.number("presence_penalty", &o->presence_penalty, -2, 2));
  PAGODA_API_TRY(f.number("frequency_penalty", &o->frequency_penalty, -2, 2));
  PAGODA_API_TRY(f.number("repetition_penalty", &o->repetition_penalty, 0, 2, /*lo_open=*/true));
  if (f.get("seed")) {
    int64_t seed = 0;
    PAGODA_API_TRY(f.integer("seed", &seed, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    o->seed = static_cast<uint64_t>(seed);
  }
  // max_completion_tokens (chat, newer clients) wins over the deprecated max_tokens.
  const int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
  PAGODA_API_TRY(f.int32("max_tokens", &o->max_tokens, 1, kMaxTokens));
  if (chat) PAGODA_API_TRY(f.int32("max_completion_tokens", &o->max_tokens, 1, kMaxTokens));
  PAGODA_API_TRY(f.int32("min_tokens", &o->min_tokens, 0, kMaxTokens));
  if (o->max_tokens > 0 && o->min_tokens > o->max_tokens)
    return bad_request("'min_tokens' must not exceed 'max_tokens'", "min_tokens");
  PAGODA_API_TRY(f.boolean("ignore_eos", &o->ignore_eos));
  PAGODA_API_TRY(f.boolean("include_stop_str_in_output", &o->include_stop_str_in_output));
  PAGODA_API_TRY(f.boolean("skip_special_tokens", &o->skip_special_tokens));
  if (const json* s = f.get("stop")) {
    if (s->is_string()) {
      o->stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (s->size() > kMaxStopStrings)
        return bad_request("'stop' holds more than " + std::to_string(kMaxStopStrings) + " strings", "stop");
      for (const auto& x : *s) {
        if (!x.is_string()) return bad_request("'stop' must be a string or a list of strings", "stop");
        o->stop.push_back(x.get<std::string>());
      }
    } else {
      return bad_request("'stop' must be a string or a list of strings", "stop");
    }
    if (auto err = check_stop_strings(o->stop)) return bad_request("'stop': " + *err, "stop");
  }
  if (const json* s = f.get("stop_token_ids")) {
    if (!s->is_array()) return bad_request("'stop_token_ids' must be a list of integers", "stop_token_ids");
    PAGODA_API_TRY(token_id_array(*s, "stop_token_ids", &o->stop_token_ids));
  }
  PAGODA_API_TRY(f.int32("n", &o->n, 1, kMaxN));
  o->best_of = o->n;
  PAGODA_API_TRY(f.int32("best_of", &o->best_of, 1, kMaxN));
  if (o->best_of < o->n)
    return bad_request("'best_of' (" + std::to_string(o->best_of) + ") must be at least 'n' (" + std::to_string(o->n) + ")",
                       "best_of");
  PAGODA_API_TRY(f.int32("truncate_prompt_tokens", &o->truncate_prompt_tokens, -1, std::numeric_limits<int32_t>::max()));
  if (f.get("truncate_prompt_tokens") && o->truncate_prompt_tokens == 0)
    return bad_request("'truncate_prompt_tokens' must be -1 (the model length) or at least 1", "truncate_prompt_tokens");
  if (f.get("add_special_tokens")) {
    bool add = false;
    PAGODA_API_TRY(f.boolean("add_special_tokens", &add));
    o->add_special_tokens = add;
  }
  PAGODA_API_TRY(f.boolean("return_tokens_as_token_ids", &o->return_tokens_as_token_ids));
  PAGODA_API_TRY(f.int32("priority", &o->priority, -(1 << 30), 1 << 30));
  PAGODA_API_TRY(f.string("user", &o->user));
  PAGODA_API_TRY(f.boolean("stream", &o->stream));
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) return bad_request("'stream_options' must be an object", "stream_options");
    if (!o->stream) return bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    PAGODA_API_TRY(Fields(*so).boolean("include_usage", &o->include_usage));
    PAGODA_API_TRY(Fields(*so).boolean("continuous_usage_stats", &o->continuous_usage));
    if (o->continuous_usage && !o->include_usage)
      return bad_request("'stream_options.continuous_usage_stats' needs 'stream_options.include_usage' set to true",
                         "stream_options");
  }
  if (o->stream && o->best_of > o->n)
    return bad_request("'best_of' greater than 'n' cannot be streamed (the best are known only at the end)", "best_of");
  if (const json* lb = f.get("logit_bias")) PAGODA_API_TRY(parse_logit_bias(*lb, &o->logit_bias));
  if (const json* pl = f.get("prompt_logprobs")) {
    if (!Fields::is_integer(*pl)) return bad_request("'prompt_logprobs' must be an integer in [0, 20]", "prompt_logprobs");
    PAGODA_API_TRY(f.int32("prompt_logprobs", &o->prompt_logprobs, 0, kMaxLogprobs));
  }
  return std::nullopt;
}

// Known request fields that would change the output and that we do not implement: a 400 when
// given anything but their default (null; then the value listed, or else false, an empty string,
// list or object). Fields that do not change the output (store, metadata, service_tier, user, cache_salt,
// prediction, ...) are not listed: they are accepted and have no effect, as vLLM does.
struct UnsupportedField {
  const char* name;
  const char* default_value;  // JSON text of the accepted non-empty default, or nullptr
  const char* why;
  bool chat_only;
};
constexpr UnsupportedField kUnsupportedFields[] = {
    {"use_beam_search", nullptr, "beam search is not implemented", false},
    {"length_penalty", "1", "it applies to beam search, which is not implemented", false},
    {"allowed_token_ids", nullptr, "use 'logit_bias' or a structured-output constraint", false},
    {"bad_words", nullptr, "use 'logit_bias' on the words' tokens", false},
    {"spaces_between_special_tokens", "true", "special tokens are always decoded as their text", false},
    {"logits_processors", nullptr, "custom logits processors cannot be loaded", false},
    {"vllm_xargs", nullptr, "custom logits processors cannot be loaded", false},
    {"return_token_ids", nullptr, "use /tokenize, or logprobs with return_tokens_as_token_ids", false},
    {"prompt_embeds", nullptr, "prompts are text or token ids", false},
    {"kv_transfer_params", nullptr, "disaggregated prefill is not implemented", false},
    {"mm_processor_kwargs", nullptr, "the models served are text only", false},
    {"echo", nullptr, "chat requests cannot echo (use /v1/completions)", true},
    {"chat_template", nullptr, "the model's own chat template is used", true},
    {"functions", nullptr, "use 'tools'", true},
    {"function_call", nullptr, "use 'tool_choice'", true},
    {"audio", nullptr, "the models served are text only", true},
    {"modalities", "[\"text\"]", "the models served are text only", true},
    {"web_search_options", nullptr, "there is no web search", true},
    {"verbosity", nullptr, "no served model takes a verbosity setting", true},
};

bool is_empty_value(const json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_string() && v.get_ref<const std::string&>().empty()) ||
         (v.is_array() && v.empty()) || (v.is_object() && v.empty());
}

std::optional<ApiError> reject_unsupported(const json& body, bool chat) {
  for (const auto& u : kUnsupportedFields) {
    if (u.chat_only && !chat) continue;
    auto it = body.find(u.name);
    if (it == body.end() || it->is_null()) continue;
    if (u.default_value ? *it == json::parse(u.default_value) : is_empty_value(*it)) continue;
    return bad_request(std::string("'") + u.name + "' is not supported: " + u.why, u.name, "unsupported_parameter");
  }
  return std::nullopt;
}

// Content of a chat message: a string, or a list of {type: "text", text} parts (joined by "\n",
// as vLLM does), or null.
std::optional<ApiError> message_content(const json& content, size_t i, std::string* out, bool* is_null) {
  const std::string param = "messages[" + std::to_string(i) + "].content";
  *is_null = false;
  if (content.is_null()) {
    *is_null = true;
    return std::nullopt;
  }
  if (content.is_string()) {
    *out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return bad_request("'" + param + "' must be a string or a list of content parts", param);
  std::string text;
  bool first = true;
  for (const auto& part : content) {
    if (!part.is_object()) return bad_request("'" + param + "' parts must be objects", param);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) return bad_request("'" + param + "' parts need a string 'type'", param);
    if (type->get<std::string>() != "text")
      return bad_request("content part type '" + type->get<std::string>() + "' is not supported (text only)", param);
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) return bad_request("'" + param + "' text parts need a string 'text'", param);
    if (!first) text += "\n";
    text += t->get<std::string>();
    first = false;
  }
  *out = std::move(text);
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const json& msgs, nlohmann::ordered_json* out) {
  if (!msgs.is_array()) return bad_request("'messages' must be a list of messages", "messages");
  if (msgs.empty()) return bad_request("'messages' must not be empty", "messages");
  *out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json& m = msgs[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad_request("'" + param + "' must be an object", param);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return bad_request("'" + param + ".role' must be a string", param + ".role");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer")
      return bad_request("'" + param + ".role' must be one of system, developer, user, assistant, tool; got '" + r + "'",
                         param + ".role");
    nlohmann::ordered_json msg;
    msg["role"] = r == "developer" ? "system" : r;
    std::string text;
    bool is_null = true;
    if (auto c = m.find("content"); c != m.end()) PAGODA_API_TRY(message_content(*c, i, &text, &is_null));
    if (is_null && r != "assistant") return bad_request("'" + param + ".content' is required", param + ".content");
    msg["content"] = is_null ? nlohmann::ordered_json("") : nlohmann::ordered_json(text);
    // Keep the other keys the chat template may read (name, tool_calls, tool_call_id, ...).
    for (auto it = m.begin(); it != m.end(); ++it)
      if (it.key() != "role" && it.key() != "content" && !it.value().is_null()) msg[it.key()] = it.value();
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_model(const json& body, std::string* model) {
  return Fields(body).string("model", model);
}

}  // namespace

nlohmann::json ApiError::to_json() const {
  nlohmann::json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return nlohmann::json{{"error", e}};
}

std::string ApiError::body() const {
  return to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

std::optional<std::string> check_stop_strings(const std::vector<std::string>& stop) {
  if (stop.size() > static_cast<size_t>(kMaxStopStrings))
    return "more than " + std::to_string(kMaxStopStrings) + " stop strings (" + std::to_string(stop.size()) + ")";
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) return "stop string " + std::to_string(i) + " is empty (stop strings must not be empty)";
    if (stop[i].size() > kMaxStopStringBytes)
      return "stop string " + std::to_string(i) + " is " + std::to_string(stop[i].size()) + " bytes (at most " +
             std::to_string(kMaxStopStringBytes) + ")";
  }
  return std::nullopt;
}

std::optional<ApiError> parse_json_object(std::string_view body, nlohmann::json* out) {
  // nlohmann's lexer takes a NUL byte for the end of input, which would accept `{...}\0garbage`;
  // JSON text cannot contain a raw NUL anyway (RFC 8259: control characters must be escaped).
  if (const size_t nul = body.find('\0'); nul != std::string_view::npos)
    return bad_request("the body is not valid JSON: a NUL byte at offset " + std::to_string(nul), {}, "invalid_json");
  if (!depth_ok(body, kMaxJsonDepth))
    return bad_request("the JSON body is nested more than " + std::to_string(kMaxJsonDepth) + " levels deep");
  *out = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) {
    // Parse again with exceptions for the position and reason (only on the error path).
    try {
      nlohmann::json ignored = nlohmann::json::parse(body.begin(), body.end());
      (void)ignored;
    } catch (const nlohmann::json::exception& e) {
      return bad_request(std::string("the body is not valid JSON: ") + e.what(), {}, "invalid_json");
    }
    return bad_request("the body is not valid JSON", {}, "invalid_json");
  }
  if (!out->is_object()) return bad_request("the body must be a JSON object", {}, "invalid_json");
  return std::nullopt;
}

std::optional<ApiError> parse_completion_request(std::string_view body, CompletionRequest* out) {
  json j;
  PAGODA_API_TRY(parse_json_object(body, &j));
  Fields f(j);
  PAGODA_API_TRY(parse_model(j, &out->model));
  const json* p = f.get("prompt");
  if (!p) return bad_request("'prompt' is required", "prompt");
  out->prompts.clear();
  if (p->is_string()) {
    out->prompts.push_back({p->get<std::string>(), {}, false});
  } else if (p->is_array()) {
    if (p->empty()) return bad_request("'prompt' must not be empty", "prompt");
    if ((*p)[0].is_number()) {
      PromptInput in;
      in.is_ids = true;
      PAGODA_API_TRY(token_id_array(*p, "prompt", &in.ids));
      out->prompts.push_back(std::move(in));
    } else {
      for (const auto& x : *p) {
        PromptInput in;
        if (x.is_string()) {
          in.text = x.get<std::string>();
        } else if (x.is_array()) {
          in.is_ids = true;
          PAGODA_API_TRY(token_id_array(x, "prompt", &in.ids));
          if (in.ids.empty()) return bad_request("'prompt' token lists must not be empty", "prompt");
        } else {
          return bad_request("'prompt' must be a string, a list of strings, a list of token ids or a list of such lists",
                             "prompt");
        }
        out->prompts.push_back(std::move(in));
      }
      if (out->prompts.size() > 1024) return bad_request("'prompt' holds more than 1024 prompts", "prompt");
    }
  } else {
    return bad_request("'prompt' must be a string, a list of strings, a list of token ids or a list of such lists",
                       "prompt");
  }
  PAGODA_API_TRY(parse_options(j, &out->options, /*chat=*/false));
  PAGODA_API_TRY(parse_structured_output(body, j, &out->options.structured));
  PAGODA_API_TRY(f.boolean("echo", &out->echo));
  if (const json* lp = f.get("logprobs")) {
    if (!Fields::is_integer(*lp)) return bad_request("'logprobs' must be an integer in [0, 20]", "logprobs");
    PAGODA_API_TRY(f.int32("logprobs", &out->options.logprobs, 0, kMaxLogprobs));
  }
  // OpenAI's legacy echo with logprobs: the prompt tokens' logprobs lead the logprobs object.
  out->echo_logprobs = out->echo && out->options.logprobs >= 0;
  PAGODA_API_TRY(f.string("suffix", &out->suffix));
  PAGODA_API_TRY(reject_unsupported(j, /*chat=*/false));
  if (static_cast<int64_t>(out->prompts.size()) * out->options.best_of > 4096)
    return bad_request("too many samples (prompts x best_of > 4096)", out->options.best_of > out->options.n ? "best_of" : "n");
  return std::nullopt;
}

std::optional<ApiError> parse_chat_request(std::string_view body, ChatRequest* out) {
  json j;
  PAGODA_API_TRY(parse_json_object(body, &j));
  Fields f(j);
  PAGODA_API_TRY(parse_model(j, &out->model));
  const json* m = f.get("messages");
  if (!m) return bad_request("'messages' is required", "messages");
  PAGODA_API_TRY(parse_messages(*m, &out->messages));
  PAGODA_API_TRY(parse_options(j, &out->options, /*chat=*/true));
  PAGODA_API_TRY(parse_structured_output(body, j, &out->options.structured));
  PAGODA_API_TRY(f.boolean("logprobs", &out->logprobs_requested));
  int32_t top = 0;
  PAGODA_API_TRY(f.int32("top_logprobs", &top, 0, kMaxLogprobs));
  if (f.get("top_logprobs") && !out->logprobs_requested)
    return bad_request("'top_logprobs' needs 'logprobs' set to true", "top_logprobs");
  out->options.logprobs = out->logprobs_requested ? top : -1;
  PAGODA_API_TRY(f.boolean("add_generation_prompt", &out->add_generation_prompt));
  PAGODA_API_TRY(f.boolean("continue_final_message", &out->continue_final_message));
  if (out->continue_final_message && out->add_generation_prompt && f.get("add_generation_prompt"))
    return bad_request("'continue_final_message' and 'add_generation_prompt' cannot both be true",
                       "continue_final_message");
  if (out->continue_final_message) out->add_generation_prompt = false;
  PAGODA_API_TRY(parse_tools(body, j, out));
  if (const json* k = f.get("chat_template_kwargs")) {
    if (!k->is_object()) return bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    out->chat_template_kwargs = nlohmann::ordered_json::parse(k->dump());
  }
  // Template variables of their own (vLLM passes both to the chat template).
  if (const json* d = f.get("documents")) {
    if (!d->is_array()) return bad_request("'documents' must be a list of objects", "documents");
    for (const auto& doc : *d)
      if (!doc.is_object()) return bad_request("'documents' must be a list of objects", "documents");
    if (out->chat_template_kwargs.is_null()) out->chat_template_kwargs = nlohmann::ordered_json::object();
    out->chat_template_kwargs["documents"] = nlohmann::ordered_json::parse(d->dump());
  }
  if (const json* r = f.get("reasoning_effort")) {
    if (!r->is_string()) return bad_request("'reasoning_effort' must be a string", "reasoning_effort");
    if (out->chat_template_kwargs.is_null()) out->chat_template_kwargs = nlohmann::ordered_json::object();
    out->chat_template_kwargs["reasoning_effort"] = r->get<std::string>();
  }
  PAGODA_API_TRY(reject_unsupported(j, /*chat=*/true));
  return std::nullopt;
}

std::optional<ApiError> parse_tokenize_request(std::string_view body, TokenizeRequest* out) {
  json j;
  PAGODA_API_TRY(parse_json_object(body, &j));
  Fields f(j);
  PAGODA_API_TRY(parse_model(j, &out->model));
  PAGODA_API_TRY(f.boolean("add_special_tokens", &out->add_special_tokens));
  PAGODA_API_TRY(f.boolean("add_generation_prompt", &out->add_generation_prompt));
  if (const json* m = f.get("messages")) {
    out->is_chat = true;
    PAGODA_API_TRY(parse_messages(*m, &out->messages));
    // Chat prompts carry their special tokens in the template (vLLM default: no extra BOS).
    if (!f.get("add_special_tokens")) out->add_special_tokens = false;
    return std::nullopt;
  }
  const json* p = f.get("prompt");
  if (!p) return bad_request("'prompt' (or 'messages') is required", "prompt");
  if (!p->is_string()) return bad_request("'prompt' must be a string", "prompt");
  out->prompt = p->get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> parse_detokenize_request(std::string_view body, DetokenizeRequest* out) {
  json j;
  PAGODA_API_TRY(parse_json_object(body, &j));
  PAGODA_API_TRY(parse_model(j, &out->model));
  const json* t = Fields(j).get("tokens");
  if (!t) return bad_request("'tokens' is required", "tokens");
  if (!t->is_array()) return bad_request("'tokens' must be a list of integers", "tokens");
  return token_id_array(*t, "tokens", &out->tokens);
}

}  // namespace pagoda::api
