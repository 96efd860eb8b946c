// The server's rate limits are the common token buckets (common/token_bucket.h, shared with the gateway).
#pragma once

#include "common/token_bucket.h"

namespace pagoda::server {
using pagoda::parse_rate_limit;
using pagoda::RateLimitConfig;
using pagoda::RateLimiter;
using pagoda::TokenBucket;
}  // namespace pagoda::server
