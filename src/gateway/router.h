// Routing policies: which worker of those able to serve a request takes it, and why.
//
//   session     the request carries the session header: rendezvous (highest-random-weight)
//               hashing of its value over the candidates, so a session stays on one worker while
//               the set is unchanged and only 1/n of the sessions move when a worker comes or goes
//   prefix      the prompt has a prefix key (gateway/prefix_key.h): the same hashing of the key
//   *-overflow  the hashed worker is over its load bound, so the next one in the key's hash order
//               that is within it (consistent hashing with bounded loads, Mirrokni et al. 2018):
//               worker i may hold at most max(load_bound_floor, ceil(load_bound * (total
//               in-flight + 1) * w_i / W)) requests, so a hot prefix spills over instead of
//               overloading one worker (the floor: a worker batches a few requests at no cost,
//               so at low load affinity is kept)
//   least-load  no key (or policy "least-load"): the smallest (outstanding tokens + foreign load)
//               / weight, where outstanding tokens are the gateway's own estimate of the requests it
//               has in flight on the worker and foreign load is what the worker's /load reports
//               beyond them (other gateways' requests) times tokens_per_request; KV usage above 0.9
//               raises the score steeply
//   round-robin policy "round-robin": weighted rotation
//
// Pure functions of a snapshot: thread-safe, deterministic given the rotation counter.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pagoda::gateway {

struct Candidate {
  std::string label;           // stable identity (HOST:PORT): the hash input
  double weight = 1;
  int64_t inflight = 0;        // the gateway's requests in flight on it
  int64_t outstanding_tokens = 0;
  int64_t reported_requests = 0;  // running + waiting from the worker's last /load
  double kv_usage = 0;            // 0..1 from the worker's last /load
};

struct RouteInput {
  std::string policy = "prefix";
  std::optional<uint64_t> session_key;  // hash of the session header's value
  std::optional<uint64_t> prefix_key;
  double load_bound = 1.25;
  int64_t load_bound_floor = 8;
  int64_t tokens_per_request = 256;
  uint64_t rotation = 0;        // a counter the caller advances per request (ties, round-robin)
};

struct RouteDecision {
  size_t index = 0;             // into the candidates
  std::string reason;           // session | session-overflow | prefix | prefix-overflow | least-load | round-robin
  bool affinity_home = false;   // the key's first choice was taken
  int64_t inflight = 0;         // the chosen worker's in-flight requests before this one
  int64_t bound = 0;            // its load bound for a keyed (session/prefix) choice, else 0
};

// Candidates must be non-empty.
RouteDecision choose_worker(const std::vector<Candidate>& candidates, const RouteInput& in);
// The order in which rendezvous hashing prefers the candidates for `key` (best first).
std::vector<size_t> hash_order(const std::vector<Candidate>& candidates, uint64_t key);
// The least-load score of one candidate (smaller is better).
double load_score(const Candidate& c, int64_t tokens_per_request);

}  // namespace pagoda::gateway
