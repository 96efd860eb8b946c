#include "engine/draft_model_proposer.h"

#include <algorithm>
#include <bit>

#include "common/check.h"

namespace pagoda {

DraftModelProposer::DraftModelProposer(std::unique_ptr<ModelExecutor> executor, int32_t num_blocks, int32_t block_size,
                                       double cost, int32_t max_len, int32_t max_pass_tokens)
    : executor_(std::move(executor)),
      kv_(num_blocks, block_size, /*enable_prefix_caching=*/false),
      block_size_(block_size),
      cost_(cost),
      max_len_(max_len),
      max_pass_tokens_(std::max(1, max_pass_tokens)) {
  greedy_.temperature = 0;
}

void DraftModelProposer::forget(const std::string& id) {
  auto it = states_.find(id);
  if (it == states_.end()) return;
  kv_.free(it->second.shadow);
  states_.erase(it);
}

void DraftModelProposer::run_greedy(std::span<const std::span<const uint32_t>> masks, std::vector<int32_t>& out) {
  const size_t rows = batch_.logits_rows.size();
  out.clear();
  if (executor_->samples_on_device()) {
    specs_.assign(rows, SampleSpec{});
    for (size_t r = 0; r < rows; ++r) {
      specs_[r].logits_row = static_cast<int64_t>(r);
      specs_[r].params = &greedy_;
      if (r < masks.size()) specs_[r].allowed_mask = masks[r];
    }
    executor_->forward_sample(batch_, specs_, sampled_, {});
    for (const SampleResult& s : sampled_) out.push_back(s.token);
    return;
  }
  const Tensor& logits = executor_->forward(batch_);
  const int64_t vocab = logits.dim(1);
  for (size_t r = 0; r < rows; ++r) {
    const float* p = logits.data_as<float>() + static_cast<int64_t>(r) * vocab;
    int32_t best = static_cast<int32_t>(std::max_element(p, p + vocab) - p);
    if (r < masks.size() && !masks[r].empty()) {
      // The first largest logit among the allowed ids (std::max_element's tie rule).
      int32_t allowed = -1;
      for (size_t w = 0; w < masks[r].size(); ++w)
        for (uint32_t bits = masks[r][w]; bits != 0; bits &= bits - 1) {
          const int64_t t = static_cast<int64_t>(w) * 32 + std::countr_zero(bits);
          if (t >= vocab) break;
          if (allowed < 0 || p[t] > p[allowed]) allowed = static_cast<int32_t>(t);
        }
      if (allowed >= 0) best = allowed;
    }
    out.push_back(best);
  }
}

void DraftModelProposer::propose(std::span<const ProposeRequest> reqs, std::vector<std::vector<int32_t>>& drafts) {
  drafts.assign(reqs.size(), {});
  std::vector<size_t> active;
  std::vector<int32_t> want(reqs.size(), 0);  // drafts per request: max_drafts, capped by max_len
  int32_t max_k = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const ProposeRequest& q = reqs[i];
    const int32_t n = static_cast<int32_t>(q.tokens.size());
    want[i] = std::min(q.max_drafts, max_len_ - n);
    if (want[i] < 1 || n < 1) continue;
    auto [it, fresh] = states_.try_emplace(*q.id);
    State& st = it->second;
    if (fresh) st.shadow.id = *q.id;
    // The cache stays valid up to the first token that differs from the verified ones; at least
    // the last verified token is fed again (its logits give the first draft).
    const auto mismatch = std::mismatch(st.cached.begin(), st.cached.end(), q.tokens.begin(), q.tokens.end());
    const int32_t valid = std::min<int32_t>(static_cast<int32_t>(mismatch.first - st.cached.begin()), n - 1);
    st.cached.resize(valid);
    st.shadow.num_computed_tokens = valid;
    kv_.trim(st.shadow, valid);
    // Slots for the tokens fed now and the drafts fed after them (the last draft is not fed).
    if (!kv_.allocate_slots(st.shadow, n - valid + want[i] - 1)) continue;
    active.push_back(i);
    max_k = std::max(max_k, want[i]);
  }
  if (active.empty()) return;
  // Structured outputs: each request's mask after its drafts so far, and its advances to undo.
  std::vector<std::vector<uint32_t>> masks(reqs.size());
  std::vector<int32_t> advanced(reqs.size(), 0);
  std::vector<std::span<const uint32_t>> row_masks;  // per row of a pass
  auto pass_masks = [&](const std::vector<size_t>& rows) {
    row_masks.assign(rows.size(), {});
    for (size_t r = 0; r < rows.size(); ++r) {
      TokenConstraint* c = reqs[rows[r]].constraint;
      if (!c) continue;
      masks[rows[r]].resize((static_cast<size_t>(c->vocab_size()) + 31) / 32);
      c->fill_mask(masks[rows[r]]);
      row_masks[r] = masks[rows[r]];
    }
  };
  // Takes each row's draft; a constrained request follows it (and drafts no further if its
  // constraint refuses it: a row whose allowed tokens all had -inf logits).
  auto take = [&](const std::vector<size_t>& rows, const std::vector<int32_t>& out) {
    for (size_t r = 0; r < rows.size(); ++r) {
      const size_t i = rows[r];
      drafts[i].push_back(out[r]);
      if (TokenConstraint* c = reqs[i].constraint) {
        if (c->advance(out[r])) ++advanced[i];
        else want[i] = static_cast<int32_t>(drafts[i].size());
      }
    }
  };
  std::vector<int32_t> ids, greedy;
  std::vector<size_t> in_pass;
  auto add = [&](size_t i, int32_t count_ids, bool last) {
    State& st = states_.at(*reqs[i].id);
    const int32_t context = static_cast<int32_t>(st.cached.size()) + count_ids;
    const auto table = kv_.block_table(*reqs[i].id);
    batch_.add_sequence(ids, context, std::vector<int32_t>(table.begin(), table.end()), block_size_, last);
    st.cached.insert(st.cached.end(), ids.begin(), ids.end());
    if (last) in_pass.push_back(i);
  };
  // Pass 0: each request's tokens since its cache's end, in forward passes of at most
  // max_pass_tokens_ tokens; the last chunk of a request gives its first draft.
  {
    size_t next = 0;
    while (next < active.size()) {
      batch_.clear();
      in_pass.clear();
      int32_t budget = max_pass_tokens_;
      while (next < active.size() && budget > 0) {
        const size_t i = active[next];
        const ProposeRequest& q = reqs[i];
        const int32_t from = static_cast<int32_t>(states_.at(*q.id).cached.size());
        const int32_t take = std::min<int32_t>(budget, static_cast<int32_t>(q.tokens.size()) - from);
        ids.assign(q.tokens.begin() + from, q.tokens.begin() + from + take);
        const bool last = from + take == static_cast<int32_t>(q.tokens.size());
        add(i, take, last);
        budget -= take;
        if (last) ++next;
      }
      if (in_pass.empty() && batch_.num_tokens() > 0) {
        executor_->forward(batch_);  // a chunk of a long catch-up: K/V only
        continue;
      }
      pass_masks(in_pass);
      run_greedy(row_masks, greedy);
      take(in_pass, greedy);
    }
  }
  // Pass j >= 1: draft j-1 in, draft j out.
  for (int32_t j = 1; j < max_k; ++j) {
    batch_.clear();
    in_pass.clear();
    for (size_t i : active) {
      if (want[i] <= j) continue;
      const int32_t n = static_cast<int32_t>(reqs[i].tokens.size());
      ids.assign(1, drafts[i].back());
      PAGODA_CHECK(static_cast<int32_t>(states_.at(*reqs[i].id).cached.size()) + 1 == n + j,
                   "draft proposer: context for token {} of request {}", n + j, *reqs[i].id);
      add(i, 1, true);
    }
    if (in_pass.empty()) break;
    pass_masks(in_pass);
    run_greedy(row_masks, greedy);
    take(in_pass, greedy);
  }
  for (size_t i : active) {
    State& st = states_.at(*reqs[i].id);
    st.shadow.num_computed_tokens = static_cast<int32_t>(st.cached.size());
    if (reqs[i].constraint) reqs[i].constraint->rollback(advanced[i]);
  }
}

}  // namespace pagoda
