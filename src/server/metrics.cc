#include "server/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace pagoda::server {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  // Bucket i counts observations <= bounds_[i] (le semantics); NaN goes to +Inf only.
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t acc = 0;
  for (uint64_t c : counts_) {
    acc += c;
    s.cumulative.push_back(acc);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

template <class T>
T& Family<T>::labels(const std::vector<std::string>& values) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(values);
  if (it != children_.end()) return *it->second;
  std::unique_ptr<T> child;
  if constexpr (std::is_same_v<T, Histogram>) child = std::make_unique<Histogram>(bounds_);
  else child = std::make_unique<T>();
  T& ref = *child;
  children_.emplace(values, std::move(child));
  return ref;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

Family<Counter>& MetricsRegistry::counter(std::string name, std::string help, std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry e{MetricType::kCounter, std::make_unique<Family<Counter>>(std::move(name), std::move(help), std::move(label_names)),
          nullptr, nullptr};
  entries_.push_back(std::move(e));
  return *entries_.back().counter;
}

Family<Gauge>& MetricsRegistry::gauge(std::string name, std::string help, std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry e{MetricType::kGauge, nullptr,
          std::make_unique<Family<Gauge>>(std::move(name), std::move(help), std::move(label_names)), nullptr};
  entries_.push_back(std::move(e));
  return *entries_.back().gauge;
}

Family<Histogram>& MetricsRegistry::histogram(std::string name, std::string help, std::vector<std::string> label_names,
                                              std::vector<double> bounds) {
  std::sort(bounds.begin(), bounds.end());
  std::lock_guard<std::mutex> lock(mu_);
  Entry e{MetricType::kHistogram, nullptr, nullptr,
          std::make_unique<Family<Histogram>>(std::move(name), std::move(help), std::move(label_names), std::move(bounds))};
  entries_.push_back(std::move(e));
  return *entries_.back().histogram;
}

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string escape_help(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
  else {
    // Shortest of %.15g .. %.17g that reads back exactly (0.005, not 0.0050000000000000001).
    for (int prec = 15; prec <= 17; ++prec) {
      std::snprintf(buf, sizeof buf, "%.*g", prec, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
  }
  return buf;
}

namespace {

std::string label_set(const std::vector<std::string>& names, const std::vector<std::string>& values,
                      const char* extra_name = nullptr, const std::string& extra_value = {}) {
  if (names.empty() && !extra_name) return {};
  std::string s = "{";
  bool first = true;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (!first) s += ',';
    s += names[i] + "=\"" + escape_label_value(values[i]) + "\"";
    first = false;
  }
  if (extra_name) {
    if (!first) s += ',';
    s += std::string(extra_name) + "=\"" + escape_label_value(extra_value) + "\"";
  }
  s += '}';
  return s;
}

template <class F>
void header(std::string& out, const F& fam, const char* type) {
  out += "# HELP " + fam.name() + " " + escape_help(fam.help()) + "\n";
  out += "# TYPE " + fam.name() + " " + type + "\n";
}

}  // namespace

std::string MetricsRegistry::render() const {
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : entries_) {
    if (e.type == MetricType::kCounter) {
      header(out, *e.counter, "counter");
      e.counter->for_each([&](const std::vector<std::string>& values, const Counter& c) {
        out += e.counter->name() + label_set(e.counter->label_names(), values) + " " + format_metric_value(c.value()) + "\n";
      });
    } else if (e.type == MetricType::kGauge) {
      header(out, *e.gauge, "gauge");
      e.gauge->for_each([&](const std::vector<std::string>& values, const Gauge& g) {
        out += e.gauge->name() + label_set(e.gauge->label_names(), values) + " " + format_metric_value(g.value()) + "\n";
      });
    } else {
      const auto& fam = *e.histogram;
      header(out, fam, "histogram");
      fam.for_each([&](const std::vector<std::string>& values, const Histogram& h) {
        const Histogram::Snapshot s = h.snapshot();
        for (size_t i = 0; i <= s.bounds.size(); ++i) {
          const std::string le = i < s.bounds.size() ? format_metric_value(s.bounds[i]) : "+Inf";
          out += fam.name() + "_bucket" + label_set(fam.label_names(), values, "le", le) + " " +
                 format_metric_value(static_cast<double>(s.cumulative[i])) + "\n";
        }
        const std::string ls = label_set(fam.label_names(), values);
        out += fam.name() + "_sum" + ls + " " + format_metric_value(s.sum) + "\n";
        out += fam.name() + "_count" + ls + " " + format_metric_value(static_cast<double>(s.count)) + "\n";
      });
    }
  }
  return out;
}

}  // namespace pagoda::server
