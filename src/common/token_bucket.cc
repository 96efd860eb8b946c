#include "common/token_bucket.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <sstream>

namespace pagoda {

TokenBucket::TokenBucket(double rate_per_s, double capacity, double now)
    : rate_(rate_per_s), capacity_(capacity), tokens_(capacity), last_(now) {}

void TokenBucket::refill(double now) {
  if (now > last_) {
    tokens_ = std::min(capacity_, tokens_ + (now - last_) * rate_);
    last_ = now;
  }
}

std::optional<double> TokenBucket::take(double n, double now) {
  refill(now);
  const double need = std::min(n, capacity_);  // oversized requests need a full bucket
  if (tokens_ >= need) {
    tokens_ -= n;  // may go negative for an oversized request: later requests wait it out
    return std::nullopt;
  }
  return (need - tokens_) / rate_;
}

void TokenBucket::refund(double n, double now) {
  refill(now);
  tokens_ = std::min(capacity_, tokens_ + n);
}

double TokenBucket::available(double now) {
  refill(now);
  return tokens_;
}

bool TokenBucket::full(double now) {
  refill(now);
  return tokens_ >= capacity_;
}

std::optional<std::string> parse_rate_limit(const std::string& spec, RateLimitConfig* out) {
  std::stringstream ss(spec);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    if (eq == std::string::npos) return "expected key=value in '" + part + "'";
    const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(v >= 0)) return "bad number '" + value + "' for " + key;
    if (key == "rps") out->requests_per_s = v;
    else if (key == "tpm") out->tokens_per_min = v;
    else return "unknown rate limit '" + key + "' (rps, tpm)";
  }
  return std::nullopt;
}

void RateLimiter::sweep(double now) {
  for (auto it = by_key_.begin(); it != by_key_.end();) {
    Buckets& b = it->second;
    const bool idle = (!b.requests || b.requests->full(now)) && (!b.tokens || b.tokens->full(now));
    it = idle ? by_key_.erase(it) : std::next(it);
  }
  sweep_at_ = std::max(kMinSweep, 2 * by_key_.size());
}

size_t RateLimiter::num_keys() {
  std::lock_guard<std::mutex> lock(mu_);
  return by_key_.size();
}

RateLimiter::Buckets& RateLimiter::buckets(const std::string& key, double now) {
  auto it = by_key_.find(key);
  if (it != by_key_.end()) return it->second;
  if (by_key_.size() >= sweep_at_) sweep(now);
  Buckets b;
  if (config_.requests_per_s > 0)
    b.requests.emplace(config_.requests_per_s, std::max(1.0, config_.requests_per_s), now);
  if (config_.tokens_per_min > 0) b.tokens.emplace(config_.tokens_per_min / 60.0, config_.tokens_per_min, now);
  return by_key_.emplace(key, std::move(b)).first->second;
}

std::optional<double> RateLimiter::admit(const std::string& key, double tokens, double now) {
  if (!config_.enabled()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  Buckets& b = buckets(key, now);
  if (b.requests) {
    if (auto wait = b.requests->take(1, now)) return wait;
  }
  if (b.tokens) {
    if (auto wait = b.tokens->take(tokens, now)) {
      if (b.requests) b.requests->refund(1, now);
      return wait;
    }
  }
  return std::nullopt;
}

void RateLimiter::refund(const std::string& key, double tokens, double now) {
  if (config_.tokens_per_min <= 0 || tokens <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  Buckets& b = buckets(key, now);
  if (b.tokens) b.tokens->refund(tokens, now);
}

}  // namespace pagoda
