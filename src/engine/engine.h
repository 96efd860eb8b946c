// The engine's public interface: the one header the service layer (server/) and the command line
// include. It depends on plain value types (common/, core/) only: the engine's internals (its
// configuration, the model, the memory plan) are forward-declared, and the service layer reads
// what it needs of them through info() (tests/unit/include_graph_test.py holds server/ to this). Thread-safe: submit(), cancel() and stats() may be called from any thread; outputs are
// delivered through per-request streams.
//
//   auto engine = Engine::create(config);            // loads the model, plans memory, starts the loop
//   auto stream = engine->submit(request);           // validation errors are returned here
//   while (auto out = stream->next()) { ... }        // incremental: token ids, text delta, logprobs
//
// A background loop runs step() = schedule -> batch -> forward -> sample -> update -> emit. A
// failure inside one request finishes that request with an error; the loop goes on.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "core/kv_tier_stats.h"
#include "core/request.h"
#include "core/token_constraint.h"
#include "core/token_logprob.h"
#include "engine/executor_decorator.h"

namespace pagoda {

struct EngineConfig;
struct MemoryPlan;
struct ModelConfig;
class Tokenizer;
class EngineLoop;
class EnginePlan;
namespace grammar {
struct ConstraintSource;
class ConstraintCache;
class TokenVocabulary;
}  // namespace grammar
// The tokenizer as the grammar engine sees it: each token's bytes (special tokens: none) and the
// stop ids the engine ends generation on.
std::shared_ptr<const grammar::TokenVocabulary> make_token_vocabulary(const Tokenizer& tok);

struct GenerateRequest {
  std::string request_id;              // empty: the engine assigns "req-N"
  std::vector<int32_t> prompt_ids;     // used if non-empty ...
  std::string prompt;                  // ... else this text is tokenized
  bool add_special_tokens = true;      // BOS for text prompts, as the model's tokenizer says
  bool parse_special_tokens = false;   // recognise special tokens written in the text (chat prompts)
  SamplingParams sampling;
  StopParams stop;                     // max_tokens < 0 (default -1 here): up to the model length
  int32_t n = 1;                       // parallel samples sharing the prompt's KV blocks
  int32_t priority = 0;
  bool skip_special_tokens = true;     // in the returned text
};

struct TokenOutput {
  int32_t token = 0;
  float logprob = 0;                   // if requested
  std::vector<TokenLogprob> top;       // top-N, if requested
};

struct RequestOutput {
  std::string request_id;
  int32_t index = 0;                   // sample index (n > 1)
  std::vector<TokenOutput> tokens;     // tokens generated since the previous output
  // GenerateRequest::sampling.prompt_logprobs >= 0: the raw model log-probabilities of prompt
  // tokens 1..n-1 (prompt token 0 has none: OpenAI's null), with the token's rank and the top N,
  // in the output of the first generated token (empty in every other output).
  std::vector<RowLogprobs> prompt_logprobs;
  std::string text;                    // text since the previous output (UTF-8, never split)
  bool finished = false;
  std::string finish_reason;           // "stop", "length", "abort", "error"
  std::string error;                   // message when finish_reason == "error"
  std::string stop_reason;             // the matched stop string, if any
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_tokens = 0;       // prompt tokens served by the prefix cache
  int32_t num_output_tokens = 0;       // generated so far
  // Engine-clock timestamps (seconds): arrival, first scheduled, first token, this output.
  double arrival_time = 0, first_scheduled_time = 0, first_token_time = 0, time = 0;
};

// Outputs of one submitted request (all its n samples), in order.
class RequestStream {
 public:
  explicit RequestStream(std::string id, int32_t n) : id_(std::move(id)), remaining_(n) {}
  const std::string& id() const { return id_; }
  // Blocks for the next output; nullopt once every sample has finished and all were read.
  std::optional<RequestOutput> next();
  // As next(), waiting at most `timeout`; nullopt on timeout too (check done()).
  std::optional<RequestOutput> next_for(std::chrono::milliseconds timeout);
  // As next() without waiting: nullopt when nothing is queued (check done()).
  std::optional<RequestOutput> try_next();
  bool done() const;
  // Asynchronous consumers (the server): `fn` is called (from the engine thread, or from this
  // call if outputs are already queued) each time an output is queued. It must be cheap and must
  // not block or call back into this stream's blocking methods: post work and return.
  void set_notify(std::function<void()> fn);

  // Engine side.
  void push(RequestOutput out);

 private:
  std::string id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  int32_t remaining_;  // samples not yet finished
  std::function<void()> notify_;
};

struct EngineStats {
  int64_t num_running = 0, num_waiting = 0;
  double kv_cache_usage = 0;
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;
  // KV tiers: hits per tier (tokens), spills, disk rejections, swaps; host-tier blocks in all and
  // free (held by no request and no copy of the step), disk-tier bytes in use.
  KvTierStats kv_tier;
  int64_t kv_host_tier_blocks = 0, kv_host_tier_free_blocks = 0, kv_disk_tier_bytes = 0;
  int64_t num_preemptions = 0;
  int64_t prompt_tokens_total = 0, generation_tokens_total = 0;
  int64_t steps = 0;
  int64_t num_kv_blocks = 0, free_kv_blocks = 0;
  // KV memory utilisation, summed over the steps that ended with requests running: tokens the
  // running requests hold in the cache, and tokens of the blocks in use. The ratio of two
  // snapshots' differences is the utilisation over the steps between them (`bench throughput`).
  int64_t kv_util_steps = 0;
  double kv_tokens_held_sum = 0, kv_tokens_allocated_sum = 0;
  // Accelerator memory in use / total (all processes; NVML or cudaMemGetInfo), 0 on the CPU.
  // Refreshed every 64 steps.
  int64_t device_memory_used = 0, device_memory_total = 0;
  // Speculative decoding (vLLM's spec-decode counters): verifications with drafts, drafts
  // verified, drafts accepted, accepted drafts per draft position.
  int64_t spec_num_drafts = 0, spec_num_draft_tokens = 0, spec_num_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_position;
};

// What a client of the engine needs to know of the model and the configuration it runs.
struct EngineInfo {
  std::string model_path;       // EngineConfig::model: the .gguf file or Hugging Face directory
  std::string model_name;       // model_name()
  std::string architecture;     // e.g. "llama", "qwen2", "gemma3"
  std::string device;           // "cpu" or "cuda:N"
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;    // tokens per sequence (prompt + output)
  int64_t max_num_seqs = 0;     // sequences per step
};

class Engine {
 public:
  // `decorate` wraps the executor (tests: fault injection).
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& config, const ExecutorDecorator& decorate = {});
  ~Engine();

  // Validates (parameters, prompt length against the model and the KV cache), tokenizes and
  // queues the request. Errors: kInvalidArgument / kOutOfRange with the numbers.
  Result<std::shared_ptr<RequestStream>> submit(GenerateRequest request);
  // Cancels a request (all its samples); its KV blocks are freed at the next step boundary.
  void cancel(const std::string& request_id);
  EngineStats stats() const;

  // ---- Model-side helpers for the service layer (thread-safe, any thread) ----
  // Token ids of `text`; add_special adds BOS/EOS as the tokenizer says. Special-token text in
  // `text` (e.g. "<|im_start|>") is recognized when parse_special is set (rendered chat prompts).
  std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special = false) const;
  // Text of `ids` (valid UTF-8; out-of-range ids skipped).
  std::string detokenize(std::span<const int32_t> ids, bool skip_special = false) const;
  // The bytes one token contributes inside a text (may be partial UTF-8), for logprob entries.
  std::string token_piece(int32_t id) const;
  // Renders the model's chat template (Hugging Face apply_chat_template semantics) over
  // `messages` (a JSON array of {role, content, ...}); `tools` null for none. kUnimplemented
  // when the model has no chat template; kInvalidArgument for template errors.
  // extra_context (chat_template_kwargs): an object of extra template variables (e.g.
  // enable_thinking), or null.
  Result<std::string> apply_chat_template(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                          const nlohmann::ordered_json& tools = nullptr,
                                          const nlohmann::ordered_json& extra_context = nullptr) const;
  bool has_chat_template() const;
  // The chat template's Jinja source (empty without one): tool-call formats are chosen from it.
  std::string chat_template_source() const;
  // A short model name: the model file or directory name without a .gguf extension.
  std::string model_name() const;
  // Called on the engine thread after each step that ran the model, with the number of tokens
  // in that step's batch (prefill + decode). Set it before submitting traffic; cheap, no blocking.
  void set_step_observer(std::function<void(int64_t num_tokens)> fn);

  // Structured outputs: the constraint compiled against this model's vocabulary (cached by its
  // source text; the first call builds the vocabulary index). Errors: kInvalidArgument saying
  // what is wrong with the schema / regex / grammar.
  Result<std::shared_ptr<const TokenConstraintSpec>> constraint(const grammar::ConstraintSource& source) const;
  grammar::ConstraintCache& constraint_cache() const;

  EngineInfo info() const;

  // The engine's internals, for the command line and tests (include their headers to use them).
  const ModelConfig& model_config() const;
  const Tokenizer& tokenizer() const;
  std::shared_ptr<const Tokenizer> tokenizer_ptr() const;
  const MemoryPlan& memory_plan() const;
  const EngineConfig& config() const;
  int64_t max_model_len() const;

  // Stops accepting, cancels everything in flight, joins the loop.
  void shutdown();

 private:
  explicit Engine(std::unique_ptr<EngineLoop> loop);
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<EnginePlan> plan_;  // the plan of this start (engine/engine_plan.h); may write on a thread
  mutable std::once_flag constraints_once_;
  mutable std::unique_ptr<grammar::ConstraintCache> constraints_;
};

}  // namespace pagoda
