#include "engine/draft_head_proposer.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"

namespace pagoda {

DraftHeadProposer::DraftHeadProposer(std::unique_ptr<DraftHead> head, int32_t num_blocks, int32_t block_size, DType kv_dtype,
                               double cost, ThreadPool& pool, int32_t max_len, int32_t max_pass_tokens,
                               DraftOutputHead output_head, const RunnerFactory& runner)
    : head_(std::move(head)),
      forward_(runner ? runner(*head_) : nullptr),
      kv_(num_blocks, block_size, /*enable_prefix_caching=*/false),
      block_size_(block_size),
      cost_(cost),
      max_len_(max_len),
      max_pass_tokens_(std::max(1, max_pass_tokens)),
      width_(static_cast<int64_t>(head_->capture_after.size()) * head_->target_hidden) {
  if (!forward_) forward_ = std::make_unique<DraftHeadForward>(*head_, num_blocks, block_size, kv_dtype, pool, std::move(output_head));
}

void DraftHeadProposer::forget(const std::string& id) {
  auto it = states_.find(id);
  if (it == states_.end()) return;
  kv_.free(it->second.shadow);
  states_.erase(it);
}

void DraftHeadProposer::restart(State& st, int32_t position) {
  kv_.free(st.shadow);
  st.shadow.num_computed_tokens = 0;
  st.base = position;
  st.fed = 0;
  st.pending.clear();
}

int64_t DraftHeadProposer::slot_of(const std::string& id, int32_t row) const {
  const auto table = kv_.block_table(id);
  return static_cast<int64_t>(table[static_cast<size_t>(row / block_size_)]) * block_size_ + row % block_size_;
}

void DraftHeadProposer::observe_hidden(std::span<const HiddenRows> rows, int64_t width) {
  PAGODA_CHECK(width == width_, "draft head: the target's captured rows have {} floats, the head reads {}", width, width_);
  for (const HiddenRows& r : rows) {
    auto [it, fresh] = states_.try_emplace(*r.id);
    State& st = it->second;
    if (fresh) {
      st.shadow.id = *r.id;
      st.base = r.first_position;
    }
    const int32_t fed_end = st.base + st.fed;
    const int32_t expected = fed_end + static_cast<int32_t>(static_cast<int64_t>(st.pending.size()) / width_);
    if (r.first_position >= fed_end && r.first_position <= expected) {
      st.pending.resize(static_cast<size_t>((r.first_position - fed_end) * width_));  // recomputed rows replace theirs
    } else {
      restart(st, r.first_position);
    }
    st.pending.insert(st.pending.end(), r.rows, r.rows + static_cast<int64_t>(r.num_rows) * width_);
    const int64_t np = static_cast<int64_t>(st.pending.size()) / width_;
    if (np > kMaxPendingRows) {
      std::vector<float> keep(st.pending.end() - kMaxPendingRows * width_, st.pending.end());
      restart(st, st.base + st.fed + static_cast<int32_t>(np - kMaxPendingRows));
      st.pending = std::move(keep);
    }
  }
}

void DraftHeadProposer::propose(std::span<const ProposeRequest> reqs, std::vector<std::vector<int32_t>>& drafts) {
  drafts.assign(reqs.size(), {});
  struct Active {
    size_t i;
    State* st;
    int32_t want;      // drafts wanted
    int32_t n;         // verified tokens
    int32_t pending;   // target-state rows to feed
    std::vector<int32_t> table;
    std::vector<float> hidden;  // the last row's output (the next chained step's input)
  };
  std::vector<Active> active;
  int32_t max_k = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const ProposeRequest& q = reqs[i];
    const int32_t n = static_cast<int32_t>(q.tokens.size());
    const int32_t want = std::min(q.max_drafts, max_len_ - n);
    auto it = states_.find(*q.id);
    if (want < 1 || it == states_.end()) continue;
    State& st = it->second;
    const int32_t np = static_cast<int32_t>(static_cast<int64_t>(st.pending.size()) / width_);
    // The target states must reach the last verified position but one (its token pairs with the
    // last verified token); otherwise this request gets no drafts this step.
    if (np < 1 || st.base + st.fed + np != n - 1) continue;
    // Chained rows of the last call are dropped; rows for the pending states and the drafts after
    // the first.
    st.shadow.num_computed_tokens = st.fed;
    kv_.trim(st.shadow, st.fed);
    if (!kv_.allocate_slots(st.shadow, np + want - 1)) continue;
    const auto table = kv_.block_table(*q.id);
    active.push_back({i, &st, want, n, np, std::vector<int32_t>(table.begin(), table.end()), {}});
    max_k = std::max(max_k, want);
  }
  if (active.empty()) return;
  const int64_t D = head_->config.hidden_size;
  std::vector<int32_t> tokens, positions, logits_rows;
  std::vector<int64_t> slots;
  std::vector<AttentionSeq> seqs;
  std::vector<float> features;
  std::vector<Active*> finishing;  // the requests whose logits rows this pass computes, in row order
  auto clear = [&] {
    tokens.clear();
    positions.clear();
    slots.clear();
    seqs.clear();
    features.clear();
    logits_rows.clear();
    finishing.clear();
  };
  // Runs the head over the collected rows (input: the target's `feature_rows` or the head's own
  // `hidden_rows`); logits row r's draft and output hidden state go to finishing[r].
  auto run_pass = [&](const float* feature_rows, const float* hidden_rows) {
    DraftHeadPass p;
    p.tokens = tokens;
    p.positions = positions;
    p.slots = slots;
    p.seqs = seqs;
    p.features = feature_rows;
    p.hidden = hidden_rows;
    p.logits_rows = logits_rows;
    forward_->forward(p);
    for (size_t r = 0; r < finishing.size(); ++r) {
      drafts[finishing[r]->i].push_back(forward_->drafts()[r]);
      const float* h = forward_->out_hidden().data_as<const float>() + static_cast<int64_t>(r) * D;
      finishing[r]->hidden.assign(h, h + D);
    }
  };
  // Pass 0: the pending target states, in passes of at most max_pass_tokens_ rows; the last row
  // of a request gives its first draft.
  size_t next = 0;
  int32_t done = 0;  // rows of active[next] already fed
  while (next < active.size()) {
    clear();
    int32_t budget = max_pass_tokens_;
    while (next < active.size() && budget > 0) {
      Active& a = active[next];
      State& st = *a.st;
      const int32_t take = std::min(budget, a.pending - done);
      AttentionSeq s;
      s.query_begin = static_cast<int32_t>(tokens.size());
      s.num_queries = take;
      s.context_len = st.fed + done + take;
      s.block_table = a.table;
      seqs.push_back(s);
      const std::span<const int32_t> toks = reqs[a.i].tokens;
      for (int32_t r = done; r < done + take; ++r) {
        const int32_t row = st.fed + r, pos = st.base + row;
        tokens.push_back(toks[static_cast<size_t>(pos + 1)]);
        positions.push_back(pos);
        slots.push_back(slot_of(*reqs[a.i].id, row));
      }
      features.insert(features.end(), st.pending.begin() + done * width_, st.pending.begin() + (done + take) * width_);
      budget -= take;
      done += take;
      if (done == a.pending) {
        logits_rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
        finishing.push_back(&a);
        ++next;
        done = 0;
      }
    }
    run_pass(features.data(), nullptr);
  }
  for (Active& a : active) {
    a.st->fed += a.pending;
    a.st->pending.clear();
  }
  // Pass j >= 1: draft j (a target id) at the next position with the previous row's output hidden.
  std::vector<float> hidden;
  for (int32_t j = 1; j < max_k; ++j) {
    clear();
    hidden.clear();
    for (Active& a : active) {
      if (a.want <= j) continue;
      const int32_t row = a.st->fed + j - 1;
      AttentionSeq s;
      s.query_begin = static_cast<int32_t>(tokens.size());
      s.num_queries = 1;
      s.context_len = row + 1;
      s.block_table = a.table;
      seqs.push_back(s);
      tokens.push_back(drafts[a.i].back());
      positions.push_back(a.st->base + row);
      slots.push_back(slot_of(*reqs[a.i].id, row));
      logits_rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
      hidden.insert(hidden.end(), a.hidden.begin(), a.hidden.end());
      finishing.push_back(&a);
    }
    if (finishing.empty()) break;
    run_pass(nullptr, hidden.data());
  }
  for (Active& a : active) a.st->shadow.num_computed_tokens = a.st->fed;
}

}  // namespace pagoda
