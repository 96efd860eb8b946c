// Tool calls in generated text: per-format rules declared as data (ToolCallFormat) and one
// incremental parser for all of them.
//
// Formats (chosen from the chat template, tool_call_format_for_template):
//   hermes       <tool_call>{"name": N, "arguments": {...}}</tool_call>, repeated (Hermes,
//                Qwen2.5, Qwen3)
//   llama3_json  [<|python_tag|>]{"name": N, "parameters": {...}}, several joined by ';'
//                (Llama 3.1 / 3.2); the output must start with the call
//   mistral      [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]
//   json         the generic fallback: the whole output is {"name", "arguments"} or a list of
//                them
//
// The parser sees the text as it streams and emits content deltas and tool-call deltas in
// OpenAI's streaming shape: a call's first delta carries index, id, type and function.name
// (arguments ""), the next ones arguments fragments whose concatenation is the arguments text as
// the model wrote it. Each input byte is examined a bounded number of times (linear in the
// output, however it is split into pushes). Text that looks like a call but does not parse as
// one is returned as content at finish().
//
// Thread-safety: one parser per choice, one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::api {

struct ToolCallFormat {
  std::string name;
  std::string begin;           // before each call (or before the list); empty: none
  std::string end;             // after each call; empty: none
  bool list = false;           // the calls form one JSON array after `begin`
  bool begin_optional = false; // a call may also start bare at the start of the output
  std::string separator;       // between calls that are not each tagged (";" for llama3_json)
  std::string arguments_key;   // "arguments" or "parameters"
};

const ToolCallFormat& hermes_format();
const ToolCallFormat& llama3_json_format();
const ToolCallFormat& mistral_format();
const ToolCallFormat& json_format();
// The format whose markers the template's source mentions; json_format() when none.
const ToolCallFormat& tool_call_format_for_template(std::string_view template_source);

struct ToolCallDelta {
  int32_t index = 0;
  bool first = false;          // first delta of the call: id and name set
  std::string id, name;
  std::string arguments;       // fragment
};

struct ParsedDelta {
  std::string content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

struct ToolCall {
  std::string id, name, arguments;
};

class ToolCallParser {
 public:
  // parallel false: calls after the first are dropped. ids: id_prefix + index.
  ToolCallParser(const ToolCallFormat& format, bool parallel, std::string id_prefix);
  ParsedDelta push(std::string_view text);
  ParsedDelta finish();
  const std::vector<ToolCall>& calls() const { return calls_; }

 private:
  enum class Mode { kStart, kContent, kBeforeCall, kCall, kAfterCall, kDone };
  void step(ParsedDelta* out);
  void call_char(char c, ParsedDelta* out);
  void end_call(ParsedDelta* out);
  void emit_args(std::string_view s, ParsedDelta* out);

  const ToolCallFormat& f_;
  bool parallel_;
  std::string id_prefix_;
  Mode mode_ = Mode::kStart;
  std::string buf_;        // unconsumed input
  size_t pos_ = 0;         // next byte of buf_ to examine
  std::string raw_;        // text of the tool-call region so far (returned as content on failure)
  // JSON scanning of the current call object.
  int depth_ = 0;
  bool in_string_ = false, escape_ = false;
  bool in_list_ = false;   // inside the Mistral / json list
  bool expect_key_ = true; // at depth 1: the next string is a key
  std::string key_, cur_string_;
  std::string cur_key_;    // the key whose value is being read at depth 1
  bool in_value_ = false, value_started_ = false;
  std::string name_, call_text_, args_, args_pending_;
  bool name_done_ = false, started_ = false, args_done_ = false;
  int32_t index_ = 0;
  std::vector<ToolCall> calls_;
};

}  // namespace pagoda::api
