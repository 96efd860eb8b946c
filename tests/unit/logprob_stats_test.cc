// runtime/logprob_stats.h against closed forms: log-softmax of rows with large offsets, the mean
// and its standard error, perplexity, KL divergence of known distributions, quantiles.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/logprob_stats.h"

namespace pagoda {
namespace {

TEST(LogprobStats, LogSoftmaxIsShiftInvariantAndNormalised) {
  const std::vector<float> a = {1.0f, 2.0f, 3.0f, -4.0f};
  std::vector<float> shifted;
  for (float x : a) shifted.push_back(x + 1000.0f);  // a naive exp would overflow
  std::vector<float> la(a.size()), lb(a.size());
  log_softmax(a, la);
  log_softmax(shifted, lb);
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(la[i], lb[i], 1e-4);
    sum += std::exp(static_cast<double>(la[i]));
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + std::exp(-4.0));
  EXPECT_NEAR(la[2], 3.0 - lse, 1e-6);
}

TEST(LogprobStats, MeanStderrAndPerplexity) {
  PerplexityStats s;
  for (double x : {1.0, 2.0, 3.0, 4.0}) s.nll.add(x);
  EXPECT_DOUBLE_EQ(s.nll.mean(), 2.5);
  // sample variance 5/3, stderr sqrt(5/3 / 4)
  EXPECT_NEAR(s.nll.stderr_of_mean(), std::sqrt(5.0 / 12.0), 1e-12);
  EXPECT_NEAR(s.perplexity(), std::exp(2.5), 1e-9);
  EXPECT_NEAR(s.perplexity_stderr(), std::exp(2.5) * std::sqrt(5.0 / 12.0), 1e-9);
  MeanAccumulator one;
  one.add(7.0);
  EXPECT_EQ(one.stderr_of_mean(), 0.0);
}

TEST(LogprobStats, KlOfKnownDistributionsAndTopOne) {
  auto logs = [](std::vector<double> p) {
    std::vector<float> out;
    for (double x : p) out.push_back(static_cast<float>(std::log(x)));
    return out;
  };
  KlStats k;
  const auto p = logs({0.5, 0.25, 0.25}), q = logs({0.25, 0.5, 0.25});
  k.add(p, p);
  k.add(p, q);  // 0.5 ln 2 + 0.25 ln 0.5 = 0.25 ln 2; argmax 0 vs 1
  EXPECT_NEAR(k.kl_values[0], 0.0, 1e-7);
  EXPECT_NEAR(k.kl_values[1], 0.25 * std::log(2.0), 1e-6);
  EXPECT_NEAR(k.kl.mean(), 0.125 * std::log(2.0), 1e-6);
  EXPECT_DOUBLE_EQ(k.top1_agreement(), 0.5);
  EXPECT_NEAR(k.kl_quantile(1.0), 0.25 * std::log(2.0), 1e-6);
  EXPECT_NEAR(k.kl_quantile(0.0), 0.0, 1e-7);
}

}  // namespace
}  // namespace pagoda
