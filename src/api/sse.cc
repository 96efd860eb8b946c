#include "api/sse.h"

namespace pagoda::api {

void append_sse_event(std::string_view payload, std::string* out) {
  // Split on \r\n, \r or \n: each line is its own field (a bare \r would end the line for the client).
  size_t start = 0;
  for (size_t i = 0; i <= payload.size(); ++i) {
    if (i < payload.size() && payload[i] != '\n' && payload[i] != '\r') continue;
    out->append("data: ");
    out->append(payload.substr(start, i - start));
    out->push_back('\n');
    if (i + 1 < payload.size() && payload[i] == '\r' && payload[i + 1] == '\n') ++i;
    start = i + 1;
  }
  out->push_back('\n');
}

std::string sse_event(std::string_view payload) {
  std::string s;
  s.reserve(payload.size() + 8);
  append_sse_event(payload, &s);
  return s;
}

}  // namespace pagoda::api
