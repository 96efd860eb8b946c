#include "server/stats_logger.h"

#include <chrono>

#include "common/log.h"

namespace pagoda::server {

std::string format_stats_line(const EngineStats& before, const EngineStats& now, double dt) {
  dt = std::max(dt, 1e-9);
  const double prompt_tps = static_cast<double>(now.prompt_tokens_total - before.prompt_tokens_total) / dt;
  const double gen_tps = static_cast<double>(now.generation_tokens_total - before.generation_tokens_total) / dt;
  const int64_t queries = now.prefix_cache_queries - before.prefix_cache_queries;
  const int64_t hits = now.prefix_cache_hits - before.prefix_cache_hits;
  return fmt::format(
      "Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} tokens/s, Running: {} reqs, "
      "Waiting: {} reqs, KV cache usage: {:.1f}%, Prefix cache hit rate: {:.1f}%, Preemptions: {}",
      prompt_tps, gen_tps, now.num_running, now.num_waiting, 100 * now.kv_cache_usage,
      queries > 0 ? 100.0 * static_cast<double>(hits) / static_cast<double>(queries) : 0.0,
      now.num_preemptions - before.num_preemptions);
}

StatsLogger::StatsLogger(Engine& engine, double interval_s) : engine_(engine), interval_s_(interval_s) {
  if (interval_s_ > 0) thread_ = std::thread([this] { run(); });
}

StatsLogger::~StatsLogger() { stop(); }

void StatsLogger::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StatsLogger::run() {
  EngineStats before = engine_.stats();
  auto t_before = std::chrono::steady_clock::now();
  bool idle_printed = true;  // nothing to say before the first request
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::duration<double>(interval_s_), [this] { return stop_; })) {
    const EngineStats now = engine_.stats();
    const auto t_now = std::chrono::steady_clock::now();
    const bool active = now.num_running > 0 || now.num_waiting > 0 || now.steps != before.steps;
    if (active || !idle_printed) {
      log_info("stats", "{}", format_stats_line(before, now, std::chrono::duration<double>(t_now - t_before).count()));
      idle_printed = !active;
    }
    before = now;
    t_before = t_now;
  }
}

}  // namespace pagoda::server
