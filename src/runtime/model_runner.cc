#include "runtime/model_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace pagoda {

Rng token_rng(uint64_t seed, int64_t index) {
  return Rng(seed ^ (0xd1b54a32d192ed03ull * static_cast<uint64_t>(index + 1)));
}

ModelRunner::ModelRunner(ModelExecutor& executor, int64_t block_size, ThreadPool& pool)
    : executor_(executor), block_size_(block_size), pool_(pool), samplers_(pool.size()) {}

std::span<const uint32_t> ModelRunner::constraint_mask(ReqState& s, int64_t vocab) {
  // The model's vocabulary may be padded past the tokenizer's: ids the constraint does not know
  // stay disallowed.
  const size_t words = (static_cast<size_t>(vocab) + 31) / 32;
  const size_t cwords = (static_cast<size_t>(s.constraint->vocab_size()) + 31) / 32;
  s.mask.assign(std::max(words, cwords), 0u);
  s.constraint->fill_mask(std::span<uint32_t>(s.mask.data(), cwords));
  return std::span<const uint32_t>(s.mask.data(), words);
}

RunnerOutput ModelRunner::execute(const SchedulerOutput& out) {
  for (const auto& id : out.finished) reqs_.erase(id);
  for (const auto& id : out.preempted) reqs_.erase(id);
  if (!out.swap_out.empty()) executor_.swap_out(out.swap_out);
  if (!out.swap_in.empty()) executor_.swap_in(out.swap_in);
  for (const auto& n : out.new_requests) {
    ReqState s;
    s.tokens = n.tokens;
    s.num_prompt = n.num_prompt_tokens;
    s.sampling = n.sampling;
    s.seed = n.seed;
    s.block_table = n.block_ids;
    s.num_computed = n.num_computed_tokens;
    s.min_tokens = n.min_tokens;
    s.min_tokens_blocked_ids = n.min_tokens_blocked_ids;
    if (n.sampling.constraint) {
      // A resumed request replays the output it already has.
      s.constraint = n.sampling.constraint->start();
      for (size_t i = static_cast<size_t>(s.num_prompt); i < s.tokens.size(); ++i) s.constraint->advance(s.tokens[i]);
    }
    reqs_[n.id] = std::move(s);
  }
  for (const auto& c : out.cached_requests) {
    auto it = reqs_.find(c.id);
    PAGODA_CHECK(it != reqs_.end(), "cached request {} unknown to the runner", c.id);
    if (c.replace_block_table) it->second.block_table = c.new_block_ids;
    else it->second.block_table.insert(it->second.block_table.end(), c.new_block_ids.begin(), c.new_block_ids.end());
    it->second.num_computed = c.num_computed_tokens;
  }

  RunnerOutput result;
  if (out.num_scheduled_tokens.empty()) return result;
  batch_.clear();
  std::vector<ReqState*> to_sample;
  std::vector<const std::string*> sample_ids;
  std::vector<int64_t> rows;  // logits row of each sampled request
  const int64_t bs = block_size_;
  std::vector<int32_t> ids;
  for (const auto& st : out.num_scheduled_tokens) {
    ReqState& s = reqs_.at(st.id);
    const int32_t begin = s.num_computed, end = s.num_computed + st.num_tokens;
    PAGODA_CHECK(end <= static_cast<int32_t>(s.tokens.size()), "request {}: scheduled up to token {} of {}", st.id, end, s.tokens.size());
    ids.assign(s.tokens.begin() + begin, s.tokens.begin() + end);
    const bool sample = end == static_cast<int32_t>(s.tokens.size());
    batch_.add_sequence(ids, end, s.block_table, bs, sample);
    s.num_computed = end;
    if (sample) {
      to_sample.push_back(&s);
      sample_ids.push_back(&st.id);
      rows.push_back(static_cast<int64_t>(batch_.logits_rows.size()) - 1);
    }
  }
  result.num_tokens = static_cast<int32_t>(batch_.num_tokens());
  result.samples.resize(to_sample.size());
  const int64_t n_samples = static_cast<int64_t>(to_sample.size());
  if (executor_.samples_on_device()) {
    // The forward pass and the sampling both on the device; only ids and logprobs come back.
    std::vector<SampleSpec> specs(to_sample.size());
    for (int64_t i = 0; i < n_samples; ++i) {
      ReqState& s = *to_sample[i];
      const int32_t n_out = static_cast<int32_t>(s.tokens.size()) - s.num_prompt;
      SampleSpec& sp = specs[i];
      sp.logits_row = rows[i];
      sp.params = &s.sampling;
      sp.uniform = s.sampling.greedy() ? 0.0 : token_rng(s.seed, n_out).uniform();
      sp.history = {std::span<const int32_t>(s.tokens.data(), s.num_prompt),
                    std::span<const int32_t>(s.tokens.data() + s.num_prompt, n_out)};
      if (n_out < s.min_tokens) sp.blocked_ids = s.min_tokens_blocked_ids;
      if (s.constraint) sp.allowed_mask = constraint_mask(s, s.constraint->vocab_size());  // ids past it: disallowed on the device
    }
    std::vector<SampleResult> sampled;
    executor_.forward_sample(batch_, specs, sampled);
    for (int64_t i = 0; i < n_samples; ++i) result.samples[i] = {*sample_ids[i], std::move(sampled[i])};
    for (size_t i = 0; i < to_sample.size(); ++i) {
      to_sample[i]->tokens.push_back(result.samples[i].result.token);
      if (to_sample[i]->constraint) to_sample[i]->constraint->advance(result.samples[i].result.token);
    }
    return result;
  }
  const Tensor& logits = executor_.forward(batch_);

  const int64_t vocab = logits.dim(1);
  pool_.run([&](int ith, int nth) {
    std::vector<float> masked;
    Sampler& sampler = samplers_[ith];  // per-thread scratch
    for (int64_t i = n_samples * ith / nth; i < n_samples * (ith + 1) / nth; ++i) {
      ReqState& s = *to_sample[i];
      const int32_t n_out = static_cast<int32_t>(s.tokens.size()) - s.num_prompt;
      std::span<const float> row(logits.data_as<float>() + rows[i] * vocab, static_cast<size_t>(vocab));
      if (n_out < s.min_tokens && !s.min_tokens_blocked_ids.empty()) {
        masked.assign(row.begin(), row.end());
        for (int32_t t : s.min_tokens_blocked_ids)
          if (t >= 0 && t < vocab) masked[t] = -std::numeric_limits<float>::infinity();
        row = masked;
      }
      Rng rng = token_rng(s.seed, n_out);
      TokenHistory hist{std::span<const int32_t>(s.tokens.data(), s.num_prompt),
                        std::span<const int32_t>(s.tokens.data() + s.num_prompt, n_out)};
      std::span<const uint32_t> allowed;
      if (s.constraint) allowed = constraint_mask(s, vocab);
      result.samples[i] = {*sample_ids[i], sampler.sample(row, s.sampling, hist, rng, allowed)};
      if (s.constraint) s.constraint->advance(result.samples[i].result.token);
    }
  });
  for (size_t i = 0; i < to_sample.size(); ++i) to_sample[i]->tokens.push_back(result.samples[i].result.token);
  return result;
}

}  // namespace pagoda
