// libFuzzer target: the tool-call parsers (src/api/tool_call_parser.h). The first byte picks the
// format and the piece size; the rest is model output fed in pieces. The result must not depend
// on how the text was split: content and calls equal those of the text pushed whole, and the
// streamed argument fragments of each call concatenate to its final arguments.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "api/tool_call_parser.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
struct Out {
  std::string content;
  std::vector<pagoda::api::ToolCall> calls;
  std::map<std::string, std::string> streamed_args;  // by call id
};
Out run(const pagoda::api::ToolCallFormat& f, std::string_view text, size_t piece) {
  pagoda::api::ToolCallParser p(f, true, "c");
  Out o;
  std::string last;
  auto take = [&](const pagoda::api::ParsedDelta& d) {
    o.content += d.content;
    for (const auto& c : d.calls) {
      if (c.first) {
        last = c.id;
        o.streamed_args[last] = c.arguments;
      } else {
        o.streamed_args[last] += c.arguments;
      }
    }
  };
  for (size_t i = 0; i < text.size(); i += piece) take(p.push(text.substr(i, piece)));
  take(p.finish());
  o.calls = p.calls();
  return o;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pagoda::api;
  if (size == 0) return 0;
  const ToolCallFormat* formats[] = {&hermes_format(), &llama3_json_format(), &mistral_format(), &json_format()};
  const ToolCallFormat& f = *formats[data[0] % 4];
  const size_t piece = 1 + (data[0] >> 2) % 7;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Out whole = run(f, text, text.size() + 1);
  const Out split = run(f, text, piece);
  check(whole.calls.size() == split.calls.size());
  for (size_t i = 0; i < whole.calls.size(); ++i) {
    check(whole.calls[i].name == split.calls[i].name);
    check(whole.calls[i].arguments == split.calls[i].arguments);
  }
  // Every final call was streamed, with the same arguments (a call whose text turns out not to
  // parse may have been announced without being final).
  for (const auto& c : split.calls) {
    auto it = split.streamed_args.find(c.id);
    check(it != split.streamed_args.end() && it->second == c.arguments);
  }
  if (whole.calls.empty() && split.calls.empty()) check(whole.content == split.content);
  return 0;
}
