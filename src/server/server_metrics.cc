#include "server/server_metrics.h"

namespace pagoda::server {
namespace {
// Bucket bounds as vLLM's.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4,
                                         0.5,  0.75,  1.0,  2.5,   5.0, 7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kLatencyBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0,  15.0,
                                             20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kIterationBuckets = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
}  // namespace

ServerMetrics::ServerMetrics(std::string model_name)
    : model_(std::move(model_name)),
      running_(registry_.gauge("pagoda:num_requests_running", "Number of requests in model execution batches.", {"model_name"})),
      waiting_(registry_.gauge("pagoda:num_requests_waiting", "Number of requests waiting to be processed.", {"model_name"})),
      kv_usage_(registry_.gauge("pagoda:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", {"model_name"})),
      kv_blocks_(registry_.gauge("pagoda:kv_cache_blocks", "KV-cache blocks usable by requests.", {"model_name"})),
      kv_free_blocks_(registry_.gauge("pagoda:kv_cache_free_blocks",
                                      "KV-cache blocks no request holds (prefix-cached ones included).", {"model_name"})),
      device_memory_used_(registry_.gauge("pagoda:gpu_memory_used_bytes",
                                          "Accelerator memory in use, all processes (NVML, else cudaMemGetInfo); 0 on the CPU.", {"model_name"})),
      device_memory_total_(registry_.gauge("pagoda:gpu_memory_total_bytes", "Accelerator memory in total; 0 on the CPU.", {"model_name"})),
      prefix_queries_(registry_.counter("pagoda:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", {"model_name"})),
      prefix_hits_(registry_.counter("pagoda:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", {"model_name"})),
      kv_tier_hits_(registry_.counter("pagoda:kv_tier_hits_total",
                                      "Prefix tokens found in a KV tier below the KV cache instead of recomputed, by tier (host, disk).",
                                      {"model_name", "tier"})),
      kv_tier_stores_(registry_.counter("pagoda:kv_tier_stores_total",
                                        "KV blocks written to a tier: host (evicted from the KV cache), disk (evicted from the host tier).",
                                        {"model_name", "tier"})),
      kv_tier_rejected_(registry_.counter("pagoda:kv_tier_rejected_total",
                                          "Disk-tier blocks found corrupt or truncated (checksum) and treated as misses.", {"model_name", "tier"})),
      kv_tier_swaps_(registry_.counter("pagoda:kv_tier_swaps_total", "Requests swapped to / from the host tier by preemption.",
                                       {"model_name", "direction"})),
      kv_tier_blocks_(registry_.gauge("pagoda:kv_tier_blocks", "Host-tier blocks in all (host); disk-tier bytes in use (disk_bytes).",
                                      {"model_name", "tier"})),
      preemptions_(registry_.counter("pagoda:num_preemptions_total", "Cumulative number of preemptions from the engine.", {"model_name"})),
      prompt_tokens_(registry_.counter("pagoda:prompt_tokens_total", "Number of prefill tokens processed.", {"model_name"})),
      generation_tokens_(registry_.counter("pagoda:generation_tokens_total", "Number of generation tokens processed.", {"model_name"})),
      spec_drafts_(registry_.counter("pagoda:spec_decode_num_drafts_total", "Number of spec decoding drafts (verifications with drafts).", {"model_name"})),
      spec_draft_tokens_(registry_.counter("pagoda:spec_decode_num_draft_tokens_total", "Number of draft tokens.", {"model_name"})),
      spec_accepted_tokens_(registry_.counter("pagoda:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", {"model_name"})),
      spec_accepted_per_pos_(registry_.counter("pagoda:spec_decode_num_accepted_tokens_per_pos_total",
                                               "Accepted tokens per draft position.", {"model_name", "position"})),
      success_(registry_.counter("pagoda:request_success_total", "Count of finished sequences, by finish reason.", {"model_name", "finished_reason"})),
      ttft_(registry_.histogram("pagoda:time_to_first_token_seconds", "Histogram of time to first token in seconds.", {"model_name"}, kTtftBuckets)),
      itl_(registry_.histogram("pagoda:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", {"model_name"}, kItlBuckets)),
      e2e_(registry_.histogram("pagoda:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", {"model_name"}, kLatencyBuckets)),
      queue_(registry_.histogram("pagoda:request_queue_time_seconds", "Histogram of time spent waiting in the queue in seconds.", {"model_name"}, kLatencyBuckets)),
      iteration_tokens_(registry_.histogram("pagoda:iteration_tokens_total", "Histogram of number of tokens per engine step.", {"model_name"}, kIterationBuckets)),
      http_(registry_.counter("pagoda:http_requests_total", "HTTP requests by route and status code.", {"route", "status"})) {
  // Create the unlabelled-by-reason children up front so the series exist from the first scrape.
  for (const char* r : {"stop", "length", "abort", "error"}) success_.labels({model_, r});
  ttft_.labels({model_});
  itl_.labels({model_});
  e2e_.labels({model_});
  queue_.labels({model_});
  iteration_tokens_.labels({model_});
}

void ServerMetrics::record_sequence(const SequenceTimings& t) {
  success_.labels({model_, t.finish_reason}).inc();
  if (t.first_token > 0) ttft_.labels({model_}).observe(t.first_token - t.arrival);
  if (t.first_scheduled > 0) queue_.labels({model_}).observe(t.first_scheduled - t.arrival);
  e2e_.labels({model_}).observe(t.finished - t.arrival);
  auto& itl = itl_.labels({model_});
  for (size_t i = 1; i < t.token_times.size(); ++i) itl.observe(t.token_times[i] - t.token_times[i - 1]);
}

void ServerMetrics::record_step(int64_t num_tokens) { iteration_tokens_.labels({model_}).observe(static_cast<double>(num_tokens)); }

void ServerMetrics::record_http(const std::string& route, int status) { http_.labels({route, std::to_string(status)}).inc(); }

std::string ServerMetrics::render(const EngineStats& s) {
  running_.labels({model_}).set(static_cast<double>(s.num_running));
  waiting_.labels({model_}).set(static_cast<double>(s.num_waiting));
  kv_usage_.labels({model_}).set(s.kv_cache_usage);
  kv_blocks_.labels({model_}).set(static_cast<double>(s.num_kv_blocks));
  kv_free_blocks_.labels({model_}).set(static_cast<double>(s.free_kv_blocks));
  device_memory_used_.labels({model_}).set(static_cast<double>(s.device_memory_used));
  device_memory_total_.labels({model_}).set(static_cast<double>(s.device_memory_total));
  prefix_queries_.labels({model_}).set(static_cast<double>(s.prefix_cache_queries));
  prefix_hits_.labels({model_}).set(static_cast<double>(s.prefix_cache_hits));
  preemptions_.labels({model_}).set(static_cast<double>(s.num_preemptions));
  kv_tier_hits_.labels({model_, "host"}).set(static_cast<double>(s.kv_tier.host_hits));
  kv_tier_hits_.labels({model_, "disk"}).set(static_cast<double>(s.kv_tier.disk_hits));
  kv_tier_stores_.labels({model_, "host"}).set(static_cast<double>(s.kv_tier.host_stores));
  kv_tier_stores_.labels({model_, "disk"}).set(static_cast<double>(s.kv_tier.disk_stores));
  kv_tier_rejected_.labels({model_, "disk"}).set(static_cast<double>(s.kv_tier.disk_rejected));
  kv_tier_swaps_.labels({model_, "out"}).set(static_cast<double>(s.kv_tier.swap_outs));
  kv_tier_swaps_.labels({model_, "in"}).set(static_cast<double>(s.kv_tier.swap_ins));
  kv_tier_blocks_.labels({model_, "host"}).set(static_cast<double>(s.kv_host_tier_blocks));
  kv_tier_blocks_.labels({model_, "disk_bytes"}).set(static_cast<double>(s.kv_disk_tier_bytes));
  prompt_tokens_.labels({model_}).set(static_cast<double>(s.prompt_tokens_total));
  generation_tokens_.labels({model_}).set(static_cast<double>(s.generation_tokens_total));
  spec_drafts_.labels({model_}).set(static_cast<double>(s.spec_num_drafts));
  spec_draft_tokens_.labels({model_}).set(static_cast<double>(s.spec_num_draft_tokens));
  spec_accepted_tokens_.labels({model_}).set(static_cast<double>(s.spec_num_accepted_tokens));
  for (size_t i = 0; i < s.spec_accepted_per_position.size(); ++i)
    spec_accepted_per_pos_.labels({model_, std::to_string(i)}).set(static_cast<double>(s.spec_accepted_per_position[i]));
  return registry_.render();
}

}  // namespace pagoda::server
