#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.h"

namespace pagoda {

Status SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || temperature > 100.0f) return invalid_argument("temperature must be in [0, 100], got {}", temperature);
  if (!(top_p > 0.0f && top_p <= 1.0f)) return invalid_argument("top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return invalid_argument("min_p must be in [0, 1], got {}", min_p);
  if (top_k < -1) return invalid_argument("top_k must be -1, 0 (off) or positive, got {}", top_k);
  if (!(repetition_penalty > 0.0f && repetition_penalty <= 100.0f))
    return invalid_argument("repetition_penalty must be in (0, 100], got {}", repetition_penalty);
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return invalid_argument("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return invalid_argument("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  if (logprobs < -1 || logprobs > 20) return invalid_argument("logprobs must be in [0, 20], got {}", logprobs);
  if (prompt_logprobs < -1 || prompt_logprobs > 20)
    return invalid_argument("prompt_logprobs must be in [0, 20], got {}", prompt_logprobs);
  for (const auto& [token, bias] : logit_bias)
    if (token < 0 || !(bias >= -100.0f && bias <= 100.0f))
      return invalid_argument("logit_bias: token {} bias {} (ids >= 0, biases in [-100, 100])", token, bias);
  return {};
}

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

float log_sum_exp(std::span<const float> logits) {
  float mx = -std::numeric_limits<float>::infinity();
  for (float v : logits) mx = std::max(mx, v);
  if (!std::isfinite(mx)) return mx;
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v - mx));
  return mx + static_cast<float>(std::log(sum));
}

void apply_token_mask(std::span<float> logits, std::span<const uint32_t> allowed) {
  const size_t n = logits.size();
  PAGODA_CHECK(allowed.size() * 32 >= n, "token mask of {} words for {} logits", allowed.size(), n);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (size_t w = 0; w * 32 < n; ++w) {
    const uint32_t bits = allowed[w];
    if (bits == ~0u) continue;
    const size_t end = std::min(n, w * 32 + 32);
    for (size_t i = w * 32; i < end; ++i)
      if (!((bits >> (i - w * 32)) & 1)) logits[i] = kNegInf;
  }
}

SampleResult Sampler::sample(std::span<const float> logits, const SamplingParams& p, const TokenHistory& history, Rng& rng,
                             std::span<const uint32_t> allowed) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  PAGODA_CHECK(vocab > 0, "empty logits");
  SampleResult result;

  work_.assign(logits.begin(), logits.end());
  if (!allowed.empty()) apply_token_mask(work_, allowed);
  apply_logit_bias(work_, p.logit_bias);
  // Penalties.
  if (p.repetition_penalty != 1.0f) {
    auto penalize = [&](int32_t t) {
      if (t < 0 || t >= vocab) return;
      float& v = work_[t];  // each distinct token once (idx_ is deduplicated)
      v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    };
    idx_.clear();
    idx_.insert(idx_.end(), history.prompt.begin(), history.prompt.end());
    idx_.insert(idx_.end(), history.output.begin(), history.output.end());
    std::sort(idx_.begin(), idx_.end());
    idx_.erase(std::unique(idx_.begin(), idx_.end()), idx_.end());
    for (int32_t t : idx_) penalize(t);
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    counts_.clear();
    for (int32_t t : history.output)
      if (t >= 0 && t < vocab) ++counts_[t];
    for (const auto& [t, n] : counts_) work_[t] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(n);
  }

  if (p.greedy()) {
    result.token = static_cast<int32_t>(std::max_element(work_.begin(), work_.end()) - work_.begin());
  } else {
    const float inv_t = 1.0f / p.temperature;
    float mx = -std::numeric_limits<float>::infinity();
    for (float& v : work_) {
      v *= inv_t;
      mx = std::max(mx, v);
    }
    // Probabilities (unnormalised) in work_.
    for (float& v : work_) v = std::exp(v - mx);
    // Candidate set: indices with probability mass, narrowed by min-p, top-k, top-p.
    idx_.resize(vocab);
    for (int32_t i = 0; i < vocab; ++i) idx_[i] = i;
    size_t n = idx_.size();
    if (p.min_p > 0.0f) {
      const float threshold = p.min_p;  // max prob is exp(0) = 1 before normalisation
      n = std::partition(idx_.begin(), idx_.end(), [&](int32_t i) { return work_[i] >= threshold; }) - idx_.begin();
    }
    auto by_prob = [&](int32_t a, int32_t b) { return work_[a] > work_[b] || (work_[a] == work_[b] && a < b); };
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
      std::nth_element(idx_.begin(), idx_.begin() + p.top_k, idx_.begin() + n, by_prob);
      n = p.top_k;
    }
    double kept = 0;
    for (size_t i = 0; i < n; ++i) kept += work_[idx_[i]];
    if (p.top_p < 1.0f) {
      // Smallest prefix (by descending probability) whose mass reaches top_p of the kept mass.
      const double target = p.top_p * kept;
      size_t k = std::min<size_t>(n, 64);
      for (;;) {
        std::nth_element(idx_.begin(), idx_.begin() + (k - 1), idx_.begin() + n, by_prob);
        std::sort(idx_.begin(), idx_.begin() + k, by_prob);
        double cum = 0;
        size_t cut = 0;
        for (; cut < k; ++cut) {
          cum += work_[idx_[cut]];
          if (cum >= target) break;
        }
        if (cut < k || k == n) {
          n = std::min(cut + 1, n);
          break;
        }
        k = std::min(n, k * 4);
      }
      kept = 0;
      for (size_t i = 0; i < n; ++i) kept += work_[idx_[i]];
    }
    // The walk order is whatever the (deterministic) selection left: same inputs, same order.
    double u = rng.uniform() * kept;
    // Fallback for rounding (u never crossing zero): the last candidate with probability mass, so
    // a masked (zero-probability) token is never returned.
    result.token = idx_[n - 1];
    for (size_t i = n; i-- > 0;)
      if (work_[idx_[i]] > 0) {
        result.token = idx_[i];
        break;
      }
    for (size_t i = 0; i < n; ++i) {
      u -= work_[idx_[i]];
      if (u < 0) {
        result.token = idx_[i];
        break;
      }
    }
  }

  if (p.logprobs >= 0) {
    std::span<const float> row = logits;
    if (!allowed.empty()) {
      // Of the distribution the token was drawn from: the constraint's disallowed tokens removed.
      work_.assign(logits.begin(), logits.end());
      apply_token_mask(work_, allowed);
      row = work_;
    }
    fill_logprobs(row, p.logprobs, result, idx_);
  }
  return result;
}

void fill_logprobs(std::span<const float> row, int32_t n, SampleResult& r, std::vector<int32_t>& scratch) {
  if (n < 0) return;
  const int32_t vocab = static_cast<int32_t>(row.size());
  const float lse = log_sum_exp(row);
  r.logprob = row[r.token] - lse;
  r.top.clear();
  if (n == 0) return;
  scratch.resize(vocab);
  for (int32_t i = 0; i < vocab; ++i) scratch[i] = i;
  // Masked tokens (-inf) are never listed: at most the number of tokens that can be emitted.
  size_t finite = 0;
  for (float v : row) finite += v > -std::numeric_limits<float>::infinity() ? 1 : 0;
  const size_t k = std::min<size_t>({static_cast<size_t>(n), static_cast<size_t>(vocab), finite});
  auto by_logit = [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
  std::partial_sort(scratch.begin(), scratch.begin() + k, scratch.end(), by_logit);
  for (size_t i = 0; i < k; ++i) r.top.push_back({scratch[i], row[scratch[i]] - lse});
}

int32_t token_rank(std::span<const float> row, int32_t token) {
  const float v = row[static_cast<size_t>(token)];
  int32_t above = 0;
  for (float x : row) above += x > v ? 1 : 0;
  return above + 1;
}

void apply_logit_bias(std::span<float> logits, std::span<const std::pair<int32_t, float>> bias) {
  const int64_t n = static_cast<int64_t>(logits.size());
  for (const auto& [token, b] : bias)
    if (token >= 0 && token < n) logits[token] += b;
}

}  // namespace pagoda
