// The browser playground served at GET /: one static HTML page with inline JS (no build step),
// compiled into the binary. It streams replies from /v1/chat/completions (fetch + ReadableStream,
// SSE parsed by hand), shows tokens/s, and sends an API key if one is typed in.
#pragma once

#include <string>

namespace pagoda::server {
const std::string& playground_html();
}  // namespace pagoda::server
