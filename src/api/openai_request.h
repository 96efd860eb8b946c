// OpenAI-compatible request bodies -> validated plain structs (no I/O, no engine): the part of the
// service layer that reads untrusted bytes, fuzzed by fuzz/openai_request_fuzz.cc.
//
// Rules (OpenAI's API reference, vLLM's extensions):
//   - The body must be one JSON object of valid UTF-8, nested at most kMaxJsonDepth deep.
//   - Unknown fields are accepted and ignored (as OpenAI does); a `null` value means "not given".
//   - A known field of the wrong type or out of range is a 400 naming the field (`param`) and why.
//   - Known fields we cannot honour (use_beam_search, allowed_token_ids, non-text
//     content parts, ...: kUnsupportedFields in the .cc) are a 400 naming the field when given a
//     value other than their default, never silently dropped.
// Length checks that need the model (prompt + max_tokens against the context) happen later, in
// the engine's submit().
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::api {

constexpr int kMaxJsonDepth = 64;
constexpr int kMaxN = 128;
constexpr int kMaxLogprobs = 20;
constexpr int kMaxStopStrings = 16;
constexpr size_t kMaxStopStringBytes = 1024;
constexpr float kMaxLogitBias = 100.0f;  // OpenAI: each bias in [-100, 100]

// An error for the client, in OpenAI's shape {"error": {message, type, param, code}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";  // or authentication_error, not_found_error, ...
  std::string param;                            // the offending field, empty: null
  std::string code;                             // short machine code, empty: null
  std::vector<std::pair<std::string, std::string>> headers;  // e.g. Retry-After

  nlohmann::json to_json() const;
  // The JSON text; invalid UTF-8 in the message (echoed input) is replaced, never thrown on.
  std::string body() const;
};

ApiError bad_request(std::string message, std::string param = {}, std::string code = {});
// Stop strings of any front end: at most kMaxStopStrings, each non-empty and at most
// kMaxStopStringBytes. The error message (names the bound), or nullopt.
std::optional<std::string> check_stop_strings(const std::vector<std::string>& stop);

// A structured-output constraint as requested (compiled later, against the model's vocabulary).
// From response_format {json_object | json_schema}, vLLM's structured_outputs {json, regex,
// choice, grammar, json_object} or its older guided_json / guided_regex / guided_choice /
// guided_grammar fields; at most one may be given.
struct StructuredOutput {
  enum class Kind { kNone, kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kNone;
  std::string text;                  // the schema (JSON text, key order kept), regex or grammar
  std::vector<std::string> choices;  // kChoice
  std::string param;                 // the request field it came from (errors name it)
};

// Sampling and stopping options shared by both endpoints (engine semantics in engine.h).
struct GenerationOptions {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;               // 0 or -1 in the request: off
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::optional<uint64_t> seed;
  int32_t max_tokens = -1;         // -1: not given (up to the context)
  int32_t min_tokens = 0;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  int32_t n = 1;
  // best_of >= n samples are generated per prompt; the n with the highest mean token logprob are
  // returned (docs/decisions.md#d38). Equal to n unless given; best_of > n cannot stream.
  int32_t best_of = 1;
  // logit_bias: (token id, bias in [-100, 100]) added to the logits before sampling; ids are
  // checked against the vocabulary by the server (the parser does not know it).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // truncate_prompt_tokens (vLLM): keep only the last K prompt tokens; 0: off, -1: the model length.
  int32_t truncate_prompt_tokens = 0;
  std::optional<bool> add_special_tokens;  // vLLM: not given -> completions true, chat false
  bool return_tokens_as_token_ids = false;  // vLLM: logprob tokens as "token_id:N"
  int32_t priority = 0;
  std::string user;
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage
  bool continuous_usage = false;   // stream_options.continuous_usage_stats: usage on every chunk
  int32_t logprobs = -1;           // -1: none; 0: the chosen token's; N: also the top N
  // vLLM's prompt_logprobs: -1 none; N: each prompt token's logprob, rank and the top N (the
  // response's prompt_logprobs: per choice on completions, top level on chat).
  int32_t prompt_logprobs = -1;
  StructuredOutput structured;
};

// One prompt of /v1/completions: text or token ids (exactly one is used).
struct PromptInput {
  std::string text;
  std::vector<int32_t> ids;
  bool is_ids = false;
};

struct CompletionRequest {
  std::string model;               // empty: not given
  std::vector<PromptInput> prompts;
  bool echo = false;
  bool echo_logprobs = false;      // echo with logprobs: the prompt's logprobs lead choices[].logprobs
  // suffix (fill in the middle): the text after the completion; the server builds the FIM prompt
  // from the tokenizer's FIM tokens (server/fim_prompt.h) or answers 400. Empty: none.
  std::string suffix;
  GenerationOptions options;
};

struct ChatRequest {
  std::string model;
  // [{role, content: string}], content parts already joined; other message keys kept.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;    // null: none (each {type: "function", function: {name, parameters ...}})
  // tool_choice: "none", "auto" (default with tools), "required", or a named function.
  enum class ToolChoice { kNone, kAuto, kRequired, kNamed };
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;    // kNamed
  bool parallel_tool_calls = true;
  nlohmann::ordered_json chat_template_kwargs;  // null or an object of extra template variables
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  GenerationOptions options;
  bool logprobs_requested = false;  // chat: logprobs (bool) + top_logprobs
};

struct TokenizeRequest {
  std::string model;
  bool is_chat = false;
  std::string prompt;
  nlohmann::ordered_json messages;
  bool add_special_tokens = true;
  bool add_generation_prompt = true;
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

// Parsers: nullopt on success (*out filled), else the error to send.
std::optional<ApiError> parse_completion_request(std::string_view body, CompletionRequest* out);
std::optional<ApiError> parse_chat_request(std::string_view body, ChatRequest* out);
std::optional<ApiError> parse_tokenize_request(std::string_view body, TokenizeRequest* out);
std::optional<ApiError> parse_detokenize_request(std::string_view body, DetokenizeRequest* out);

// Parses a JSON object body with the depth limit; error text says where parsing failed.
std::optional<ApiError> parse_json_object(std::string_view body, nlohmann::json* out);

}  // namespace pagoda::api
