#include "gateway/worker_set.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/log.h"

namespace pagoda::gateway {

WorkerSet::WorkerSet(const GatewayConfig& config) : config_(config) {
  for (const auto& spec : config.workers)
    if (!spec.dns) workers_.push_back(make_worker(spec, spec.host));
}

std::shared_ptr<Worker> WorkerSet::make_worker(const WorkerSpec& spec, const std::string& address) const {
  auto w = std::make_shared<Worker>();
  w->spec = spec;
  w->address = address;
  w->label = (address.find(':') != std::string::npos ? "[" + address + "]" : address) + ":" + std::to_string(spec.port);
  w->models = spec.models;
  return w;
}

std::vector<std::shared_ptr<Worker>> WorkerSet::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  return workers_;
}

bool WorkerSet::is_available(const Worker& w, double now) const {
  return w.healthy && !w.draining && !w.removed && now >= w.ejected_until && w.last_check_ok >= w.ejected_until;
}

std::vector<std::shared_ptr<Worker>> WorkerSet::available(const std::string& model, double now) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Worker>> out;
  for (const auto& w : workers_) {
    if (!is_available(*w, now)) continue;
    if (!model.empty() && std::find(w->models.begin(), w->models.end(), model) == w->models.end()) continue;
    out.push_back(w);
  }
  return out;
}

std::vector<std::pair<std::string, int>> WorkerSet::models(double now) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, int> count;
  for (const auto& w : workers_)
    if (is_available(*w, now))
      for (const auto& m : w->models) ++count[m];
  return {count.begin(), count.end()};
}

int64_t WorkerSet::num_available(double now) const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& w : workers_) n += is_available(*w, now);
  return n;
}

void WorkerSet::health_result(Worker& w, const WorkerLoad& load, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool was = is_available(w, now);
  w.draining = load.draining;
  if (load.ok) {
    w.healthy = true;
    w.check_failures = 0;
  } else if (load.draining || ++w.check_failures >= config_.unhealthy_after_checks) {
    w.healthy = false;
  }
  if (load.ok) {
    w.last_check_ok = now;
    w.reported_requests = load.running + load.waiting;
    w.kv_usage = load.kv_usage;
    if (w.spec.models.empty() && !load.model.empty()) w.models = {load.model};
  }
  const bool is = is_available(w, now);
  if (was != is)
    log_info("gateway", "worker {} is {}{}", w.label, is ? "up" : "down",
             load.draining ? " (draining)" : load.ok ? "" : " (health checks failed)");
}

bool WorkerSet::record_failure(Worker& w, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (++w.failures < config_.eject_after_failures || now < w.ejected_until) return false;
  const double t = config_.eject_s * std::pow(2.0, std::min(w.ejections, 3));
  w.ejected_until = now + t;
  ++w.ejections;
  w.failures = 0;
  log_warn("gateway", "worker {} ejected for {:.1f} s", w.label, t);
  return true;
}

void WorkerSet::record_success(Worker& w) {
  std::lock_guard<std::mutex> lock(mu_);
  w.failures = 0;
  w.ejections = 0;
}

void WorkerSet::set_resolved(const WorkerSpec& spec, const std::vector<std::string>& addresses) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& w : workers_) {
    if (!w->spec.dns || w->spec.host != spec.host || w->spec.port != spec.port) continue;
    const bool present = std::find(addresses.begin(), addresses.end(), w->address) != addresses.end();
    if (!present && !w->removed) log_info("gateway", "worker {} left {}", w->label, spec.label());
    w->removed = !present;
  }
  for (const auto& a : addresses) {
    bool known = false;
    for (const auto& w : workers_)
      known |= w->spec.dns && w->spec.host == spec.host && w->spec.port == spec.port && w->address == a;
    if (!known) {
      workers_.push_back(make_worker(spec, a));
      log_info("gateway", "worker {} joined from {}", workers_.back()->label, spec.label());
    }
  }
  // Drop removed workers nobody uses any more.
  workers_.erase(std::remove_if(workers_.begin(), workers_.end(),
                                [](const std::shared_ptr<Worker>& w) { return w->removed && w->inflight.load() == 0; }),
                 workers_.end());
}

void WorkerSet::read(const Worker& w, std::vector<std::string>* models, int64_t* reported, double* kv) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (models) *models = w.models;
  if (reported) *reported = w.reported_requests;
  if (kv) *kv = w.kv_usage;
}

}  // namespace pagoda::gateway
