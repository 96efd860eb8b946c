#include "runtime/logprob_stats.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "runtime/sampler.h"

namespace pagoda {

void log_softmax(std::span<const float> logits, std::span<float> out) {
  PAGODA_CHECK(logits.size() == out.size() && !logits.empty(), "log_softmax: {} logits, {} outputs", logits.size(),
               out.size());
  const float lse = log_sum_exp(logits);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - lse;
}

void MeanAccumulator::add(double x) {
  ++n_;
  const double d = x - mean_;
  mean_ += d / static_cast<double>(n_);
  m2_ += d * (x - mean_);
}

double MeanAccumulator::stderr_of_mean() const {
  if (n_ < 2) return 0.0;
  return std::sqrt(m2_ / static_cast<double>(n_ - 1) / static_cast<double>(n_));
}

double PerplexityStats::perplexity() const { return std::exp(nll.mean()); }
double PerplexityStats::perplexity_stderr() const { return perplexity() * nll.stderr_of_mean(); }

void KlStats::add(std::span<const float> base_logprobs, std::span<const float> logprobs) {
  PAGODA_CHECK(base_logprobs.size() == logprobs.size() && !logprobs.empty(), "KlStats: vocabularies differ ({} vs {})",
               base_logprobs.size(), logprobs.size());
  double kl = 0;
  for (size_t v = 0; v < logprobs.size(); ++v) {
    const double lb = base_logprobs[v];
    kl += std::exp(lb) * (lb - static_cast<double>(logprobs[v]));
  }
  kl = std::max(kl, 0.0);  // rounding of the stored base log-probabilities can make it slightly negative
  this->kl.add(kl);
  kl_values.push_back(kl);
  const auto base_top = std::max_element(base_logprobs.begin(), base_logprobs.end()) - base_logprobs.begin();
  const auto top = std::max_element(logprobs.begin(), logprobs.end()) - logprobs.begin();
  top1_same += base_top == top;
}

double KlStats::kl_quantile(double q) const {
  if (kl_values.empty()) return 0.0;
  std::vector<double> v = kl_values;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace pagoda
