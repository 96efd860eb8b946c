// HTTP/1.1 pieces the gateway writes itself (response heads, chunks, OpenAI error bodies) and the
// header / metric-label lists it passes around. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::gateway {

// Header (or metric label) name/value pairs, in order.
using Headers = std::vector<std::pair<std::string, std::string>>;

// One-, two- and three-entry lists. Built outside the coroutines: g++ 12 miscompiles
// brace-initialised lists inside them.
Headers header1(const std::string& k, const std::string& v);
Headers labels(const std::string& k, const std::string& v);
Headers labels(const std::string& k, const std::string& v, const std::string& k2, const std::string& v2);
Headers labels(const std::string& k, const std::string& v, const std::string& k2, const std::string& v2,
               const std::string& k3, const std::string& v3);

// {"error": {"message", "type", "param": null, "code"}} ("" code: null), as the OpenAI API writes it.
std::string error_json(const std::string& type, const std::string& message, const std::string& code);

// "HTTP/1.1 <status> <reason>" head: Content-Type (when given), `headers`, then
// Transfer-Encoding: chunked or Content-Length: `length`, Connection: close when `close`.
std::string format_head(int status, const std::string& content_type, const Headers& headers, bool chunked,
                        size_t length, bool close);

// Appends `data` as one chunk of a chunked body (hex size line, data, CRLF).
void append_chunk(std::string_view data, std::string* out);

}  // namespace pagoda::gateway
