// Token buckets for per-API-key rate limits (the server's and the gateway's): requests per second and tokens per minute.
//
// A bucket holds up to `capacity` tokens and refills at `rate` tokens per second. take(n) succeeds
// when n tokens are there (a request larger than the capacity is admitted when the bucket is
// full, so it cannot be starved forever); otherwise it fails and says how many seconds until it
// would succeed (the Retry-After value). refund() returns tokens not used after all (a request
// charged for max_tokens that stopped early).
//
// Time is passed in (seconds, any monotonic clock) so tests are deterministic.
// Thread-safety: RateLimiter is thread-safe; TokenBucket is not (the limiter locks around it).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace pagoda {

class TokenBucket {
 public:
  TokenBucket(double rate_per_s, double capacity, double now);
  // Takes n tokens; nullopt on success, else seconds until n would be available (> 0).
  std::optional<double> take(double n, double now);
  void refund(double n, double now);
  double available(double now);
  // True when the bucket has refilled to capacity: it is then the same as a fresh one.
  bool full(double now);

 private:
  void refill(double now);
  double rate_, capacity_, tokens_, last_;
};

struct RateLimitConfig {
  double requests_per_s = 0;   // 0: unlimited; burst = max(1, rps)
  double tokens_per_min = 0;   // 0: unlimited; burst = one minute's worth
  bool enabled() const { return requests_per_s > 0 || tokens_per_min > 0; }
};

// Parses "rps=5,tpm=20000" (either part may be omitted). Error message on failure.
std::optional<std::string> parse_rate_limit(const std::string& spec, RateLimitConfig* out);

class RateLimiter {
 public:
  explicit RateLimiter(RateLimitConfig config) : config_(config) {}
  const RateLimitConfig& config() const { return config_; }
  // Charges one request and `tokens` tokens to `key`. nullopt: admitted; else Retry-After seconds
  // (nothing is charged then).
  std::optional<double> admit(const std::string& key, double tokens, double now);
  // Gives back tokens charged by admit() but not used.
  void refund(const std::string& key, double tokens, double now);
  // Keys with state (buckets not yet refilled). Bounded: buckets that have refilled completely are
  // indistinguishable from fresh ones and are dropped (swept when the table doubles), so memory
  // follows the callers active within one refill period, not every caller ever seen.
  size_t num_keys();

 private:
  struct Buckets {
    std::optional<TokenBucket> requests, tokens;
  };
  Buckets& buckets(const std::string& key, double now);
  void sweep(double now);
  RateLimitConfig config_;
  std::mutex mu_;
  std::unordered_map<std::string, Buckets> by_key_;
  size_t sweep_at_ = kMinSweep;
  static constexpr size_t kMinSweep = 1024;
};

}  // namespace pagoda
