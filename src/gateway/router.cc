#include "gateway/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "gateway/prefix_key.h"

namespace pagoda::gateway {
namespace {

uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

size_t least_load(const std::vector<Candidate>& c, int64_t tokens_per_request, uint64_t rotation) {
  const size_t n = c.size();
  size_t best = rotation % n;
  double best_score = load_score(c[best], tokens_per_request);
  for (size_t k = 1; k < n; ++k) {
    const size_t i = (rotation + k) % n;
    const double s = load_score(c[i], tokens_per_request);
    if (s < best_score) best = i, best_score = s;
  }
  return best;
}

}  // namespace

double load_score(const Candidate& c, int64_t tokens_per_request) {
  const int64_t foreign = std::max<int64_t>(0, c.reported_requests - c.inflight);
  double s = static_cast<double>(c.outstanding_tokens + foreign * tokens_per_request) / c.weight;
  if (c.kv_usage > 0.9) s = (s + 1) * (1 + 20 * (c.kv_usage - 0.9));
  return s;
}

std::vector<size_t> hash_order(const std::vector<Candidate>& c, uint64_t key) {
  std::vector<double> score(c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    // Weighted rendezvous hashing: -w / ln(u), u uniform in (0, 1) from hash(key, worker).
    const uint64_t h = mix64(fnv1a64(c[i].label, key));
    const double u = (static_cast<double>(h >> 11) + 0.5) / 9007199254740992.0;
    score[i] = -c[i].weight / std::log(u);
  }
  std::vector<size_t> order(c.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] > score[b]; });
  return order;
}

RouteDecision choose_worker(const std::vector<Candidate>& c, const RouteInput& in) {
  RouteDecision d;
  if (c.size() == 1) {
    d.index = 0;
    d.reason = in.session_key ? "session" : in.prefix_key && in.policy == "prefix" ? "prefix" : "least-load";
    d.affinity_home = in.session_key || (in.prefix_key && in.policy == "prefix");
    d.inflight = c[0].inflight;
    return d;
  }
  std::optional<uint64_t> key;
  std::string kind;
  if (in.session_key) {
    key = in.session_key;
    kind = "session";
  } else if (in.prefix_key && in.policy == "prefix") {
    key = in.prefix_key;
    kind = "prefix";
  }
  if (key) {
    int64_t total = 0;
    double weights = 0;
    for (const auto& x : c) total += x.inflight, weights += x.weight;
    const auto order = hash_order(c, *key);
    for (size_t rank = 0; rank < order.size(); ++rank) {
      const Candidate& x = c[order[rank]];
      const double bound = std::max(static_cast<double>(in.load_bound_floor),
                                    std::ceil(in.load_bound * static_cast<double>(total + 1) * x.weight / weights));
      if (static_cast<double>(x.inflight + 1) <= bound) {
        d.index = order[rank];
        d.reason = rank == 0 ? kind : kind + "-overflow";
        d.affinity_home = rank == 0;
        d.inflight = x.inflight;
        d.bound = static_cast<int64_t>(bound);
        return d;
      }
    }
    // Every worker at its bound (cannot happen with load_bound >= 1, kept for safety).
  }
  if (in.policy == "round-robin") {
    // Weighted: each worker appears ceil(weight * 4) times in the rotation.
    std::vector<size_t> slots;
    for (size_t i = 0; i < c.size(); ++i)
      for (int k = 0; k < std::max(1, static_cast<int>(std::lround(c[i].weight * 4))); ++k) slots.push_back(i);
    d.index = slots[in.rotation % slots.size()];
    d.reason = "round-robin";
    d.inflight = c[d.index].inflight;
    return d;
  }
  d.index = least_load(c, in.tokens_per_request, in.rotation);
  d.reason = "least-load";
  d.inflight = c[d.index].inflight;
  return d;
}

}  // namespace pagoda::gateway
