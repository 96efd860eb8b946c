// ChatTemplate: renders a model's Jinja chat template for a list of messages, byte for byte as
// Hugging Face transformers' `tokenizer.apply_chat_template(messages, tokenize=False)` does.
//
// What the template sees (as transformers passes it):
//   messages               the messages, with keys whose value is null dropped, and a message's
//                          reasoning (`reasoning_content` / `thinking` / `reasoning`) also
//                          given as `thinking` and `reasoning_content`
//   tools                  options.tools, or none
//   documents              none
//   add_generation_prompt  options.add_generation_prompt
//   bos_token, eos_token   when known (options, else the tokens the template was loaded with)
//   ...                    every key of options.extra_context (these override the above)
// plus the globals raise_exception(msg), strftime_now(fmt), range, namespace, dict.
// Messages are JSON: {role, content (string or list of {type: "text", text}), tool_calls, ...};
// pass nlohmann::ordered_json to keep key order (tojson / items() output follows it).
//
// Errors are values: parse() reports syntax errors and unknown filters/tests with line:column;
// render() reports raise_exception() (kInvalidArgument, message verbatim), runtime errors
// (kInvalidArgument) and exceeded limits (kResourceExhausted), each with line:column. Neither
// crashes nor runs unbounded on any input. A ChatTemplate is immutable after parse() and may be
// rendered from several threads at once.
#pragma once

#include <nlohmann/json.hpp>

#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "template/interpreter.h"

namespace pagoda {

class GgufFile;

struct ChatTemplateOptions {
  bool add_generation_prompt = false;
  std::optional<std::string> bos_token;  // overrides the template's own when set
  std::optional<std::string> eos_token;
  nlohmann::ordered_json tools;          // null: no tools (the template sees none)
  nlohmann::ordered_json extra_context;  // object of extra variables (e.g. date_string)
  std::optional<std::tm> now;            // the clock strftime_now() reads; default: local time
  tmpl::RenderLimits limits;
};

class ChatTemplate {
 public:
  static Result<ChatTemplate> parse(std::string source);

  Result<std::string> render(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options) const;
  // Convenience for unordered JSON (object keys are then seen in sorted order).
  Result<std::string> render(const nlohmann::json& messages, const ChatTemplateOptions& options) const;

  const std::string& source() const;
  // Special-token strings the template was loaded with (from a GGUF or a tokenizer_config.json).
  const std::optional<std::string>& bos_token() const { return bos_token_; }
  const std::optional<std::string>& eos_token() const { return eos_token_; }
  void set_special_tokens(std::optional<std::string> bos, std::optional<std::string> eos) {
    bos_token_ = std::move(bos);
    eos_token_ = std::move(eos);
  }

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
  std::optional<std::string> bos_token_, eos_token_;
};

// The template in a GGUF file (`tokenizer.chat_template`), with bos/eos token strings looked up
// from `tokenizer.ggml.tokens` by `tokenizer.ggml.{bos,eos}_token_id`.
Result<ChatTemplate> chat_template_from_gguf(const GgufFile& gguf);

// The template of a Hugging Face model directory: `chat_template.jinja` if present, else
// `tokenizer_config.json`'s `chat_template` (a string, or a list of {name, template}: "tool_use"
// when `has_tools` and present, else "default"), else `chat_template.json`. bos/eos from
// tokenizer_config.json (strings or {content: ...}), else special_tokens_map.json.
Result<ChatTemplate> chat_template_from_hf_dir(const std::string& dir, bool has_tools = false);

// A .gguf file or a Hugging Face directory, by what `path` is.
Result<ChatTemplate> load_chat_template(const std::string& path, bool has_tools = false);

}  // namespace pagoda
