// The access log of `pagoda serve`: one INFO line per HTTP request when it ends, e.g.
//   127.0.0.1 "POST /v1/chat/completions" 200 prompt_tokens=12 completion_tokens=64 812.4 ms stream
// (tokens only for generation routes; "aborted" when the client left before the end; "id=..." when
// the request carried an X-Request-Id, as the gateway sends).
// Callers check ServeOptions::access_log (on by default; --no-access-log). Thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace pagoda::server {

struct AccessLogEntry {
  std::string remote, method, path;
  int status = 0;
  int64_t prompt_tokens = -1, completion_tokens = -1;  // -1: not a generation request
  double latency_s = 0;
  bool stream = false, aborted = false;
  std::string request_id;  // the X-Request-Id header ("" : none)
};

std::string format_access_log(const AccessLogEntry& e);
void write_access_log(const AccessLogEntry& e);

}  // namespace pagoda::server
