#include "runtime/spec_verifier.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "common/check.h"
#include "runtime/model_runner.h"

namespace pagoda {

void target_probabilities(std::span<const float> logits, const SamplingParams& p, const TokenHistory& history,
                          std::span<const int32_t> blocked, std::vector<float>& probs) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  PAGODA_CHECK(vocab > 0 && !p.greedy(), "target_probabilities: {} logits, temperature {}", vocab, p.temperature);
  std::vector<float>& w = probs;
  w.assign(logits.begin(), logits.end());
  for (int32_t t : blocked)
    if (t >= 0 && t < vocab) w[t] = -std::numeric_limits<float>::infinity();
  apply_logit_bias(w, p.logit_bias);
  // Penalties, temperature and the candidate filters in the plain sampler's order and arithmetic.
  if (p.repetition_penalty != 1.0f) {
    std::vector<int32_t> ids(history.prompt.begin(), history.prompt.end());
    ids.insert(ids.end(), history.output.begin(), history.output.end());
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (int32_t t : ids) {
      if (t < 0 || t >= vocab) continue;
      float& v = w[t];
      v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int32_t> counts;
    for (int32_t t : history.output)
      if (t >= 0 && t < vocab) ++counts[t];
    for (const auto& [t, n] : counts) w[t] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(n);
  }
  const float inv_t = 1.0f / p.temperature;
  float mx = -std::numeric_limits<float>::infinity();
  for (float& v : w) {
    v *= inv_t;
    mx = std::max(mx, v);
  }
  for (float& v : w) v = std::exp(v - mx);
  std::vector<int32_t> idx(vocab);
  for (int32_t i = 0; i < vocab; ++i) idx[i] = i;
  size_t n = idx.size();
  if (p.min_p > 0.0f) {
    n = std::partition(idx.begin(), idx.end(), [&](int32_t i) { return w[i] >= p.min_p; }) - idx.begin();
  }
  auto by_prob = [&](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    std::nth_element(idx.begin(), idx.begin() + p.top_k, idx.begin() + n, by_prob);
    n = p.top_k;
  }
  if (p.top_p < 1.0f) {
    double kept = 0;
    for (size_t i = 0; i < n; ++i) kept += w[idx[i]];
    std::sort(idx.begin(), idx.begin() + n, by_prob);
    const double target = p.top_p * kept;
    double cum = 0;
    size_t cut = 0;
    for (; cut < n; ++cut) {
      cum += w[idx[cut]];
      if (cum >= target) break;
    }
    n = std::min(cut + 1, n);
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += w[idx[i]];
  std::vector<float> out(vocab, 0.0f);
  for (size_t i = 0; i < n; ++i) out[idx[i]] = static_cast<float>(w[idx[i]] / total);
  probs.swap(out);
}

std::vector<SampleResult> SpecVerifier::verify(const VerifyInput& in) {
  const int64_t V = in.vocab;
  const int32_t m = static_cast<int32_t>(in.drafts.size());
  PAGODA_CHECK(V > 0 && static_cast<int64_t>(in.logits.size()) == (m + 1) * V, "verify: {} logits for {} drafts of vocab {}",
               in.logits.size(), m, V);
  PAGODA_CHECK(in.draft_probs.empty() || static_cast<int64_t>(in.draft_probs.size()) == m * V,
               "verify: draft distributions must be [m, vocab]");
  const SamplingParams& params = *in.params;
  history_.assign(in.output.begin(), in.output.end());
  std::vector<SampleResult> kept;
  // Structured output: the constraint follows the accepted drafts (undone on every return).
  TokenConstraint* const constraint = in.constraint;
  int32_t advanced = 0;
  struct Restore {
    TokenConstraint* c;
    const int32_t& n;
    ~Restore() {
      if (c) c->rollback(n);
    }
  } restore{constraint, advanced};
  // Follows an accepted draft d. False when the constraint cannot take it (only a row whose allowed
  // tokens all had -inf logits picks a masked id): d then ends the step as the target's token, as
  // plain decoding would have emitted it.
  auto accept_draft = [&](int32_t d) {
    if (constraint) {
      if (!constraint->advance(d)) return false;
      ++advanced;
    }
    history_.push_back(d);
    return true;
  };
  for (int32_t j = 0; j <= m; ++j) {
    std::span<const float> row = in.logits.subspan(static_cast<size_t>(j * V), static_cast<size_t>(V));
    const int64_t n_out = static_cast<int64_t>(history_.size());
    const bool block = n_out < in.min_tokens && !in.blocked_ids.empty();
    if (block || constraint) {
      row_.assign(row.begin(), row.end());
      if (block)
        for (int32_t t : in.blocked_ids)
          if (t >= 0 && t < V) row_[t] = -std::numeric_limits<float>::infinity();
      if (constraint) {
        // The mask of this row's state, padded with zero words up to the model's vocabulary.
        const size_t words = (static_cast<size_t>(V) + 31) / 32;
        const size_t cwords = (static_cast<size_t>(constraint->vocab_size()) + 31) / 32;
        mask_.assign(std::max(words, cwords), 0u);
        constraint->fill_mask(std::span<uint32_t>(mask_.data(), cwords));
        apply_token_mask(row_, std::span<const uint32_t>(mask_.data(), words));
      }
      row = row_;
    }
    const TokenHistory hist{in.prompt, history_};
    Rng rng = token_rng(in.seed, n_out);
    if (params.greedy() || j == m) {
      // The plain sampler's choice: the target's own token (and the bonus after m acceptances).
      SampleResult r = sampler_.sample(row, params, hist, rng);
      const bool accepted = j < m && r.token == in.drafts[j];
      kept.push_back(std::move(r));
      if (!accepted || !accept_draft(kept.back().token)) return kept;
      continue;
    }
    target_probabilities(row, params, hist, {}, p_);
    const int32_t d = in.drafts[j];
    PAGODA_CHECK(d >= 0 && d < V, "draft token {} outside the vocabulary", d);
    const double q_d = in.draft_probs.empty() ? 1.0 : in.draft_probs[static_cast<size_t>(j * V + d)];
    const double u = rng.uniform();
    SampleResult r;
    if (q_d > 0 && u < std::min(1.0, p_[d] / q_d)) {
      r.token = d;
      fill_logprobs(row, params.logprobs, r, scratch_);
      kept.push_back(std::move(r));
      if (!accept_draft(d)) return kept;
      continue;
    }
    // Rejected: draw from the residual max(0, p - q), renormalised.
    double total = 0;
    for (int64_t i = 0; i < V; ++i) {
      const double q = in.draft_probs.empty() ? (i == d ? 1.0 : 0.0) : in.draft_probs[static_cast<size_t>(j * V + i)];
      p_[i] = static_cast<float>(std::max(0.0, static_cast<double>(p_[i]) - q));
      total += p_[i];
    }
    if (!(total > 0)) {  // p == q: nothing left to correct; draw from p itself
      target_probabilities(row, params, hist, {}, p_);
      total = 0;
      for (float v : p_) total += v;
    }
    double x = rng.uniform() * total;
    r.token = -1;
    for (int64_t i = 0; i < V; ++i) {
      if (p_[i] <= 0) continue;
      r.token = static_cast<int32_t>(i);
      x -= p_[i];
      if (x < 0) break;
    }
    PAGODA_CHECK(r.token >= 0, "verify: empty residual distribution");
    fill_logprobs(row, params.logprobs, r, scratch_);
    kept.push_back(std::move(r));
    return kept;
  }
  return kept;
}

}  // namespace pagoda
