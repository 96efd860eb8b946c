#include "gateway/http_frames.h"

#include <boost/beast/http/status.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>

namespace pagoda::gateway {

Headers header1(const std::string& k, const std::string& v) {
  Headers h;
  h.emplace_back(k, v);
  return h;
}
Headers labels(const std::string& k, const std::string& v) { return header1(k, v); }
Headers labels(const std::string& k, const std::string& v, const std::string& k2, const std::string& v2) {
  auto l = header1(k, v);
  l.emplace_back(k2, v2);
  return l;
}
Headers labels(const std::string& k, const std::string& v, const std::string& k2, const std::string& v2,
               const std::string& k3, const std::string& v3) {
  auto l = labels(k, v, k2, v2);
  l.emplace_back(k3, v3);
  return l;
}

std::string error_json(const std::string& type, const std::string& message, const std::string& code) {
  using json = nlohmann::json;
  json e{{"message", message}, {"type", type}, {"param", nullptr}, {"code", code.empty() ? json(nullptr) : json(code)}};
  return json{{"error", e}}.dump();
}

std::string format_head(int status, const std::string& content_type, const Headers& headers, bool chunked,
                        size_t length, bool close) {
  namespace http = boost::beast::http;
  std::string reason(http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status))));
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\n";
  if (!content_type.empty()) h += "Content-Type: " + content_type + "\r\n";
  for (const auto& [k, v] : headers) h += k + ": " + v + "\r\n";
  h += chunked ? std::string("Transfer-Encoding: chunked\r\n") : "Content-Length: " + std::to_string(length) + "\r\n";
  if (close) h += "Connection: close\r\n";
  return h + "\r\n";
}

void append_chunk(std::string_view data, std::string* out) {
  char size[32];
  snprintf(size, sizeof size, "%zx\r\n", data.size());
  *out += size;
  out->append(data.data(), data.size());
  *out += "\r\n";
}

}  // namespace pagoda::gateway
