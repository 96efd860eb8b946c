// The server's Prometheus metrics: names and meanings mirror vLLM's (`vllm:` -> `pagoda:`), every
// series labelled with model_name.
//
//   gauges      num_requests_running, num_requests_waiting, kv_cache_usage_perc (0..1),
//               gpu_memory_used_bytes / gpu_memory_total_bytes (NVML; 0 on the CPU)
//   counters    prefix_cache_queries_total, prefix_cache_hits_total (tokens), num_preemptions_total,
//               prompt_tokens_total, generation_tokens_total (mirrored from EngineStats at scrape),
//               request_success_total{finished_reason}, http_requests_total{route,status},
//               spec_decode_num_drafts_total, spec_decode_num_draft_tokens_total,
//               spec_decode_num_accepted_tokens_total, spec_decode_num_accepted_tokens_per_pos_total{position}
//               (speculative decoding; zero without it),
//               kv_tier_hits_total{tier} (tokens), kv_tier_stores_total{tier} (blocks),
//               kv_tier_rejected_total{tier="disk"}, kv_tier_swaps_total{direction} (KV tiers)
//   gauges      kv_tier_blocks{tier="host"|"disk_bytes"}
//   histograms  time_to_first_token_seconds, inter_token_latency_seconds,
//               e2e_request_latency_seconds, request_queue_time_seconds (per finished sequence),
//               iteration_tokens_total (tokens per engine step)
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/metrics.h"

namespace pagoda::server {

// Timings of one finished sequence (engine clock, seconds).
struct SequenceTimings {
  double arrival = 0, first_scheduled = 0, first_token = 0, finished = 0;
  std::vector<double> token_times;  // when each output with tokens arrived
  std::string finish_reason;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);
  void record_sequence(const SequenceTimings& t);
  void record_step(int64_t num_tokens);
  void record_http(const std::string& route, int status);
  // Renders, after mirroring the engine's current stats.
  std::string render(const EngineStats& stats);
  MetricsRegistry& registry() { return registry_; }

 private:
  std::string model_;
  MetricsRegistry registry_;
  Family<Gauge>& running_;
  Family<Gauge>& waiting_;
  Family<Gauge>& kv_usage_;
  Family<Gauge>& kv_blocks_;
  Family<Gauge>& kv_free_blocks_;
  Family<Gauge>& device_memory_used_;
  Family<Gauge>& device_memory_total_;
  Family<Counter>& prefix_queries_;
  Family<Counter>& prefix_hits_;
  Family<Counter>& kv_tier_hits_;
  Family<Counter>& kv_tier_stores_;
  Family<Counter>& kv_tier_rejected_;
  Family<Counter>& kv_tier_swaps_;
  Family<Gauge>& kv_tier_blocks_;
  Family<Counter>& preemptions_;
  Family<Counter>& prompt_tokens_;
  Family<Counter>& generation_tokens_;
  Family<Counter>& spec_drafts_;
  Family<Counter>& spec_draft_tokens_;
  Family<Counter>& spec_accepted_tokens_;
  Family<Counter>& spec_accepted_per_pos_;
  Family<Counter>& success_;
  Family<Histogram>& ttft_;
  Family<Histogram>& itl_;
  Family<Histogram>& e2e_;
  Family<Histogram>& queue_;
  Family<Histogram>& iteration_tokens_;
  Family<Counter>& http_;
};

}  // namespace pagoda::server
