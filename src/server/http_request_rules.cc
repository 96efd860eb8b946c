#include "server/http_request_rules.h"

#include <algorithm>
#include <cctype>

namespace pagoda::server {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

}  // namespace

std::optional<RuleViolation> check_request_framing(std::string_view transfer_encoding) {
  const std::string_view te = trim(transfer_encoding);
  if (te.empty() || iequals(te, "chunked")) return std::nullopt;
  std::string shown(te.substr(0, 64));
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return RuleViolation{501, "Transfer-Encoding '" + shown + "' is not supported (only 'chunked')"};
}

bool is_json_media_type(std::string_view content_type) {
  std::string_view t = content_type.substr(0, content_type.find(';'));
  return iequals(trim(t), "application/json");
}

std::optional<RuleViolation> check_request_content_type(std::string_view method, std::string_view content_type) {
  if (method != "POST") return std::nullopt;
  if (is_json_media_type(content_type)) return std::nullopt;
  std::string shown(trim(content_type).substr(0, 64));
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return RuleViolation{415, shown.empty() ? "POST bodies must be JSON: send 'Content-Type: application/json'"
                                          : "POST bodies must be JSON: Content-Type '" + shown +
                                                "' is not supported (use application/json)"};
}

std::string bearer_token(const std::string& authorization) {
  size_t i = 0;
  while (i < authorization.size() && (authorization[i] == ' ' || authorization[i] == '\t')) ++i;
  static constexpr std::string_view kScheme = "bearer";
  if (authorization.size() < i + kScheme.size() + 1) return {};
  for (size_t k = 0; k < kScheme.size(); ++k)
    if (std::tolower(static_cast<unsigned char>(authorization[i + k])) != kScheme[k]) return {};
  i += kScheme.size();
  if (authorization[i] != ' ' && authorization[i] != '\t') return {};
  while (i < authorization.size() && (authorization[i] == ' ' || authorization[i] == '\t')) ++i;
  size_t end = authorization.size();
  while (end > i && (authorization[end - 1] == ' ' || authorization[end - 1] == '\t')) --end;
  return authorization.substr(i, end - i);
}

std::string peer_host(const std::string& peer) {
  std::string s = peer;
  if (s.rfind("ipv4:", 0) == 0 || s.rfind("ipv6:", 0) == 0) s = s.substr(5);
  else return s;
  if (!s.empty() && s[0] == '[') {
    const size_t close = s.find(']');
    return close == std::string::npos ? s : s.substr(1, close - 1);
  }
  const size_t colon = s.rfind(':');
  return colon == std::string::npos ? s : s.substr(0, colon);
}

HttpRequest to_http_request(boost::beast::http::request<boost::beast::http::string_body>& req, std::string remote) {
  HttpRequest r;
  r.method = std::string(req.method_string());
  std::string target(req.target());
  const size_t q = target.find('?');
  r.path = target.substr(0, q);
  if (q != std::string::npos) r.query = target.substr(q + 1);
  for (const auto& f : req) {
    std::string name(f.name_string());
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    auto [it, inserted] = r.headers.emplace(name, std::string(f.value()));
    if (!inserted) it->second += ", " + std::string(f.value());
  }
  r.body = std::move(req.body());
  r.remote = std::move(remote);
  return r;
}

}  // namespace pagoda::server
