// Admission of a request at the gateway: the API key, then the per-key and the global rate limits
// (requests/s and tokens/min token buckets with burst, common/token_bucket.h).
//
// Without configured keys every caller is the anonymous key "" and only the global limit applies.
// A key's limit is checked first, then the global one; a global refusal gives the key's tokens back
// (its request count stays charged), so one key's overload spends its own budget before the global
// one and other keys keep theirs. Retry-After is the seconds until the refused bucket would admit.
// Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/token_bucket.h"
#include "gateway/config.h"

namespace pagoda::gateway {

struct Refusal {
  int status = 0;          // 401 | 429
  std::string type, code, message, scope;  // scope: key | global | auth
  double retry_after_s = 0;
};

class Admission {
 public:
  explicit Admission(const GatewayConfig& config);
  bool auth_enabled() const { return !keys_.empty(); }
  // The key named by "Authorization: Bearer KEY", or a 401 refusal.
  std::optional<Refusal> authenticate(const std::string& authorization, std::string* key) const;
  // Charges one request and `tokens` tokens to `key` and to the global limit.
  std::optional<Refusal> charge(const std::string& key, double tokens, double now);

 private:
  std::map<std::string, std::unique_ptr<RateLimiter>> keys_;
  RateLimiter global_;
};

}  // namespace pagoda::gateway
