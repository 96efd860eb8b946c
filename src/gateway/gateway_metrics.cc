#include "gateway/gateway_metrics.h"

#include <fmt/format.h>

#include <stdexcept>

namespace pagoda::gateway {
namespace {

std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

GatewayMetrics::GatewayMetrics()
    : buckets_{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120} {
  const std::pair<const char*, const char*> counters[] = {
      {"requests_total", "Requests answered by the gateway"},
      {"upstream_errors_total", "Failed attempts on a worker, by kind"},
      {"retries_total", "Attempts on another worker before the first byte was sent"},
      {"routing_decisions_total", "Router choices by worker and reason"},
      {"prefix_affinity_lookups_total", "Requests that had a prefix-affinity key"},
      {"prefix_affinity_hits_total", "Keyed requests routed to the worker that served the key last"},
      {"rate_limited_total", "Requests refused with 429 or 503 by admission, by scope"},
      {"upstream_connections_total", "Connections that carried a request to a worker: new, or reused (kept alive)"},
  };
  for (const auto& [name, help] : counters) families_[name] = Family{help, "counter", {}, {}};
  families_["request_duration_seconds"] = Family{"Arrival to last byte", "histogram", {}, {}};
  families_["ttft_seconds"] = Family{"Arrival to the first body byte sent to the client (streams)", "histogram", {}, {}};
  families_["ttft_overhead_seconds"] = Family{"The gateway's own part of ttft_seconds: arrival to the request written to the worker, plus the worker's first chunk read to it written to the client", "histogram", {}, {}};
}

std::string GatewayMetrics::label_string(const std::vector<std::pair<std::string, std::string>>& labels) {
  std::string s;
  for (const auto& [k, v] : labels) s += (s.empty() ? "" : ",") + k + "=\"" + escape(v) + "\"";
  return s;
}

void GatewayMetrics::count(const std::string& name, const std::vector<std::pair<std::string, std::string>>& labels,
                           double v) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) throw std::logic_error("unknown gateway counter " + name);
  it->second.counters[label_string(labels)] += v;
}

void GatewayMetrics::observe(const std::string& name, const std::vector<std::pair<std::string, std::string>>& labels,
                             double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) throw std::logic_error("unknown gateway histogram " + name);
  Histogram& h = it->second.histograms[label_string(labels)];
  if (h.counts.empty()) h.counts.assign(buckets_.size(), 0);
  for (size_t i = 0; i < buckets_.size(); ++i)
    if (seconds <= buckets_[i]) {
      h.counts[i] += 1;
      break;
    }
  h.sum += seconds;
  h.count += 1;
}

double GatewayMetrics::value(const std::string& name, const std::string& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto c = it->second.counters.find(labels);
  return c == it->second.counters.end() ? 0 : c->second;
}

std::string GatewayMetrics::render(const std::string& gauges) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const std::string full = "pagoda_gateway_" + name;
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", full, f.help, full, f.type);
    for (const auto& [labels, v] : f.counters)
      out += labels.empty() ? fmt::format("{} {}\n", full, v) : fmt::format("{}{{{}}} {}\n", full, labels, v);
    for (const auto& [labels, h] : f.histograms) {
      const std::string sep = labels.empty() ? "" : ",";
      double cum = 0;
      for (size_t i = 0; i < buckets_.size(); ++i) {
        cum += h.counts[i];
        out += fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", full, labels, sep, buckets_[i], cum);
      }
      out += fmt::format("{}_bucket{{{}{}le=\"+Inf\"}} {}\n", full, labels, sep, h.count);
      const std::string braces = labels.empty() ? "" : "{" + labels + "}";
      out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", full, braces, h.sum, full, braces, h.count);
    }
  }
  return out + gauges;
}

}  // namespace pagoda::gateway
