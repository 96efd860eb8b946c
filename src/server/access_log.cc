#include "server/access_log.h"

#include "common/log.h"

namespace pagoda::server {
std::string format_access_log(const AccessLogEntry& e) {
  std::string line = fmt::format("{} \"{} {}\" {}", e.remote.empty() ? "-" : e.remote, e.method, e.path, e.status);
  if (e.prompt_tokens >= 0) line += fmt::format(" prompt_tokens={} completion_tokens={}", e.prompt_tokens, e.completion_tokens);
  line += fmt::format(" {:.1f} ms", 1000 * e.latency_s);
  if (e.stream) line += " stream";
  if (e.aborted) line += " aborted";
  if (!e.request_id.empty()) line += " id=" + e.request_id;
  return line;
}

void write_access_log(const AccessLogEntry& e) {
  log_info("access", "{}", format_access_log(e));
}

}  // namespace pagoda::server
