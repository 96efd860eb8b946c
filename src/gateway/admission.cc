#include "gateway/admission.h"

#include <cmath>

#include <fmt/format.h>

namespace pagoda::gateway {

Admission::Admission(const GatewayConfig& config) : global_(config.global_limit) {
  for (const auto& k : config.api_keys) keys_[k.key] = std::make_unique<RateLimiter>(k.limit);
}

std::optional<Refusal> Admission::authenticate(const std::string& authorization, std::string* key) const {
  key->clear();
  if (keys_.empty()) return std::nullopt;
  std::string token;
  if (authorization.size() > 7 && (authorization.rfind("Bearer ", 0) == 0 || authorization.rfind("bearer ", 0) == 0))
    token = authorization.substr(7);
  if (token.empty() || !keys_.count(token)) {
    Refusal r{401, "authentication_error", "invalid_api_key",
              token.empty() ? "missing API key (send \"Authorization: Bearer KEY\")" : "invalid API key", "auth", 0};
    return r;
  }
  *key = token;
  return std::nullopt;
}

std::optional<Refusal> Admission::charge(const std::string& key, double tokens, double now) {
  auto it = keys_.find(key);
  RateLimiter* own = it == keys_.end() ? nullptr : it->second.get();
  if (own && own->config().enabled()) {
    if (auto wait = own->admit("", tokens, now)) {
      return Refusal{429, "rate_limit_error", "rate_limit_exceeded",
                     fmt::format("rate limit of this API key exceeded; retry in {:.1f} s", *wait), "key", *wait};
    }
  }
  if (global_.config().enabled()) {
    if (auto wait = global_.admit("*", tokens, now)) {
      if (own && own->config().enabled()) own->refund("", tokens, now);
      return Refusal{429, "rate_limit_error", "rate_limit_exceeded",
                     fmt::format("the gateway's global rate limit is exceeded; retry in {:.1f} s", *wait), "global",
                     *wait};
    }
  }
  return std::nullopt;
}

}  // namespace pagoda::gateway
