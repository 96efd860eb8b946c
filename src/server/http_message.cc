#include "server/http_message.h"

#include <cstdio>

namespace pagoda::server {

const char* http_status_text(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

std::string format_response_head(int status, const std::string& content_type,
                                 const std::vector<std::pair<std::string, std::string>>& headers, bool chunked,
                                 size_t content_length, bool close) {
  std::string s = "HTTP/1.1 " + std::to_string(status) + " " + http_status_text(status) + "\r\n";
  s += "Server: pagoda\r\n";
  if (!content_type.empty()) s += "Content-Type: " + content_type + "\r\n";
  for (const auto& [k, v] : headers) s += k + ": " + v + "\r\n";
  if (chunked) s += "Transfer-Encoding: chunked\r\n";
  else s += "Content-Length: " + std::to_string(content_length) + "\r\n";
  if (close) s += "Connection: close\r\n";
  s += "\r\n";
  return s;
}

void append_chunk(const std::string& data, std::string* out) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%zx\r\n", data.size());
  *out += buf;
  if (data.empty()) {
    *out += "\r\n";
    return;
  }
  *out += data;
  *out += "\r\n";
}

}  // namespace pagoda::server
