// A small Prometheus metrics registry: counters, gauges and histograms with labels, rendered in
// the text exposition format 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// Ownership: the registry owns every family and child; the references it hands out stay valid for
// its lifetime. Thread-safety: every method may be called from any thread; counter and gauge
// updates are lock-free, a histogram observation takes that histogram's own lock, creating a
// child and rendering take the family's lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::server {

class Counter {
 public:
  void inc(double v = 1) { value_.fetch_add(v, std::memory_order_relaxed); }
  // For counters mirrored from a source that keeps its own monotonic total.
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void inc(double v = 1) { value_.fetch_add(v, std::memory_order_relaxed); }
  void dec(double v = 1) { value_.fetch_sub(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // upper bounds, ascending; +Inf is implicit
  void observe(double v);
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

enum class MetricType { kCounter, kGauge, kHistogram };

// A metric name with its label names; children are keyed by label values.
template <class T>
class Family {
 public:
  Family(std::string name, std::string help, std::vector<std::string> label_names, std::vector<double> bounds = {})
      : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)), bounds_(std::move(bounds)) {}
  // The child for these label values (as many as label names), created on first use.
  T& labels(const std::vector<std::string>& values);
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Children in label order (for rendering), under the family lock.
  template <class F>
  void for_each(F&& f) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [values, child] : children_) f(values, *child);
  }

 private:
  std::string name_, help_;
  std::vector<std::string> label_names_;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_;
};

class MetricsRegistry {
 public:
  Family<Counter>& counter(std::string name, std::string help, std::vector<std::string> label_names = {});
  Family<Gauge>& gauge(std::string name, std::string help, std::vector<std::string> label_names = {});
  Family<Histogram>& histogram(std::string name, std::string help, std::vector<std::string> label_names,
                               std::vector<double> bounds);
  // The whole registry in text format 0.0.4, families in registration order.
  std::string render() const;

 private:
  mutable std::mutex mu_;
  struct Entry {
    MetricType type;
    std::unique_ptr<Family<Counter>> counter;
    std::unique_ptr<Family<Gauge>> gauge;
    std::unique_ptr<Family<Histogram>> histogram;
  };
  std::vector<Entry> entries_;
};

// Text-format helpers (exposed for tests).
std::string escape_label_value(std::string_view v);  // \ -> \\, " -> \", newline -> \n
std::string escape_help(std::string_view v);         // \ -> \\, newline -> \n
std::string format_metric_value(double v);           // integers exactly, +Inf, -Inf, NaN
inline constexpr std::string_view kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace pagoda::server
