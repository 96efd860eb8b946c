// libFuzzer target for the chat-template interpreter: the input bytes are a template, parsed and
// (when it parses) rendered for a fixed conversation with tools. Any crash, sanitizer report,
// timeout or runaway allocation is a bug: parse() and render() must return a Status for every
// input. Small render limits keep each run fast.
// Seed corpus: testdata/chat_templates/templates/*.jinja and feature_templates.txt (split on ====).
#include <cstddef>
#include <cstdint>
#include <string>

#include "template/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json kMessages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi \u00e9 \ud83d\ude00"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call12345", "type": "function",
      "function": {"name": "get_weather", "arguments": {"location": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call12345", "content": "21 C"},
    {"role": "assistant", "content": "It is 21 C.", "reasoning_content": "Look it up."},
    {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
  ])");
  static const nlohmann::ordered_json kTools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}}
  ])");
  auto tmpl = pagoda::ChatTemplate::parse(std::string(reinterpret_cast<const char*>(data), size));
  if (!tmpl.ok()) return 0;
  pagoda::ChatTemplateOptions opts;
  opts.add_generation_prompt = (size & 1) != 0;
  opts.bos_token = "<s>";
  opts.eos_token = "</s>";
  if (size & 2) opts.tools = kTools;
  std::tm now{};
  now.tm_year = 124;
  now.tm_mday = 1;
  opts.now = now;
  opts.limits.max_steps = 200'000;
  opts.limits.max_output_bytes = size_t{1} << 20;
  opts.limits.max_items = size_t{1} << 16;
  (void)tmpl->render(kMessages, opts);
  return 0;
}
