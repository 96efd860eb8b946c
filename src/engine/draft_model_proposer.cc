#include "engine/draft_model_proposer.h"

#include <algorithm>

#include "common/check.h"

namespace pagoda {

DraftModelProposer::DraftModelProposer(std::unique_ptr<ModelExecutor> executor, int32_t num_blocks, int32_t block_size,
                                       double cost)
    : executor_(std::move(executor)),
      kv_(num_blocks, block_size, /*enable_prefix_caching=*/false),
      block_size_(block_size),
      cost_(cost) {}

void DraftModelProposer::forget(const std::string& id) {
  auto it = states_.find(id);
  if (it == states_.end()) return;
  kv_.free(it->second.shadow);
  states_.erase(it);
}

namespace {
int32_t argmax_row(const Tensor& logits, int64_t row) {
  const int64_t vocab = logits.dim(1);
  const float* p = logits.data_as<float>() + row * vocab;
  return static_cast<int32_t>(std::max_element(p, p + vocab) - p);
}
}  // namespace

void DraftModelProposer::propose(std::span<const ProposeRequest> reqs, std::vector<std::vector<int32_t>>& drafts) {
  drafts.assign(reqs.size(), {});
  std::vector<size_t> active;
  int32_t max_k = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const ProposeRequest& q = reqs[i];
    const int32_t n = static_cast<int32_t>(q.tokens.size());
    if (q.max_drafts < 1 || n < 1) continue;
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
    if (!kv_.allocate_slots(st.shadow, n - valid + q.max_drafts - 1)) continue;
    active.push_back(i);
    max_k = std::max(max_k, q.max_drafts);
  }
  if (active.empty()) return;
  std::vector<int32_t> ids;
  // Pass 0: the tokens since the cache's end; pass j: draft j-1.
  for (int32_t j = 0; j < max_k; ++j) {
    batch_.clear();
    std::vector<size_t> in_pass;
    for (size_t i : active) {
      const ProposeRequest& q = reqs[i];
      if (q.max_drafts <= j) continue;
      State& st = states_.at(*q.id);
      const int32_t n = static_cast<int32_t>(q.tokens.size());
      if (j == 0) ids.assign(q.tokens.begin() + static_cast<int32_t>(st.cached.size()), q.tokens.end());
      else ids.assign(1, drafts[i].back());
      const int32_t context = static_cast<int32_t>(st.cached.size() + ids.size());
      PAGODA_CHECK(context == n + j, "draft proposer: context {} for token {} of request {}", context, n + j, *q.id);
      const auto table = kv_.block_table(*q.id);
      batch_.add_sequence(ids, context, std::vector<int32_t>(table.begin(), table.end()), block_size_);
      st.cached.insert(st.cached.end(), ids.begin(), ids.end());
      in_pass.push_back(i);
    }
    if (in_pass.empty()) break;
    const Tensor& logits = executor_->forward(batch_);
    for (size_t r = 0; r < in_pass.size(); ++r) drafts[in_pass[r]].push_back(argmax_row(logits, static_cast<int64_t>(r)));
  }
  for (size_t i : active) states_.at(*reqs[i].id).shadow.num_computed_tokens = static_cast<int32_t>(states_.at(*reqs[i].id).cached.size());
}

}  // namespace pagoda
