// Tool-call parsing per format: calls and content from whole texts, the same results however the
// text is split into streamed pieces (every split point), OpenAI's delta order (name first, then
// argument fragments that concatenate to the arguments), and text that is not a call.
#include <gtest/gtest.h>

#include "api/openai_request.h"
#include "api/tool_call_parser.h"

namespace pagoda::api {
namespace {

struct Parsed {
  std::string content;
  std::vector<ToolCall> calls;           // from calls()
  std::vector<ToolCall> streamed;        // rebuilt from the deltas
};

Parsed run(const ToolCallFormat& f, std::string_view text, size_t piece, bool parallel = true) {
  ToolCallParser p(f, parallel, "call_");
  Parsed r;
  auto take = [&](const ParsedDelta& d) {
    r.content += d.content;
    for (const auto& c : d.calls) {
      if (c.first) {
        EXPECT_EQ(c.index, static_cast<int32_t>(r.streamed.size()));
        EXPECT_FALSE(c.name.empty());
        r.streamed.push_back({c.id, c.name, c.arguments});
      } else {
        EXPECT_EQ(c.index + 1, static_cast<int32_t>(r.streamed.size())) << "arguments before the name";
        if (!r.streamed.empty()) r.streamed.back().arguments += c.arguments;
      }
    }
  };
  for (size_t i = 0; i < text.size(); i += piece) take(p.push(text.substr(i, piece)));
  take(p.finish());
  r.calls = p.calls();
  return r;
}

void expect_everywhere(const ToolCallFormat& f, std::string_view text, const std::string& content,
                       const std::vector<std::pair<std::string, std::string>>& calls, bool parallel = true) {
  for (size_t piece : {text.size() + 1, size_t{1}, size_t{2}, size_t{3}, size_t{7}}) {
    Parsed r = run(f, text, piece, parallel);
    EXPECT_EQ(r.content, content) << f.name << " piece " << piece << ": " << text;
    ASSERT_EQ(r.calls.size(), calls.size()) << f.name << " piece " << piece << ": " << text;
    ASSERT_EQ(r.streamed.size(), calls.size()) << f.name << " piece " << piece;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(r.calls[i].name, calls[i].first);
      EXPECT_EQ(r.calls[i].arguments, calls[i].second);
      EXPECT_EQ(r.streamed[i].name, calls[i].first);
      EXPECT_EQ(r.streamed[i].arguments, calls[i].second) << "piece " << piece;
      EXPECT_EQ(r.streamed[i].id, r.calls[i].id);
    }
  }
}

TEST(ToolCallParser, Hermes) {
  expect_everywhere(hermes_format(), "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "",
                    {{"get_weather", "{\"city\": \"Paris\"}"}});
  expect_everywhere(hermes_format(),
                    "Let me check. <tool_call>{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}</tool_call>\n"
                    "<tool_call>{\"arguments\": {}, \"name\": \"b\"}</tool_call>",
                    "Let me check. ", {{"a", "{\"x\": [1, {\"y\": \"}\"}]}"}, {"b", "{}"}});
  expect_everywhere(hermes_format(), "No tools here, just <tool text.", "No tools here, just <tool text.", {});
  // An unfinished call is content.
  expect_everywhere(hermes_format(), "<tool_call>{\"nam", "<tool_call>{\"nam", {});
}

TEST(ToolCallParser, Llama3Json) {
  expect_everywhere(llama3_json_format(), "{\"name\": \"f\", \"parameters\": {\"q\": \"a;b\"}}; {\"name\": \"g\", \"parameters\": {\"n\": 2}}", "",
                    {{"f", "{\"q\": \"a;b\"}"}, {"g", "{\"n\": 2}"}});
  expect_everywhere(llama3_json_format(), "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", "", {{"f", "{}"}});
  expect_everywhere(llama3_json_format(), "Hello {\"name\": \"f\"}", "Hello {\"name\": \"f\"}", {});
}

TEST(ToolCallParser, MistralAndGenericJson) {
  expect_everywhere(mistral_format(), "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", \"arguments\": {\"b\": true}}]", "",
                    {{"f", "{\"a\": 1}"}, {"g", "{\"b\": true}"}});
  expect_everywhere(json_format(), "  {\"name\": \"f\", \"arguments\": {\"a\": \"x\\\"y\"}}", "", {{"f", "{\"a\": \"x\\\"y\"}"}});
  expect_everywhere(json_format(), "[{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": {\"k\": null}}]", "",
                    {{"f", "{}"}, {"g", "{\"k\": null}"}});
  expect_everywhere(json_format(), "{\"not\": \"a call\"}", "{\"not\": \"a call\"}", {});
  expect_everywhere(json_format(), "Plain answer.", "Plain answer.", {});
}

TEST(ToolCallParser, ParallelFalseKeepsTheFirstCall) {
  expect_everywhere(mistral_format(), "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": {}}]", "",
                    {{"f", "{}"}}, /*parallel=*/false);
}

TEST(ToolCallParser, FormatFromTemplate) {
  EXPECT_EQ(tool_call_format_for_template("{{ '<tool_call>' }}").name, "hermes");
  EXPECT_EQ(tool_call_format_for_template("[TOOL_CALLS] {{ x }}").name, "mistral");
  EXPECT_EQ(tool_call_format_for_template("<|python_tag|>").name, "llama3_json");
  EXPECT_EQ(tool_call_format_for_template("{{ messages }}").name, "json");
}

TEST(ToolCallParser, LinearInTheOutput) {
  // A long argument streamed one byte at a time: no quadratic rescans (bounded work per byte is
  // checked by the size of what comes back, not by timing).
  std::string big = "{\"name\": \"f\", \"arguments\": {\"s\": \"" + std::string(200000, 'x') + "\"}}";
  Parsed r = run(json_format(), big, 1);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments.size(), 200000u + 9);
}

TEST(StructuredOutputRequest, FieldsAndErrors) {
  ChatRequest c;
  auto ok = [&](const std::string& extra) {
    c = ChatRequest{};
    return parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}],)" + extra + "}", &c);
  };
  EXPECT_FALSE(ok(R"("response_format":{"type":"json_object"})"));
  EXPECT_EQ(c.options.structured.kind, StructuredOutput::Kind::kJsonObject);
  EXPECT_FALSE(ok(R"("response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"z":{},"a":{}}},"strict":true}})"));
  EXPECT_EQ(c.options.structured.kind, StructuredOutput::Kind::kJsonSchema);
  EXPECT_LT(c.options.structured.text.find("\"z\""), c.options.structured.text.find("\"a\""));  // key order kept
  EXPECT_FALSE(ok(R"("guided_choice":["a","b"])"));
  EXPECT_EQ(c.options.structured.choices.size(), 2u);
  EXPECT_FALSE(ok(R"("structured_outputs":{"regex":"[0-9]+"})"));
  EXPECT_EQ(c.options.structured.kind, StructuredOutput::Kind::kRegex);
  EXPECT_FALSE(ok(R"("chat_template_kwargs":{"enable_thinking":false})"));
  EXPECT_EQ(c.chat_template_kwargs["enable_thinking"], false);
  struct Bad {
    const char* extra;
    const char* param;
  } bad[] = {
      {R"("response_format":{"type":"json_schema"})", "response_format"},
      {R"("response_format":{"type":"yaml"})", "response_format"},
      {R"("guided_json":{"type":"object"},"guided_regex":"a")", "guided_regex"},
      {R"("structured_outputs":{"structural_tag":"x"})", "structured_outputs.structural_tag"},
      {R"("guided_whitespace_pattern":" ")", "guided_whitespace_pattern"},
      {R"("guided_choice":[])", "guided_choice"},
      {R"("chat_template_kwargs":[1])", "chat_template_kwargs"},
      {R"("tool_choice":"required")", "tool_choice"},
      {R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}})", "tool_choice"},
      {R"("tools":[{"type":"function","function":{"name":"bad name"}}])", "tools"},
      {R"("tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}])", "tools"},
      {R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes")", "tool_choice"},
      {R"("parallel_tool_calls":"yes")", "parallel_tool_calls"},
  };
  for (const auto& b : bad) {
    auto e = ok(b.extra);
    ASSERT_TRUE(e.has_value()) << b.extra;
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, b.param) << b.extra << ": " << e->message;
  }
  EXPECT_FALSE(ok(R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false)"));
  EXPECT_EQ(c.tool_choice, ChatRequest::ToolChoice::kNamed);
  EXPECT_EQ(c.tool_choice_name, "f");
  EXPECT_FALSE(c.parallel_tool_calls);
}

}  // namespace
}  // namespace pagoda::api
