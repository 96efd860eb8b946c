#include "gateway/config.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <fstream>
#include <sstream>

namespace pagoda::gateway {
namespace {

using json = nlohmann::json;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

template <class T>
Status read_key(const json& j, const char* key, T* out) {
  if (!j.contains(key)) return Status();
  try {
    *out = j.at(key).get<T>();
  } catch (const json::exception& e) {
    return invalid_argument("gateway config: key '{}': {}", key, e.what());
  }
  return Status();
}

Status read_limit(const json& j, const std::string& where, RateLimitConfig* out) {
  if (!j.is_object()) return invalid_argument("gateway config: {} must be an object", where);
  PAGODA_RETURN_IF_ERROR(read_key(j, "requests_per_s", &out->requests_per_s));
  PAGODA_RETURN_IF_ERROR(read_key(j, "tokens_per_min", &out->tokens_per_min));
  return Status();
}

}  // namespace

Result<WorkerSpec> parse_worker(const std::string& text) {
  WorkerSpec w;
  std::string s = text;
  if (const size_t at = s.rfind('@'); at != std::string::npos) {
    const std::string wt = s.substr(at + 1);
    char* end = nullptr;
    w.weight = std::strtod(wt.c_str(), &end);
    if (wt.empty() || *end != '\0' || !(w.weight > 0))
      return invalid_argument("worker '{}': the weight after '@' must be a number > 0", text);
    s = s.substr(0, at);
  }
  if (const size_t hash = s.find('#'); hash != std::string::npos) {
    w.models = split(s.substr(hash + 1), ',');
    s = s.substr(0, hash);
  }
  if (s.rfind("dns:", 0) == 0) {
    w.dns = true;
    s = s.substr(4);
  } else if (s.rfind("http://", 0) == 0) {
    s = s.substr(7);
  } else {
    return invalid_argument("worker '{}': expected http://HOST:PORT or dns:NAME:PORT", text);
  }
  if (!s.empty() && s.back() == '/') s.pop_back();
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return invalid_argument("worker '{}': no port (expected HOST:PORT)", text);
  w.host = s.substr(0, colon);
  if (w.host.size() > 2 && w.host.front() == '[' && w.host.back() == ']') w.host = w.host.substr(1, w.host.size() - 2);
  const std::string port = s.substr(colon + 1);
  auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), w.port);
  if (ec != std::errc() || p != port.data() + port.size() || w.port <= 0 || w.port > 65535)
    return invalid_argument("worker '{}': port '{}' is not in 1..65535", text, port);
  return w;
}

Status load_config_file(const std::string& path, GatewayConfig* c) {
  std::ifstream in(path);
  if (!in) return make_status(StatusCode::kNotFound, "gateway config: cannot open '{}'", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    return invalid_argument("gateway config '{}': not JSON: {}", path, e.what());
  }
  if (!j.is_object()) return invalid_argument("gateway config '{}': the top level must be an object", path);
  static const char* kKnown[] = {"host", "port", "threads", "workers", "policy", "session_header",
                                 "prefix_chunk_chars", "prefix_chunks", "load_bound", "load_bound_floor", "api_keys", "global_limit",
                                 "max_inflight", "max_queue", "queue_timeout_s", "body_limit", "default_max_tokens",
                                 "connect_timeout_s", "first_byte_timeout_s", "stream_idle_timeout_s",
                                 "upstream_keepalive_s", "client_idle_timeout_s", "max_attempts", "health_interval_s", "health_timeout_s", "unhealthy_after_checks",
                                 "eject_s", "eject_after_failures", "dns_interval_s", "drain_timeout_s",
                                 "worker_api_key"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* k : kKnown) known |= it.key() == k;
    if (!known) return invalid_argument("gateway config '{}': unknown key '{}'", path, it.key());
  }
  PAGODA_RETURN_IF_ERROR(read_key(j, "host", &c->host));
  PAGODA_RETURN_IF_ERROR(read_key(j, "port", &c->port));
  PAGODA_RETURN_IF_ERROR(read_key(j, "threads", &c->threads));
  PAGODA_RETURN_IF_ERROR(read_key(j, "policy", &c->policy));
  PAGODA_RETURN_IF_ERROR(read_key(j, "session_header", &c->session_header));
  PAGODA_RETURN_IF_ERROR(read_key(j, "prefix_chunk_chars", &c->prefix_chunk_chars));
  PAGODA_RETURN_IF_ERROR(read_key(j, "prefix_chunks", &c->prefix_chunks));
  PAGODA_RETURN_IF_ERROR(read_key(j, "load_bound", &c->load_bound));
  PAGODA_RETURN_IF_ERROR(read_key(j, "load_bound_floor", &c->load_bound_floor));
  PAGODA_RETURN_IF_ERROR(read_key(j, "max_inflight", &c->max_inflight));
  PAGODA_RETURN_IF_ERROR(read_key(j, "max_queue", &c->max_queue));
  PAGODA_RETURN_IF_ERROR(read_key(j, "queue_timeout_s", &c->queue_timeout_s));
  PAGODA_RETURN_IF_ERROR(read_key(j, "body_limit", &c->body_limit));
  PAGODA_RETURN_IF_ERROR(read_key(j, "default_max_tokens", &c->default_max_tokens));
  PAGODA_RETURN_IF_ERROR(read_key(j, "connect_timeout_s", &c->connect_timeout_s));
  PAGODA_RETURN_IF_ERROR(read_key(j, "first_byte_timeout_s", &c->first_byte_timeout_s));
  PAGODA_RETURN_IF_ERROR(read_key(j, "stream_idle_timeout_s", &c->stream_idle_timeout_s));
  PAGODA_RETURN_IF_ERROR(read_key(j, "upstream_keepalive_s", &c->upstream_keepalive_s));
  PAGODA_RETURN_IF_ERROR(read_key(j, "client_idle_timeout_s", &c->client_idle_timeout_s));
  PAGODA_RETURN_IF_ERROR(read_key(j, "max_attempts", &c->max_attempts));
  PAGODA_RETURN_IF_ERROR(read_key(j, "health_interval_s", &c->health_interval_s));
  PAGODA_RETURN_IF_ERROR(read_key(j, "health_timeout_s", &c->health_timeout_s));
  PAGODA_RETURN_IF_ERROR(read_key(j, "unhealthy_after_checks", &c->unhealthy_after_checks));
  PAGODA_RETURN_IF_ERROR(read_key(j, "eject_s", &c->eject_s));
  PAGODA_RETURN_IF_ERROR(read_key(j, "eject_after_failures", &c->eject_after_failures));
  PAGODA_RETURN_IF_ERROR(read_key(j, "dns_interval_s", &c->dns_interval_s));
  PAGODA_RETURN_IF_ERROR(read_key(j, "drain_timeout_s", &c->drain_timeout_s));
  PAGODA_RETURN_IF_ERROR(read_key(j, "worker_api_key", &c->worker_api_key));
  if (j.contains("global_limit")) PAGODA_RETURN_IF_ERROR(read_limit(j["global_limit"], "global_limit", &c->global_limit));
  if (j.contains("workers")) {
    if (!j["workers"].is_array()) return invalid_argument("gateway config '{}': 'workers' must be an array", path);
    for (const auto& wj : j["workers"]) {
      // {"url": "http://h:p" | "dns": "name:port", "models": [...], "weight": 2}
      std::string spec;
      if (wj.is_string()) {
        spec = wj.get<std::string>();
      } else if (wj.is_object() && wj.contains("url") && wj["url"].is_string()) {
        spec = wj["url"].get<std::string>();
      } else if (wj.is_object() && wj.contains("dns") && wj["dns"].is_string()) {
        spec = "dns:" + wj["dns"].get<std::string>();
      } else {
        return invalid_argument("gateway config '{}': a worker needs \"url\" or \"dns\" (got {})", path, wj.dump());
      }
      PAGODA_ASSIGN_OR_RETURN(WorkerSpec w, parse_worker(spec));
      if (wj.is_object()) {
        PAGODA_RETURN_IF_ERROR(read_key(wj, "models", &w.models));
        PAGODA_RETURN_IF_ERROR(read_key(wj, "weight", &w.weight));
      }
      c->workers.push_back(std::move(w));
    }
  }
  if (j.contains("api_keys")) {
    // [{"key": "k1", "requests_per_s": 5, "tokens_per_min": 20000}, "k2"]
    if (!j["api_keys"].is_array()) return invalid_argument("gateway config '{}': 'api_keys' must be an array", path);
    for (const auto& kj : j["api_keys"]) {
      ApiKeySpec k;
      if (kj.is_string()) {
        k.key = kj.get<std::string>();
      } else if (kj.is_object() && kj.contains("key") && kj["key"].is_string()) {
        k.key = kj["key"].get<std::string>();
        PAGODA_RETURN_IF_ERROR(read_limit(kj, "api key '" + k.key + "'", &k.limit));
      } else {
        return invalid_argument("gateway config '{}': an api key needs \"key\" (got {})", path, kj.dump());
      }
      c->api_keys.push_back(std::move(k));
    }
  }
  return Status();
}

Status validate(const GatewayConfig& c) {
  if (c.port < 0 || c.port > 65535) return invalid_argument("gateway: port {} is not in 0..65535", c.port);
  if (c.threads < 1 || c.threads > 256) return invalid_argument("gateway: threads {} is not in 1..256", c.threads);
  if (c.workers.empty()) return invalid_argument("gateway: no workers (give --worker URL or \"workers\" in --config)");
  for (const auto& w : c.workers)
    if (!(w.weight > 0)) return invalid_argument("gateway: worker {} has weight {} (must be > 0)", w.label(), w.weight);
  if (c.policy != "prefix" && c.policy != "least-load" && c.policy != "round-robin")
    return invalid_argument("gateway: policy '{}' is not one of prefix, least-load, round-robin", c.policy);
  if (c.prefix_chunk_chars < 1 || c.prefix_chunks < 1)
    return invalid_argument("gateway: prefix_chunk_chars and prefix_chunks must be >= 1");
  if (!(c.load_bound >= 1)) return invalid_argument("gateway: load_bound {} must be >= 1", c.load_bound);
  if (c.load_bound_floor < 0) return invalid_argument("gateway: load_bound_floor must be >= 0");
  if (c.max_inflight < 1 || c.max_queue < 0) return invalid_argument("gateway: max_inflight must be >= 1, max_queue >= 0");
  if (c.max_attempts < 1) return invalid_argument("gateway: max_attempts must be >= 1");
  if (c.unhealthy_after_checks < 1) return invalid_argument("gateway: unhealthy_after_checks must be >= 1");
  if (c.eject_after_failures < 1) return invalid_argument("gateway: eject_after_failures must be >= 1");
  for (double t : {c.connect_timeout_s, c.first_byte_timeout_s, c.stream_idle_timeout_s, c.client_idle_timeout_s,
                   c.health_interval_s, c.health_timeout_s, c.queue_timeout_s, c.dns_interval_s})
    if (!(t > 0)) return invalid_argument("gateway: every timeout and interval must be > 0 seconds");
  if (c.body_limit < 1) return invalid_argument("gateway: body_limit must be >= 1");
  if (!(c.upstream_keepalive_s >= 0))
    return invalid_argument("gateway: upstream_keepalive_s must be >= 0 seconds (0: a new connection per request)");
  for (const auto& k : c.api_keys)
    if (k.key.empty()) return invalid_argument("gateway: an api key is empty");
  return Status();
}

}  // namespace pagoda::gateway
