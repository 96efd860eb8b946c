// Statistics over next-token distributions, for `pagoda perplexity`: the log-softmax of a logits
// row, the negative log-likelihood of the observed tokens (perplexity) and, against a base model's
// log-probabilities at the same positions, the KL divergence and top-1 agreement (llama.cpp's
// llama-perplexity --kl-divergence reports the same figures).
// Thread-safety: none; one accumulator per thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pagoda {

// out[v] = logits[v] - log_sum_exp(logits) (runtime/sampler.h). out.size() == logits.size().
void log_softmax(std::span<const float> logits, std::span<float> out);

// Mean and standard error of a sample of doubles (Welford).
class MeanAccumulator {
 public:
  void add(double x);
  int64_t count() const { return n_; }
  double mean() const { return mean_; }
  // Standard error of the mean; 0 below two samples.
  double stderr_of_mean() const;

 private:
  int64_t n_ = 0;
  double mean_ = 0, m2_ = 0;
};

struct PerplexityStats {
  MeanAccumulator nll;  // -log p(observed token), nats
  double perplexity() const;
  double perplexity_stderr() const;  // first-order: ppl * stderr(nll)
};

// One position against the base model's log-probabilities: KL(base || model) in nats, and whether
// both argmaxes agree. Both spans are log-probabilities over the same vocabulary.
struct KlStats {
  MeanAccumulator kl;
  int64_t top1_same = 0;
  std::vector<double> kl_values;  // every position's KL, for the percentiles
  void add(std::span<const float> base_logprobs, std::span<const float> logprobs);
  double top1_agreement() const { return kl.count() ? static_cast<double>(top1_same) / kl.count() : 0.0; }
  // The q-quantile (0..1) of the positions' KL; 0 when empty.
  double kl_quantile(double q) const;
};

}  // namespace pagoda
