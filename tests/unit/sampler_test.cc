// Sampler: greedy, determinism per seed, top-k / top-p / min-p supports, penalties, logprobs,
// and the empirical distribution against the exact one.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "runtime/sampler.h"

namespace pagoda {
namespace {

std::vector<float> ramp(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = 0.01f * static_cast<float>((i * 37) % n);
  return v;
}

TEST(Sampler, GreedyPicksArgmax) {
  Sampler s;
  Rng rng(1);
  std::vector<float> logits = {0.1f, 3.0f, -1.0f, 2.9f};
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(s.sample(logits, p, {}, rng).token, 1);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDiffers) {
  Sampler s;
  auto logits = ramp(1000);
  SamplingParams p;
  p.temperature = 1.5f;
  std::vector<int32_t> a, b, c;
  Rng r1(42), r2(42), r3(43);
  for (int i = 0; i < 64; ++i) {
    a.push_back(s.sample(logits, p, {}, r1).token);
    b.push_back(s.sample(logits, p, {}, r2).token);
    c.push_back(s.sample(logits, p, {}, r3).token);
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Sampler, TopKRestrictsToKBest) {
  Sampler s;
  Rng rng(7);
  auto logits = ramp(500);
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 3;
  std::vector<std::pair<float, int>> sorted;
  for (int i = 0; i < 500; ++i) sorted.push_back({logits[i], i});
  std::sort(sorted.rbegin(), sorted.rend());
  std::set<int> allowed = {sorted[0].second, sorted[1].second, sorted[2].second};
  std::set<int> seen;
  for (int i = 0; i < 300; ++i) seen.insert(s.sample(logits, p, {}, rng).token);
  EXPECT_EQ(seen, allowed);
}

TEST(Sampler, TopPKeepsSmallestNucleus) {
  Sampler s;
  Rng rng(9);
  // probs 0.5, 0.25, 0.125, 0.0625, ...: top_p 0.7 keeps the first two (0.75 >= 0.7).
  std::vector<float> logits;
  for (int i = 0; i < 200; ++i) logits.push_back(-static_cast<float>(i) * std::log(2.0f));
  SamplingParams p;
  p.top_p = 0.7f;
  std::map<int, int> counts;
  for (int i = 0; i < 3000; ++i) ++counts[s.sample(logits, p, {}, rng).token];
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_NEAR(counts[0] / 3000.0, 2.0 / 3.0, 0.04);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  Sampler s;
  Rng rng(11);
  std::vector<float> logits = {0.0f, std::log(0.5f), std::log(0.09f), std::log(0.2f)};
  SamplingParams p;
  p.min_p = 0.1f;  // keeps prob >= 0.1 * max
  std::set<int> seen;
  for (int i = 0; i < 2000; ++i) seen.insert(s.sample(logits, p, {}, rng).token);
  EXPECT_EQ(seen, (std::set<int>{0, 1, 3}));
}

TEST(Sampler, EmpiricalDistributionMatchesSoftmax) {
  Sampler s;
  Rng rng(5);
  std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f};
  SamplingParams p;
  p.temperature = 0.8f;
  double z = 0;
  std::vector<double> prob(4);
  for (int i = 0; i < 4; ++i) z += prob[i] = std::exp(logits[i] / 0.8);
  std::vector<int> counts(4);
  const int N = 40000;
  for (int i = 0; i < N; ++i) ++counts[s.sample(logits, p, {}, rng).token];
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(counts[i] / double(N), prob[i] / z, 0.01) << i;
}

TEST(Sampler, PenaltiesChangeTheArgmax) {
  Sampler s;
  Rng rng(1);
  std::vector<float> logits = {2.0f, 1.9f, -0.5f};
  SamplingParams p;
  p.temperature = 0;
  std::vector<int32_t> out = {0, 0};
  p.frequency_penalty = 0.1f;  // 2.0 - 0.2 = 1.8 < 1.9
  EXPECT_EQ(s.sample(logits, p, {{}, out}, rng).token, 1);
  p.frequency_penalty = 0;
  p.presence_penalty = 0.05f;  // 1.95 > 1.9: still 0
  EXPECT_EQ(s.sample(logits, p, {{}, out}, rng).token, 0);
  p.presence_penalty = 0;
  p.repetition_penalty = 1.1f;  // 2.0/1.1 = 1.82 < 1.9
  std::vector<int32_t> prompt = {0};
  EXPECT_EQ(s.sample(logits, p, {prompt, {}}, rng).token, 1);
  // Negative logits are multiplied: token 2 in history gets less likely, not more.
  std::vector<float> neg = {-1.0f, -1.05f};
  std::vector<int32_t> hist = {0};
  EXPECT_EQ(s.sample(neg, p, {hist, {}}, rng).token, 1);
}

TEST(Sampler, LogprobsAreLogSoftmaxBeforePenalties) {
  Sampler s;
  Rng rng(3);
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 2;
  p.repetition_penalty = 2.0f;  // does not change reported logprobs
  auto r = s.sample(logits, p, {}, rng);
  double z = 0;
  for (float v : logits) z += std::exp(v);
  EXPECT_EQ(r.token, 1);
  EXPECT_NEAR(r.logprob, 3.0 - std::log(z), 1e-5);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 2);
  EXPECT_NEAR(r.top[1].logprob, 2.0 - std::log(z), 1e-5);
}

TEST(SamplingParams, ValidationNamesTheParameter) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_NE(p.validate().message().find("top_p"), std::string::npos);
  p = {};
  p.temperature = -1;
  EXPECT_NE(p.validate().message().find("temperature"), std::string::npos);
  p = {};
  EXPECT_TRUE(p.validate().ok());
}

TEST(Sampler, TokenMaskRestrictsEveryMode) {
  // 100 tokens, the mask allows 3, 40 and 97 (not the argmax 99).
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = 0.05f * static_cast<float>(i);
  std::vector<uint32_t> mask(4, 0);
  for (int t : {3, 40, 97}) mask[t >> 5] |= 1u << (t & 31);
  Sampler s;
  SamplingParams greedy;
  greedy.temperature = 0;
  Rng r0(1);
  EXPECT_EQ(s.sample(logits, greedy, {}, r0, mask).token, 97);
  EXPECT_EQ(s.sample(logits, greedy, {}, r0).token, 99);
  for (float top_p : {1.0f, 0.5f}) {
    SamplingParams p;
    p.temperature = 2.0f;
    p.top_p = top_p;
    p.top_k = top_p < 1 ? 50 : 0;
    std::set<int32_t> seen;
    for (uint64_t seed = 0; seed < 300; ++seed) {
      Rng rng(seed);
      SampleResult r = s.sample(logits, p, {}, rng, mask);
      ASSERT_TRUE(r.token == 3 || r.token == 40 || r.token == 97) << r.token;
      seen.insert(r.token);
    }
    EXPECT_EQ(seen.size(), top_p < 1 ? 1u : 3u);  // top_p 0.5 of the allowed mass: only 97
  }
  std::vector<float> v = logits;
  apply_token_mask(v, mask);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(std::isinf(v[i]), !(i == 3 || i == 40 || i == 97)) << i;
}

TEST(Sampler, LogprobsUnderAMaskAreOfTheAllowedTokens) {
  // Tokens 3, 40 and 97 allowed: the logprobs are normalised over them, the top list holds only
  // them (never more than can be emitted), and greedy / sampled agree on the reported value.
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = 0.05f * static_cast<float>(i);
  std::vector<uint32_t> mask(4, 0);
  for (int t : {3, 40, 97}) mask[t >> 5] |= 1u << (t & 31);
  double z = 0;
  for (int t : {3, 40, 97}) z += std::exp(static_cast<double>(logits[t]));
  Sampler s;
  for (float temperature : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.logprobs = 5;
    for (uint64_t seed = 0; seed < 20; ++seed) {
      Rng rng(seed);
      SampleResult r = s.sample(logits, p, {}, rng, mask);
      EXPECT_NEAR(r.logprob, logits[r.token] - std::log(z), 1e-5);
      ASSERT_EQ(r.top.size(), 3u);
      EXPECT_EQ(r.top[0].token, 97);
      EXPECT_EQ(r.top[1].token, 40);
      EXPECT_EQ(r.top[2].token, 3);
      double mass = 0;
      for (const auto& t : r.top) mass += std::exp(static_cast<double>(t.logprob));
      EXPECT_NEAR(mass, 1.0, 1e-5);
    }
  }
}

TEST(Sampler, LogitBiasMovesTheChoiceNotTheLogprobs) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  double z = 0;
  for (float v : logits) z += std::exp(v);
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 1;
  p.logit_bias = {{3, 5.0f}, {1, -100.0f}, {99, 50.0f}};  // 99: outside the row, ignored
  Rng rng(1);
  SampleResult r = s.sample(logits, p, {}, rng);
  EXPECT_EQ(r.token, 3);
  EXPECT_NEAR(r.logprob, 0.0 - std::log(z), 1e-5);  // of the unbiased row
  ASSERT_EQ(r.top.size(), 1u);
  EXPECT_EQ(r.top[0].token, 1);
  // Sampling: -100 on every token but one leaves (almost) only that one.
  SamplingParams q;
  q.temperature = 1.0f;
  for (int t : {0, 1, 3}) q.logit_bias.push_back({t, -100.0f});
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Rng g(seed);
    EXPECT_EQ(s.sample(logits, q, {}, g).token, 2);
  }
  // The bias composes with a mask: a masked token stays masked whatever its bias.
  std::vector<uint32_t> mask = {0b0101u};  // tokens 0 and 2
  SamplingParams m;
  m.temperature = 0;
  m.logit_bias = {{0, 10.0f}, {1, 100.0f}};
  Rng g(2);
  EXPECT_EQ(s.sample(logits, m, {}, g, mask).token, 0);
  p.logit_bias = {{1, 101.0f}};
  EXPECT_FALSE(p.validate().ok());
}

}  // namespace
}  // namespace pagoda
