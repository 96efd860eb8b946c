// The live set of workers: addresses, the models each serves, health, passive ejection and the
// gateway's own load on each. Thread-safe (one mutex for the set and each worker's state; the
// in-flight counters are atomics).
//
// A worker is available for new requests when an active health check passed (GET /load, or
// /health where the worker has no /load) and unhealthy_after_checks consecutive ones have not
// failed since (a busy worker may miss one), it is not draining (its /health says 503: out at
// once) and it is not ejected. Passive ejection: eject_after_failures consecutive failed attempts (connect error,
// timeout, 5xx, stream cut) eject it for eject_s * 2^(ejections so far, at most 3); it is
// re-admitted when that time has passed and a health check has passed since. A success resets
// the failure and ejection counts.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gateway/config.h"

namespace pagoda::gateway {

struct Worker {
  WorkerSpec spec;
  std::string address;  // numeric address connected to
  std::string label;    // address:port (metrics, headers, hashing)
  std::atomic<int64_t> inflight{0};
  std::atomic<int64_t> outstanding_tokens{0};
  std::atomic<bool> has_load_endpoint{true};  // false once its /load answered 404 (then /health)
  // Guarded by WorkerSet's mutex:
  std::vector<std::string> models;  // spec.models, or the one the worker's /load names
  bool healthy = false, draining = false, removed = false;
  double ejected_until = 0;
  int failures = 0, ejections = 0, check_failures = 0;
  int64_t reported_requests = 0;
  double kv_usage = 0;
  double last_check_ok = 0;  // when a health check last passed
};

struct WorkerLoad {  // one health check's result
  bool ok = false, draining = false;
  std::string model;      // "" when the worker did not say
  int64_t running = 0, waiting = 0;
  double kv_usage = 0;
};

class WorkerSet {
 public:
  WorkerSet(const GatewayConfig& config);
  // Workers for a static (non-DNS) spec are created at once; DNS specs by set_resolved().
  std::vector<std::shared_ptr<Worker>> all() const;
  // Available workers that serve `model` (all available ones when model is "").
  std::vector<std::shared_ptr<Worker>> available(const std::string& model, double now) const;
  // Every model some available worker serves, with how many serve it.
  std::vector<std::pair<std::string, int>> models(double now) const;
  bool is_available(const Worker& w, double now) const;
  int64_t num_available(double now) const;

  void health_result(Worker& w, const WorkerLoad& load, double now);
  // Returns true when this failure ejected the worker.
  bool record_failure(Worker& w, double now);
  void record_success(Worker& w);
  // The addresses a DNS spec resolves to now: new ones become workers, missing ones are removed
  // (no new requests; requests in flight finish).
  void set_resolved(const WorkerSpec& spec, const std::vector<std::string>& addresses);
  // Snapshot of one worker's guarded state (for routing).
  void read(const Worker& w, std::vector<std::string>* models, int64_t* reported, double* kv) const;

 private:
  std::shared_ptr<Worker> make_worker(const WorkerSpec& spec, const std::string& address) const;
  const GatewayConfig& config_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Worker>> workers_;
};

}  // namespace pagoda::gateway
