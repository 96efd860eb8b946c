// EngineCore: the single-threaded heart of the engine. step() = schedule -> run the model ->
// sample -> update requests -> report. Owns the scheduler, the KV cache manager and storage, and
// the model runner. Engine (engine.h) wraps it with a thread, tokenization and text output;
// tests drive it directly.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine_config.h"
#include "engine/executor_decorator.h"
#include "kv/kv_cache_manager.h"
#include "model/draft_head.h"
#include "model/model_loader.h"
#include "runtime/cuda_executor.h"
#include "runtime/draft_head_device_memory.h"
#include "runtime/memory_plan.h"
#include "runtime/model_runner.h"
#include "sched/scheduler.h"

namespace pagoda {

struct CoreOutput {
  std::string id;
  bool has_token = false;
  SampleResult sample;              // the new token (if has_token)
  // Prompt logprobs (SamplingParams::prompt_logprobs >= 0): prompt tokens 1..n-1, in the output
  // of the first generated token.
  std::vector<RowLogprobs> prompt_logprobs;
  bool finished = false;
  RequestStatus status = RequestStatus::kRunning;
  std::string error;
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_tokens = 0;
  int32_t num_output_tokens = 0;
  double first_scheduled_time = 0;  // engine clock; 0 until scheduled
};

struct CoreStats {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;      // prompt tokens computed (prefix hits excluded)
  int64_t generation_tokens = 0;  // tokens sampled
  int64_t last_step_tokens = 0;   // tokens in the last forward batch
  // Wall time of step()'s phases, seconds: scheduling, the runner (inputs, the forward pass and
  // sampling, waiting for the device), the scheduler's update and the outputs.
  double schedule_s = 0, execute_s = 0, update_s = 0;
  // Speculative decoding (vLLM's spec-decode counters): requests verified with drafts, drafts
  // verified, drafts accepted, and accepted drafts per draft position.
  int64_t spec_num_drafts = 0, spec_num_draft_tokens = 0, spec_num_accepted_tokens = 0;
  int64_t spec_num_rejections = 0;  // verifications that rejected a draft
  std::vector<int64_t> spec_accepted_per_position;
};

// The memory-plan input of `config` for a model of `mc` whose weights take `weight_bytes` (host
// terms; EngineCore::create adds the CUDA executor's own terms on a GPU).
MemoryPlanInput memory_plan_input(const EngineConfig& config, const ModelConfig& mc, int64_t weight_bytes);
// The memory plan's verdict before anything large is allocated (the RoPE table, packed weights,
// the KV cache): the plan's own error (e.g. "max_model_len N needs ...") when it cannot fit.
Status precheck_memory_plan(const EngineConfig& config, const ModelConfig& mc, int64_t weight_bytes);

// Blocks a draft model's cache holds beyond one per target block: every sequence's lookahead.
int64_t draft_lookahead_blocks(const EngineConfig& config);

// The device memory of draft head `h` run on the target's device (--spec-device-head) for
// `config`: compute dtype `act`, passes of up to max_num_batched_tokens (or max_num_seqs) rows with
// a logits row per sequence; `target_embedding`: the target's token embedding (shared when the
// head's is the same tensor).
DraftHeadDeviceMemory device_draft_head_memory(const DraftHead& h, const Tensor& target_embedding, DType act,
                                               const EngineConfig& config);
// Counts such a head in `in` as a draft model is counted: its weights, pass buffers and the
// lookahead (and null) blocks of its cache fixed, its cache a block per target block.
void add_device_draft_head(MemoryPlanInput& in, const DraftHeadDeviceMemory& m, const EngineConfig& config);

// Host-tier blocks of the KV cache for `config` (kv_tiers) under `plan` (its block bytes and
// model length): the host bytes in blocks, or, with a disk tier, at least one sequence's blocks.
int64_t kv_host_tier_blocks(const EngineConfig& config, const MemoryPlan& plan);

class EngineCore {
 public:
  ~EngineCore();
  // Plans memory, allocates the KV cache and builds the scheduler and runner over `model`.
  // `decorate` wraps the executor (tests: fault injection).
  static Result<std::unique_ptr<EngineCore>> create(const EngineConfig& config, LoadedModel model, ThreadPool& pool,
                                                    const ExecutorDecorator& decorate = {});

  // Admission: validates lengths and ids, clamps max_tokens. The request starts waiting.
  Status add_request(std::unique_ptr<Request> r);
  // Finishes a request (abort by default); no-op for unknown ids.
  void finish(const std::string& id, RequestStatus status = RequestStatus::kFinishedAborted, std::string error = {});
  // One engine iteration; returns outputs of requests that got a token or finished (including
  // those finished through finish() since the last step). Never throws: when the forward pass
  // fails, the requests of its batch finish with kFinishedError and the error; when anything
  // else in the step fails, every request does. The core keeps serving new requests either way.
  std::vector<CoreOutput> step();
  // Finishes every request with kFinishedError and `error` and returns their outputs (with those
  // finished since the last step); drops the prefix cache.
  std::vector<CoreOutput> fail_all(const std::string& error);

  bool has_unfinished() const { return scheduler_->has_unfinished(); }
  const Scheduler& scheduler() const { return *scheduler_; }
  const KvCacheManager& kv_manager() const { return *kv_manager_; }
  const MemoryPlan& memory_plan() const { return plan_; }
  const ModelConfig& model_config() const { return model_.config; }
  const LoadedModel& model() const { return model_; }
  bool speculative() const { return runner_->proposer() != nullptr; }
  // Benchmarks (`pagoda bench spec`): replace the runner's proposer (null: speculation off) or
  // take it back, between runs (no request in flight; checked). A draft-model proposer released
  // here still runs on the core's draft model, which stays loaded.
  void set_speculation(const SpeculativeConfig& config, std::unique_ptr<Proposer> proposer);
  std::unique_ptr<Proposer> release_proposer();
  int64_t max_model_len() const { return max_model_len_; }
  const CoreStats& stats() const { return stats_; }
  ModelRunner& runner() { return *runner_; }
  ModelExecutor& executor() { return *executor_; }
  const Request* find(const std::string& id) const;
  size_t num_requests() const { return requests_.size(); }

  // Seconds since the core was created (the engine clock).
  double now() const;

 private:
  EngineCore() = default;
  class HostBlockIo;
  CoreOutput snapshot(const Request& r) const;
  // The proposer of config_.speculative (a draft model is loaded into draft_model_).
  // `co`: the target's CUDA executor options (a draft model on CUDA takes the same).
  Result<std::unique_ptr<Proposer>> make_proposer(const CudaExecutorOptions& co, bool cuda);
  // step() without its guard: appends to `outputs`; may throw.
  void step_into(std::vector<CoreOutput>& outputs);

  EngineConfig config_;
  LoadedModel model_;
  LoadedModel draft_model_;  // speculative method "draft" (outlives the runner's proposer)
  // Speculative methods "eagle3" / "mtp": the head, loaded before the memory plan (which counts
  // it when it runs on the device); make_proposer hands it to the proposer.
  std::unique_ptr<DraftHead> draft_head_;
  MemoryPlan plan_;
  int64_t max_model_len_ = 0;
  ThreadPool* pool_ = nullptr;
  std::unique_ptr<ModelExecutor> executor_;
  std::unique_ptr<HostBlockIo> host_io_;  // the disk tier's view of the executor (before kv_manager_)
  std::unique_ptr<KvCacheManager> kv_manager_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  std::unordered_map<std::string, double> first_scheduled_;
  // Prompt logprobs gathered across prefill chunks until the first token is emitted.
  std::unordered_map<std::string, std::vector<RowLogprobs>> prompt_logprobs_;
  std::vector<CoreOutput> pending_finished_;  // finished outside step(), reported by the next step
  CoreStats stats_;
  double t0_ = 0;
};

}  // namespace pagoda
