// Server-sent events framing (WHATWG HTML "event stream"), as OpenAI's streaming API uses it:
// each event is "data: <payload>\n\n"; a payload with line breaks becomes one "data:" line per
// line, so the client's parser rebuilds it exactly. The stream ends with "data: [DONE]\n\n".
#pragma once

#include <string>
#include <string_view>

namespace pagoda::api {

// Appends one event carrying `payload` to *out.
void append_sse_event(std::string_view payload, std::string* out);
std::string sse_event(std::string_view payload);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace pagoda::api
