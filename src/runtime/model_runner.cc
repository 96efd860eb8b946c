#include "runtime/model_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/constraint_masks.h"

namespace pagoda {

namespace {
constexpr double kAcceptanceDecay = 0.9;  // weight of a verification after each later one
constexpr int32_t kProbeInterval = 8;     // steps between one-draft probes when speculation is off
}  // namespace

Rng token_rng(uint64_t seed, int64_t index) {
  return Rng(seed ^ (0xd1b54a32d192ed03ull * static_cast<uint64_t>(index + 1)));
}

int32_t best_draft_length(double alpha, int32_t max_k, double cost_per_draft) {
  // Each draft accepted with probability alpha until the first rejection: a step with k drafts
  // yields E(k) = 1 + alpha + ... + alpha^k tokens for 1 + k * cost_per_draft step units.
  alpha = std::clamp(alpha, 0.0, 0.999);
  int32_t best = 0;
  double best_rate = 1.0;  // plain decoding: one token a unit
  double yield = 1.0, term = 1.0;
  for (int32_t k = 1; k <= max_k; ++k) {
    term *= alpha;
    yield += term;
    const double rate = yield / (1.0 + k * cost_per_draft);
    if (rate > best_rate * 1.02) {  // a 2 % margin: no drafts for a break-even guess
      best = k;
      best_rate = rate;
    }
  }
  return best;
}

ModelRunner::ModelRunner(ModelExecutor& executor, int64_t block_size, ThreadPool& pool)
    : executor_(executor), block_size_(block_size), pool_(pool), samplers_(pool.size()) {}

void ModelRunner::sync_constraint(ReqState& s) {
  for (; s.constraint_at < static_cast<int32_t>(s.tokens.size()); ++s.constraint_at) s.constraint->advance(s.tokens[s.constraint_at]);
}

void ModelRunner::fill_draft_masks(ReqState& s, std::span<const int32_t> drafts) {
  const size_t rows = drafts.size() + 1;
  const size_t words = s.mask.size() / rows;
  int32_t advanced = 0;
  for (size_t j = 0; j < rows; ++j) {
    std::span<uint32_t> row(s.mask.data() + j * words, words);
    // Past a draft the constraint forbids (the runner cut such drafts; a caller may not have) the
    // rows are unreachable: that draft is never the row's choice. They repeat the last mask.
    if (static_cast<int32_t>(j) > advanced) std::copy_n(s.mask.data() + (j - 1) * words, words, row.begin());
    else s.constraint->fill_mask(row);
    if (j < drafts.size() && static_cast<int32_t>(j) == advanced && s.constraint->advance(drafts[j])) ++advanced;
  }
  s.constraint->rollback(advanced);
}

std::span<const uint32_t> ModelRunner::constraint_mask(ReqState& s, int64_t vocab) {
  // The model's vocabulary may be padded past the tokenizer's: ids the constraint does not know
  // stay disallowed.
  const size_t words = (static_cast<size_t>(vocab) + 31) / 32;
  const size_t cwords = (static_cast<size_t>(s.constraint->vocab_size()) + 31) / 32;
  s.mask.assign(std::max(words, cwords), 0u);
  s.constraint->fill_mask(std::span<uint32_t>(s.mask.data(), cwords));
  return std::span<const uint32_t>(s.mask.data(), words);
}

void ModelRunner::set_speculation(const SpeculativeConfig& config, std::unique_ptr<Proposer> proposer) {
  if (!proposer) {
    release_proposer();
    return;
  }
  PAGODA_CHECK(config.enabled(), "set_speculation with a proposer but no method");
  const std::vector<int64_t> layers = proposer->hidden_layers();
  PAGODA_CHECK(executor_.set_hidden_capture(layers), "the {} proposer needs the target's hidden states, which the {} executor "
               "does not capture (the engine refuses this combination first)", proposer->name(), executor_.device_name());
  spec_ = config;
  proposer_ = std::move(proposer);
  verifiers_.resize(pool_.size());
}

void ModelRunner::forget_all() {
  if (proposer_)
    for (const auto& [id, s] : reqs_) proposer_->forget(id);
  reqs_.clear();
}

std::unique_ptr<Proposer> ModelRunner::release_proposer() {
  spec_ = SpeculativeConfig{};
  if (proposer_ && !proposer_->hidden_layers().empty()) executor_.set_hidden_capture({});
  return std::move(proposer_);
}

RunnerOutput ModelRunner::execute(const SchedulerOutput& out) {
  for (const auto& id : out.finished) {
    reqs_.erase(id);
    if (proposer_) proposer_->forget(id);
  }
  for (const auto& id : out.preempted) {
    reqs_.erase(id);
    if (proposer_) proposer_->forget(id);
  }
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
      // A resumed request replays the output it already has (sync_constraint).
      s.constraint = n.sampling.constraint->start();
      s.constraint_at = s.num_prompt;
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
  std::vector<int64_t> rows;  // first logits row of each sampled request
  std::vector<std::span<const int32_t>> drafts;  // drafts verified per sampled request
  std::vector<int32_t> known_end;                // tokens known before the step, per sampled request
  std::vector<RowLogprobSpec> row_specs;         // prompt logprobs: rows of result.prompt_logprobs, in order
  struct Computed {
    const std::string* id;
    ReqState* state;
    int32_t begin, token_begin;
  };
  std::vector<Computed> computed;  // every scheduled sequence (hidden states for the proposer)
  bool any_drafts = false;
  const int64_t bs = block_size_;
  std::vector<int32_t> ids;
  for (const auto& st : out.num_scheduled_tokens) {
    ReqState& s = reqs_.at(st.id);
    const int32_t m = static_cast<int32_t>(st.spec_tokens.size());
    const int32_t begin = s.num_computed, end = s.num_computed + st.num_tokens, known = end - m;
    const int32_t n_known = static_cast<int32_t>(s.tokens.size());
    PAGODA_CHECK(known <= n_known && known > begin, "request {}: scheduled up to token {} of {}", st.id, known, n_known);
    PAGODA_CHECK(m == 0 || known == n_known, "request {}: drafts scheduled before its last token ({} of {})", st.id, known,
                 n_known);
    ids.assign(s.tokens.begin() + begin, s.tokens.begin() + known);
    ids.insert(ids.end(), st.spec_tokens.begin(), st.spec_tokens.end());
    const bool sample = known == n_known;
    const int32_t last_scored = std::min(known, s.num_prompt - 1);  // positions before it score the next prompt token
    // (A request resumed with output recomputes its prompt: its prompt logprobs went out already.)
    if (m == 0 && s.sampling.prompt_logprobs >= 0 && begin < last_scored && n_known == s.num_prompt) {
      // Prompt logprobs: logits at every prompt position of the chunk, then the sampled row.
      batch_.add_sequence(ids, end, s.block_table, bs, false);
      const int32_t tb = batch_.seqs.back().token_begin;
      PromptLogprobChunk chunk;
      chunk.id = st.id;
      chunk.first_token = begin + 1;
      for (int32_t p = begin; p < last_scored; ++p) {
        row_specs.push_back({static_cast<int64_t>(batch_.logits_rows.size()), s.tokens[p + 1], s.sampling.prompt_logprobs});
        batch_.logits_rows.push_back(tb + (p - begin));
      }
      chunk.rows.resize(static_cast<size_t>(last_scored - begin));  // filled after the forward pass
      result.prompt_logprobs.push_back(std::move(chunk));
      if (sample) batch_.logits_rows.push_back(tb + static_cast<int32_t>(ids.size()) - 1);
    } else if (m == 0) {
      batch_.add_sequence(ids, end, s.block_table, bs, sample);
    } else {
      // Logits at the last known token and at every draft.
      batch_.add_sequence(ids, end, s.block_table, bs, false);
      const int32_t tb = batch_.seqs.back().token_begin, n = static_cast<int32_t>(ids.size());
      for (int32_t i = n - m - 1; i < n; ++i) batch_.logits_rows.push_back(tb + i);
      any_drafts = true;
    }
    computed.push_back({&st.id, &s, begin, batch_.seqs.back().token_begin});
    s.num_computed = end;
    if (sample) {
      to_sample.push_back(&s);
      sample_ids.push_back(&st.id);
      rows.push_back(static_cast<int64_t>(batch_.logits_rows.size()) - 1 - m);
      drafts.emplace_back(st.spec_tokens);
      known_end.push_back(known);
    }
  }
  result.num_tokens = static_cast<int32_t>(batch_.num_tokens());
  const int64_t n_samples = static_cast<int64_t>(to_sample.size());
  std::vector<std::vector<SampleResult>> kept(to_sample.size());
  // Greedy verification on an executor that samples on its device: each verified row is sampled
  // there as plain decoding would (penalties over the output extended by the drafts before it),
  // only ids and logprobs come back, and a draft is kept while it equals its row's choice.
  // Rejection sampling (temperature > 0) needs the distributions: logits to the host.
  bool device_verify = spec_.device_verify;
  for (int64_t i = 0; i < n_samples && device_verify; ++i)
    if (!drafts[i].empty() && !to_sample[i]->sampling.greedy()) device_verify = false;
  if (executor_.samples_on_device() && (!any_drafts || device_verify)) {
    // The forward pass and the sampling both on the device; only ids and logprobs come back.
    std::vector<SampleSpec> specs;
    std::vector<size_t> first(to_sample.size());
    std::vector<std::vector<int32_t>> extended(to_sample.size());  // output + drafts (requests with drafts)
    std::vector<int64_t> constrained;  // indices of structured-output requests
    for (int64_t i = 0; i < n_samples; ++i) {
      ReqState& s = *to_sample[i];
      const int32_t n_out = static_cast<int32_t>(s.tokens.size()) - s.num_prompt;
      const int32_t m = static_cast<int32_t>(drafts[i].size());
      std::span<const int32_t> output(s.tokens.data() + s.num_prompt, n_out);
      if (m > 0) {
        extended[i].assign(output.begin(), output.end());
        extended[i].insert(extended[i].end(), drafts[i].begin(), drafts[i].end());
        output = extended[i];
      }
      first[i] = specs.size();
      for (int32_t j = 0; j <= m; ++j) {
        SampleSpec& sp = specs.emplace_back();
        sp.logits_row = rows[i] + j;
        sp.params = &s.sampling;
        sp.uniform = s.sampling.greedy() ? 0.0 : token_rng(s.seed, n_out).uniform();
        sp.history = {std::span<const int32_t>(s.tokens.data(), s.num_prompt), output.first(n_out + j)};
        if (n_out + j < s.min_tokens) sp.blocked_ids = s.min_tokens_blocked_ids;
      }
      if (s.constraint) {
        // Row j's mask: the constraint advanced through drafts 0..j-1 (ids past its vocabulary:
        // disallowed on the device), filled by before_sampling below.
        const size_t words = (static_cast<size_t>(s.constraint->vocab_size()) + 31) / 32;
        s.mask.resize(static_cast<size_t>(m + 1) * words);
        const std::span<const uint32_t> masks(s.mask);
        for (int32_t j = 0; j <= m; ++j) specs[first[i] + j].allowed_mask = masks.subspan(j * words, words);
        constrained.push_back(i);
      }
    }
    // Structured outputs: the constraints' work (advancing over last step's tokens, the masks)
    // overlaps the device's forward pass, spread over the pool (runtime/constraint_masks.h).
    auto before_sampling = [&] {
      std::vector<ConstraintMaskRow> mask_rows(constrained.size());
      for (size_t k = 0; k < constrained.size(); ++k) {
        ReqState& s = *to_sample[constrained[k]];
        mask_rows[k].constraint = s.constraint.get();
        if (drafts[constrained[k]].empty()) mask_rows[k].mask = std::span<uint32_t>(s.mask);
      }
      fill_constraint_masks(pool_, mask_rows, [&](size_t k) {
        ReqState& s = *to_sample[constrained[k]];
        sync_constraint(s);
        if (!drafts[constrained[k]].empty()) fill_draft_masks(s, drafts[constrained[k]]);
      });
    };
    std::vector<SampleResult> sampled;
    executor_.forward_sample(batch_, specs, sampled, before_sampling);
    for (int64_t i = 0; i < n_samples; ++i) {
      const size_t m = drafts[i].size();
      for (size_t j = 0; j <= m; ++j) {
        const bool accepted = j < m && sampled[first[i] + j].token == drafts[i][j];
        kept[i].push_back(std::move(sampled[first[i] + j]));
        if (!accepted) break;
      }
    }
  } else {
    const Tensor& logits = executor_.forward(batch_);
    const int64_t vocab = logits.dim(1);
    pool_.run([&](int ith, int nth) {
      std::vector<float> masked;
      Sampler& sampler = samplers_[ith];  // per-thread scratch
      for (int64_t i = n_samples * ith / nth; i < n_samples * (ith + 1) / nth; ++i) {
        ReqState& s = *to_sample[i];
        const int32_t n_out = static_cast<int32_t>(s.tokens.size()) - s.num_prompt;
        const float* first = logits.data_as<float>() + rows[i] * vocab;
        if (!drafts[i].empty()) {
          VerifyInput in;
          in.logits = std::span<const float>(first, static_cast<size_t>((drafts[i].size() + 1) * vocab));
          in.vocab = vocab;
          in.drafts = drafts[i];
          in.params = &s.sampling;
          in.prompt = std::span<const int32_t>(s.tokens.data(), s.num_prompt);
          in.output = std::span<const int32_t>(s.tokens.data() + s.num_prompt, n_out);
          in.seed = s.seed;
          in.min_tokens = s.min_tokens;
          in.blocked_ids = s.min_tokens_blocked_ids;
          if (s.constraint) {
            sync_constraint(s);
            in.constraint = s.constraint.get();
          }
          kept[i] = verifiers_[ith].verify(in);
          continue;
        }
        std::span<const float> row(first, static_cast<size_t>(vocab));
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
        if (s.constraint) {
          sync_constraint(s);
          allowed = constraint_mask(s, vocab);
        }
        kept[i].push_back(sampler.sample(row, s.sampling, hist, rng, allowed));
      }
    });
  }
  if (!row_specs.empty()) {
    std::vector<RowLogprobs> scored;
    executor_.row_logprobs(row_specs, scored);
    PAGODA_CHECK(scored.size() == row_specs.size(), "row_logprobs returned {} rows for {}", scored.size(), row_specs.size());
    size_t at = 0;
    for (auto& chunk : result.prompt_logprobs)
      for (auto& r : chunk.rows) r = std::move(scored[at++]);
  }
  for (int64_t i = 0; i < n_samples; ++i) {
    ReqState& s = *to_sample[i];
    const int32_t m = static_cast<int32_t>(drafts[i].size());
    const int32_t accepted = static_cast<int32_t>(kept[i].size()) - 1;
    if (m > 0) {
      // K/V of rejected drafts stay in their slots but are no longer part of the sequence.
      s.num_computed = known_end[i] + accepted;
      result.spec.num_drafts += 1;
      result.spec.num_draft_tokens += m;
      result.spec.num_accepted_tokens += accepted;
      if (accepted < m) ++result.spec.num_rejections;
      if (result.spec.accepted_per_position.size() < static_cast<size_t>(spec_.num_speculative_tokens))
        result.spec.accepted_per_position.resize(spec_.num_speculative_tokens);
      for (int32_t j = 0; j < accepted && j < spec_.num_speculative_tokens; ++j) ++result.spec.accepted_per_position[j];
      if (spec_.adaptive) {
        s.spec_accepted = kAcceptanceDecay * s.spec_accepted + accepted;
        s.spec_rejected = kAcceptanceDecay * s.spec_rejected + (accepted < m ? 1.0 : 0.0);
        s.spec_k = best_draft_length(s.spec_accepted / (s.spec_accepted + s.spec_rejected), spec_.num_speculative_tokens,
                                     proposer_->draft_cost() + spec_.verify_token_cost);
      }
    }
    for (auto& r : kept[i]) {
      s.tokens.push_back(r.token);  // the constraint follows at its next sync_constraint
      result.samples.push_back({*sample_ids[i], std::move(r)});
    }
  }
  if (proposer_ && !proposer_->hidden_layers().empty()) {
    // The verified positions' hidden states: each sequence's rows up to its computed tokens (the
    // rows of rejected drafts are left out).
    const Tensor* hidden = executor_.captured_hidden();
    PAGODA_CHECK(hidden != nullptr && hidden->dim(0) == batch_.num_tokens(), "the executor captured no hidden states");
    const int64_t width = hidden->dim(1);
    std::vector<HiddenRows> rows_of;
    rows_of.reserve(computed.size());
    for (const Computed& c : computed) {
      HiddenRows h;
      h.id = c.id;
      h.first_position = c.begin;
      h.num_rows = c.state->num_computed - c.begin;
      h.rows = hidden->data_as<const float>() + static_cast<int64_t>(c.token_begin) * width;
      if (h.num_rows > 0) rows_of.push_back(h);
    }
    proposer_->observe_hidden(rows_of, width);
  }
  if (proposer_) propose(sample_ids, result);
  return result;
}

void ModelRunner::propose(const std::vector<const std::string*>& ids, RunnerOutput& result) {
  // Large batches are compute-bound already: verifying drafts would slow the step.
  if (ids.empty() || (spec_.disable_by_batch_size > 0 && static_cast<int32_t>(ids.size()) > spec_.disable_by_batch_size))
    return;
  std::vector<ProposeRequest> reqs;
  reqs.reserve(ids.size());
  for (const std::string* id : ids) {
    ReqState& s = reqs_.at(*id);
    if (s.constraint) {
      sync_constraint(s);
      // Structured output with nothing left to emit: no draft could be accepted.
      if (s.constraint->finished()) continue;
    }
    if (s.spec_k == 0) {
      // Speculation did not pay for this request: probe with one draft now and then.
      if (++s.spec_idle < kProbeInterval) continue;
      s.spec_idle = 0;
    }
    ProposeRequest p;
    p.id = id;
    p.tokens = s.tokens;
    p.max_drafts = s.spec_k > 0 ? s.spec_k : s.spec_k == 0 ? 1 : spec_.num_speculative_tokens;
    p.constraint = s.constraint.get();
    reqs.push_back(p);
  }
  if (reqs.empty()) return;
  std::vector<std::vector<int32_t>> drafts;
  proposer_->propose(reqs, drafts);
  for (size_t i = 0; i < reqs.size(); ++i) {
    // Structured output: drafts end before the first token the grammar forbids (it could never
    // be accepted; proposers draft deterministically, so the cut leaves the verified
    // distribution exact: runtime/spec_verifier.h).
    if (reqs[i].constraint && !drafts[i].empty()) drafts[i].resize(accepted_prefix(*reqs[i].constraint, drafts[i]));
    if (!drafts[i].empty()) result.drafts.emplace_back(*reqs[i].id, std::move(drafts[i]));
  }
}

}  // namespace pagoda
