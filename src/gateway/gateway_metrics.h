// The gateway's Prometheus metrics (text exposition format 0.0.4), all named pagoda_gateway_*:
//   requests_total{route,worker,code}        requests answered (worker "-" when none was reached)
//   upstream_errors_total{worker,kind}       connect | timeout | 5xx | stream_cut | protocol
//   retries_total{route}                     attempts on another worker before the first byte
//   routing_decisions_total{worker,reason}   router choices (gateway/router.h reasons)
//   prefix_affinity_lookups_total / prefix_affinity_hits_total
//                                            requests with a prefix key / those routed to the worker
//                                            that served the key last (a hit in its prefix cache)
//   rate_limited_total{scope}                429s: key | global | queue
//   request_duration_seconds{route}          histogram, arrival to last byte
//   ttft_seconds{route}                      histogram, arrival to the first body byte sent (streams)
//   ttft_overhead_seconds{route}             histogram, the gateway's own part of it: arrival to the
//                                            request written to the worker that answered, plus that
//                                            worker's first chunk read to it written to the client
//   inflight, queued, worker_up{worker}, worker_inflight{worker}, worker_outstanding_tokens{worker}
//                                            gauges (rendered from the live state by the caller)
// Thread-safe (one mutex); label values are escaped.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace pagoda::gateway {

class GatewayMetrics {
 public:
  GatewayMetrics();
  void count(const std::string& name, const std::vector<std::pair<std::string, std::string>>& labels, double v = 1);
  void observe(const std::string& name, const std::vector<std::pair<std::string, std::string>>& labels, double seconds);
  // Every counter and histogram; `gauges` (already formatted lines with their HELP/TYPE) appended.
  std::string render(const std::string& gauges) const;
  double value(const std::string& name, const std::string& labels) const;  // tests: a counter's value

  static std::string label_string(const std::vector<std::pair<std::string, std::string>>& labels);

 private:
  struct Histogram {
    std::vector<double> counts;  // per bucket (non-cumulative)
    double sum = 0, count = 0;
  };
  struct Family {
    std::string help, type;
    std::map<std::string, double> counters;
    std::map<std::string, Histogram> histograms;
  };
  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
  std::vector<double> buckets_;
};

}  // namespace pagoda::gateway
