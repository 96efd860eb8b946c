// Scheduler: one token budget per step, no prefill/decode phases (vLLM v1).
//
// Each request carries num_computed_tokens. Every step, running requests are served first, then
// waiting ones, each given min(tokens it still needs, budget left) new tokens within
// max_num_batched_tokens and max_num_seqs. That one rule covers chunked prefill, decode and
// prefix-cache hits (they start with computed tokens > 0). When the KV cache cannot hold a
// running request's next tokens, the policy's victim is preempted (recompute: blocks freed,
// generated tokens kept; or swap to host) and allocation retried.
//
// Admission (can it ever fit) is the engine's check; "how many tokens this step" is this
// class's (two-step capacity, TensorRT-LLM style).
// Thread-safety: none; the engine-core thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "sched/policy.h"
#include "core/request.h"
#include "core/scheduler_output.h"

namespace pagoda {

enum class PreemptionMode { kRecompute, kSwap };

struct SchedulerConfig {
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 256;
  int32_t max_model_len = 4096;
  bool chunked_prefill = true;              // off: a prompt must fit the budget whole
  int32_t long_prefill_token_threshold = 0;  // > 0: at most this many prompt tokens per request per step
  std::string policy = "fcfs";              // "fcfs" | "priority"
  PreemptionMode preemption = PreemptionMode::kRecompute;
};

struct SampledToken {
  std::string id;
  int32_t token = 0;
};

// What update_from_output() changed, for the engine to report.
struct StepUpdate {
  std::vector<Request*> new_tokens;  // requests that got a token this step (finished ones included)
  std::vector<Request*> finished;    // requests that finished this step (length / stop id / EOS)
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, KvCacheManager& kv);

  const SchedulerConfig& config() const { return config_; }
  // Queues a request (owned by the caller until it is finished and reported).
  void add_request(Request* r);
  // Finishes a request from outside: abort, stop string, error. Frees its KV at once. Unknown ids
  // are ignored.
  void finish_request(const std::string& id, RequestStatus status);

  SchedulerOutput schedule();
  // `sampled` holds each request's new tokens in order: one, or with speculative decoding the
  // accepted drafts and the target's own token (1 + accepted drafts of out's spec_tokens). The
  // stop checks run over every token; tokens after a stop are dropped. Rejected drafts' KV slots
  // are given back (KvCacheManager::trim) and every request's draft tokens are cleared.
  StepUpdate update_from_output(const SchedulerOutput& out, const std::vector<SampledToken>& sampled);
  // Speculative decoding: draft tokens for the next step (requests no longer running are ignored).
  // The next schedule() gives each request up to 1 + drafts tokens within the budget, capped so
  // that they cannot pass max_tokens or max_model_len.
  void update_draft_tokens(const std::vector<std::pair<std::string, std::vector<int32_t>>>& drafts);

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  // Tokens whose K/V the running requests hold in the cache (their num_computed_tokens).
  int64_t num_running_cached_tokens() const;
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  std::vector<std::string> running_ids() const;
  std::vector<std::string> waiting_ids() const;
  int64_t num_preemptions() const { return num_preemptions_; }
  const KvCacheManager& kv() const { return kv_; }

 private:
  struct Scheduled {
    Request* req;
    int32_t num_tokens;
    std::vector<BlockId> new_blocks;
    bool is_new;           // runner does not know it (first time, or after recompute preemption)
    bool swapped_in;
    int32_t num_spec = 0;  // of num_tokens: draft tokens (the request's first num_spec spec_token_ids)
  };
  void insert_waiting(Request* r);
  // Appends the KV tiers' copies of the last KV call (spills, fills) to the step's copy lists, in
  // the order they were made.
  void drain_tier_copies(SchedulerOutput& out);
  bool admissible(const Request& r) const;
  // Preempts running_[index]; removes it from `scheduled` if it was scheduled this step.
  void preempt(size_t index, std::vector<Scheduled>& scheduled, int32_t& budget, SchedulerOutput& out);
  int32_t tokens_wanted(const Request& r, int32_t budget) const;
  // Draft tokens of r the next step may verify: its drafts, capped so that accepting all of them
  // plus the target's token stays within max_tokens and max_model_len.
  int32_t spec_allowed(const Request& r) const;

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::unique_ptr<SchedulingPolicy> policy_;
  std::vector<Request*> waiting_;  // in service order
  std::vector<Request*> running_;  // in admission order
  std::unordered_map<std::string, Request*> by_id_;
  std::unordered_map<std::string, bool> known_to_runner_;
  std::vector<std::string> finished_since_last_step_;
  // Requests whose block table lost tail blocks (trimmed drafts): the runner gets it whole next.
  std::unordered_map<std::string, bool> table_trimmed_;
  int64_t num_preemptions_ = 0;
  std::unordered_set<const Request*> admitted_this_step_;
};

}  // namespace pagoda
