#include "sched/scheduler.h"

#include <algorithm>

#include "common/check.h"

namespace pagoda {

Scheduler::Scheduler(SchedulerConfig config, KvCacheManager& kv)
    : config_(std::move(config)), kv_(kv), policy_(make_policy(config_.policy)) {
  PAGODA_CHECK(policy_ != nullptr, "unknown scheduling policy '{}'", config_.policy);
  PAGODA_CHECK(config_.max_num_batched_tokens > 0 && config_.max_num_seqs > 0, "scheduler limits must be positive");
}

void Scheduler::insert_waiting(Request* r) {
  auto pos = std::find_if(waiting_.begin(), waiting_.end(), [&](const Request* w) { return policy_->before(*r, *w); });
  waiting_.insert(pos, r);
}

void Scheduler::add_request(Request* r) {
  PAGODA_CHECK(by_id_.emplace(r->id, r).second, "duplicate request id {}", r->id);
  r->status = RequestStatus::kWaiting;
  insert_waiting(r);
}

void Scheduler::finish_request(const std::string& id, RequestStatus status) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  Request* r = it->second;
  std::erase(running_, r);
  std::erase(waiting_, r);
  kv_.free(*r);
  r->status = status;
  r->spec_token_ids.clear();
  table_trimmed_.erase(id);
  by_id_.erase(it);
  auto known = known_to_runner_.find(id);
  if (known != known_to_runner_.end()) {
    if (known->second) finished_since_last_step_.push_back(id);
    known_to_runner_.erase(known);
  }
}

bool Scheduler::admissible(const Request& r) const {
  // A sibling that computes its whole prompt (prompt logprobs) does not wait for its leader's.
  if (r.prefill_leader.empty() || r.sampling.prompt_logprobs >= 0 || !kv_.pool().prefix_caching()) return true;
  auto it = by_id_.find(r.prefill_leader);
  if (it == by_id_.end()) return true;  // leader finished
  return it->second->num_computed_tokens >= it->second->num_prompt_tokens();
}

int32_t Scheduler::spec_allowed(const Request& r) const {
  if (r.spec_token_ids.empty() || r.num_computed_tokens + 1 != r.num_tokens()) return 0;
  const int32_t n_out = static_cast<int32_t>(r.output.size());
  int32_t n = static_cast<int32_t>(r.spec_token_ids.size());
  n = std::min(n, r.stop.max_tokens - n_out - 1);
  n = std::min(n, config_.max_model_len - r.num_tokens() - 1);
  return std::max(0, n);
}

int32_t Scheduler::tokens_wanted(const Request& r, int32_t budget) const {
  int32_t n = r.num_tokens() - r.num_computed_tokens;
  if (config_.long_prefill_token_threshold > 0 && r.num_computed_tokens < r.num_prompt_tokens())
    n = std::min(n, config_.long_prefill_token_threshold);
  return std::min(n + spec_allowed(r), budget);
}

void Scheduler::drain_tier_copies(SchedulerOutput& out) {
  auto [spills, fills] = kv_.take_tier_copies();
  out.swap_out.insert(out.swap_out.end(), spills.begin(), spills.end());
  out.swap_in.insert(out.swap_in.end(), fills.begin(), fills.end());
}

void Scheduler::preempt(size_t index, std::vector<Scheduled>& scheduled, int32_t& budget, SchedulerOutput& out) {
  Request* v = running_[index];
  // Admitted this step: its blocks may wait for this step's host-to-device copies, so a swap-out
  // (which copies before them) would save stale bytes. It recomputes instead.
  const bool admitted_now = admitted_this_step_.count(v) != 0;
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  auto s = std::find_if(scheduled.begin(), scheduled.end(), [&](const Scheduled& x) { return x.req == v; });
  if (s != scheduled.end()) {
    budget += s->num_tokens;
      scheduled.erase(s);
  }
  v->spec_token_ids.clear();  // drafts in flight are dropped; decoding resumes from verified tokens
  bool swapped = false;
  if (config_.preemption == PreemptionMode::kSwap && kv_.swap_enabled() && !admitted_now) {
    if (auto copies = kv_.swap_out(*v)) {
      out.swap_out.insert(out.swap_out.end(), copies->begin(), copies->end());
      swapped = true;
    }
  }
  if (!swapped) {
    table_trimmed_.erase(v->id);
    kv_.free(*v);
    v->num_computed_tokens = 0;
    if (known_to_runner_[v->id]) out.preempted.push_back(v->id);
    known_to_runner_[v->id] = false;
  }
  v->status = RequestStatus::kPreempted;
  ++v->num_preemptions;
  ++num_preemptions_;
  insert_waiting(v);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  out.finished = std::move(finished_since_last_step_);
  finished_since_last_step_.clear();
  int32_t budget = config_.max_num_batched_tokens;
  std::vector<Scheduled> scheduled;
  kv_.begin_step();
  admitted_this_step_.clear();
  const int64_t preemptions_before = num_preemptions_;

  // Phase 1: running requests, in admission order.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    int32_t n = tokens_wanted(*r, budget);
    if (n <= 0) {
      ++i;
      continue;
    }
    // Blocks that left the sliding window are released before the step allocates (the runner
    // gets the table with their entries nulled).
    if (kv_.evict_outside_window(*r) > 0) table_trimmed_[r->id] = true;
    // Drafts are the tail of n; the budget may have cut some.
    int32_t num_spec = std::max(0, n - (r->num_tokens() - r->num_computed_tokens));
    std::optional<std::vector<BlockId>> blocks;
    bool self_preempted = false;
    for (;;) {
      blocks = kv_.allocate_slots(*r, n);
      drain_tier_copies(out);
      if (blocks) break;
      if (num_spec > 0) {  // no room for the drafts' lookahead slots: decode without them first
        n -= num_spec;
        num_spec = 0;
        r->spec_token_ids.clear();
        continue;
      }
      const size_t v = policy_->pick_victim(running_);
      const bool is_self = running_[v] == r;
      preempt(v, scheduled, budget, out);
      if (is_self) {
        self_preempted = true;
        break;
      }
      if (v < i) --i;
    }
    if (self_preempted) continue;  // running_[i] is now the next request
    scheduled.push_back({r, n, std::move(*blocks), !known_to_runner_[r->id], false, num_spec});
    budget -= n;
    ++i;
  }

  // Phase 2: waiting requests in policy order, unless this step already had to preempt.
  if (num_preemptions_ == preemptions_before) {
    size_t w = 0;
    while (w < waiting_.size() && budget > 0 && static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
      Request* r = waiting_[w];
      if (!admissible(*r)) {
        ++w;
        continue;
      }
      int32_t n = 0;
      std::vector<BlockId> new_blocks;
      bool swapped_in = false;
      if (r->swapped_out) {
        const int32_t held = static_cast<int32_t>(kv_.block_table(r->id).size());
        if (kv_.num_free_blocks() < held + 1) break;
        auto copies = kv_.swap_in(*r);
        drain_tier_copies(out);
        if (!copies) break;
        out.swap_in.insert(out.swap_in.end(), copies->begin(), copies->end());
        swapped_in = true;
        const auto table = kv_.block_table(r->id);
        new_blocks.assign(table.begin(), table.end());
        r->spec_token_ids.clear();
        n = tokens_wanted(*r, budget);
        auto more = kv_.allocate_slots(*r, n);
        drain_tier_copies(out);
        if (more) {
          new_blocks.insert(new_blocks.end(), more->begin(), more->end());
        } else {
          n = 0;  // holds its blocks again; it gets tokens next step
        }
      } else {
        ComputedBlocks hit;
        // Prompt logprobs need every prompt position computed: no prefix-cache hit (vLLM's rule).
        if (r->num_computed_tokens == 0 && r->sampling.prompt_logprobs < 0) hit = kv_.find_computed_blocks(*r);
        n = r->num_tokens() - r->num_computed_tokens - hit.num_tokens;
        if (config_.long_prefill_token_threshold > 0) n = std::min(n, config_.long_prefill_token_threshold);
        if (!config_.chunked_prefill && n > budget) break;
        n = std::min(n, budget);
        auto blocks = kv_.allocate_slots(*r, n, hit);
        drain_tier_copies(out);
        if (!blocks) {
          if (!running_.empty()) {
            const size_t v = policy_->pick_victim(running_);
            if (policy_->may_preempt_for(*r, *running_[v])) {
              preempt(v, scheduled, budget, out);
              w = static_cast<size_t>(std::find(waiting_.begin(), waiting_.end(), r) - waiting_.begin());
              continue;
            }
          }
          break;
        }
        if (r->num_computed_tokens == 0 && r->num_preemptions == 0) r->num_cached_prompt_tokens = hit.num_tokens;
        r->num_computed_tokens += hit.num_tokens;
        new_blocks = std::move(*blocks);
      }
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
      admitted_this_step_.insert(r);
      running_.push_back(r);
      r->status = RequestStatus::kRunning;
      scheduled.push_back({r, n, std::move(new_blocks), !known_to_runner_[r->id], swapped_in});
      budget -= n;
    }
  }

  for (auto& s : scheduled) {
    Request* r = s.req;
    if (s.is_new) {
      NewRequestData d;
      d.id = r->id;
      d.tokens = r->all_tokens();
      d.num_prompt_tokens = r->num_prompt_tokens();
      d.sampling = r->sampling;
      d.seed = r->seed;
      const auto table = kv_.block_table(r->id);
      d.block_ids.assign(table.begin(), table.end());
      d.num_computed_tokens = r->num_computed_tokens;
      d.min_tokens = r->stop.min_tokens;
      if (d.min_tokens > 0) {
        if (!r->stop.ignore_eos) d.min_tokens_blocked_ids = r->eos_token_ids;
        d.min_tokens_blocked_ids.insert(d.min_tokens_blocked_ids.end(), r->stop.stop_token_ids.begin(), r->stop.stop_token_ids.end());
      }
      out.new_requests.push_back(std::move(d));
    } else {
      CachedRequestData d;
      d.id = r->id;
      d.new_block_ids = std::move(s.new_blocks);
      d.num_computed_tokens = r->num_computed_tokens;
      d.replace_block_table = s.swapped_in;
      if (table_trimmed_.erase(r->id) > 0 && !d.replace_block_table) {
        const auto table = kv_.block_table(r->id);
        d.new_block_ids.assign(table.begin(), table.end());
        d.replace_block_table = true;
      }
      out.cached_requests.push_back(std::move(d));
    }
    known_to_runner_[r->id] = true;
    if (s.num_tokens > 0) {
      ScheduledTokens st{r->id, s.num_tokens};
      st.spec_tokens.assign(r->spec_token_ids.begin(), r->spec_token_ids.begin() + s.num_spec);
      out.num_scheduled_tokens.push_back(std::move(st));
    }
    out.total_num_scheduled_tokens += s.num_tokens;
    r->num_computed_tokens += s.num_tokens;
  }
  return out;
}

StepUpdate Scheduler::update_from_output(const SchedulerOutput& out, const std::vector<SampledToken>& sampled) {
  StepUpdate update;
  // Verified drafts: computed slots past the accepted ones are rejected; give their blocks back.
  std::unordered_map<std::string, int32_t> num_sampled;
  for (const auto& s : sampled) ++num_sampled[s.id];
  for (const auto& st : out.num_scheduled_tokens) {
    auto it = by_id_.find(st.id);
    if (it == by_id_.end()) continue;
    Request* r = it->second;
    r->spec_token_ids.clear();
    const int32_t m = static_cast<int32_t>(st.spec_tokens.size());
    if (m == 0 || r->status != RequestStatus::kRunning) continue;
    auto ns = num_sampled.find(st.id);
    const int32_t accepted = ns == num_sampled.end() ? 0 : std::clamp(ns->second - 1, 0, m);
    r->num_computed_tokens -= m - accepted;
    if (kv_.trim(*r, r->num_computed_tokens) > 0) table_trimmed_[r->id] = true;
  }
  for (const auto& s : sampled) {
    auto it = by_id_.find(s.id);
    if (it == by_id_.end()) continue;  // finished meanwhile (abort)
    Request* r = it->second;
    r->output.push_back(s.token);
    update.new_tokens.push_back(r);
    const int32_t n_out = static_cast<int32_t>(r->output.size());
    const bool may_stop = n_out >= r->stop.min_tokens;
    RequestStatus status = RequestStatus::kRunning;
    if (may_stop && !r->stop.ignore_eos &&
        std::find(r->eos_token_ids.begin(), r->eos_token_ids.end(), s.token) != r->eos_token_ids.end()) {
      status = RequestStatus::kFinishedStopped;
    } else if (may_stop && std::find(r->stop.stop_token_ids.begin(), r->stop.stop_token_ids.end(), s.token) !=
                               r->stop.stop_token_ids.end()) {
      status = RequestStatus::kFinishedStopped;
    } else if (n_out >= r->stop.max_tokens || r->num_tokens() >= config_.max_model_len) {
      status = RequestStatus::kFinishedLength;
    }
    if (status != RequestStatus::kRunning) {
      finish_request(r->id, status);
      update.finished.push_back(r);
    }
  }
  return update;
}

void Scheduler::update_draft_tokens(const std::vector<std::pair<std::string, std::vector<int32_t>>>& drafts) {
  for (const auto& [id, tokens] : drafts) {
    auto it = by_id_.find(id);
    if (it == by_id_.end() || it->second->status != RequestStatus::kRunning) continue;
    it->second->spec_token_ids = tokens;
  }
}

int64_t Scheduler::num_running_cached_tokens() const {
  int64_t n = 0;
  const int64_t bs = kv_.block_size();
  for (const Request* r : running_) {
    // Less the positions of blocks released outside the sliding window (null table entries).
    int64_t released = 0;
    for (BlockId b : kv_.block_table(r->id)) released += b == kNullBlock;
    n += std::max<int64_t>(0, r->num_computed_tokens - released * bs);
  }
  return n;
}

std::vector<std::string> Scheduler::running_ids() const {
  std::vector<std::string> ids;
  for (const Request* r : running_) ids.push_back(r->id);
  return ids;
}

std::vector<std::string> Scheduler::waiting_ids() const {
  std::vector<std::string> ids;
  for (const Request* r : waiting_) ids.push_back(r->id);
  return ids;
}

}  // namespace pagoda
