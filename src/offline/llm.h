// Offline generation: vLLM's `LLM` class in C++ (generate a batch of prompts, chat with the model's
// template, stream deltas), over the same Engine, scheduler and KV cache as `pagoda serve`. The
// Python package (python/pagoda_binding.cc) is a thin binding of this file.
//
//   auto llm = Llm::create(config);                       // loads the model ("auto" device chosen)
//   auto out = llm->generate({Prompt::of_text("Hello")}, {GenerationParams{}});
//   out->at(0).outputs[0].text
//
// A batch is submitted to the engine at once (BatchRun), so its requests decode together under
// continuous batching; no request waits for another to finish.
//
// Thread-safety: an Llm may be used from several threads at once (the Engine is thread-safe;
// request ids come from an atomic counter). A GenerationRun belongs to one consumer thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/engine.h"
#include "engine/engine_config.h"
#include "offline/batch_run.h"

namespace pagoda::offline {

// vLLM's SamplingParams: how a prompt is sampled and when its generation stops. Checked by the
// engine at submission (Engine::submit); the defaults are vLLM's (temperature 1, max_tokens 16).
struct GenerationParams {
  SamplingParams sampling;          // temperature, top_k / top_p / min_p, penalties, seed, logprobs
  StopParams stop;                  // max_tokens (< 0: up to the model length), min_tokens,
                                    // stop strings and token ids, ignore_eos
  int32_t n = 1;                    // samples of the prompt (they share its KV blocks)
  bool skip_special_tokens = true;  // in the returned text
};

// One prompt: token ids (used as given) or text (tokenized by the model's tokenizer).
struct Prompt {
  std::string text;
  std::vector<int32_t> token_ids;     // non-empty: used instead of `text`
  bool add_special_tokens = true;     // text: BOS (and the like) as the tokenizer adds them
  bool parse_special_tokens = false;  // text: special tokens written in it are recognised

  static Prompt of_text(std::string text) { return Prompt{std::move(text), {}, true, false}; }
  static Prompt of_ids(std::vector<int32_t> ids) { return Prompt{{}, std::move(ids), false, false}; }
};

// vLLM's CompletionOutput: one sample of a request.
struct Sample {
  int32_t index = 0;                  // sample index in [0, n)
  std::string text;                   // UTF-8 (whole characters only)
  std::vector<int32_t> token_ids;
  std::vector<TokenOutput> logprobs;  // per token (chosen and top-N), when SamplingParams::logprobs >= 0
  double cumulative_logprob = 0;      // sum of the chosen tokens' logprobs (when requested)
  std::string finish_reason;          // "stop" | "length" | "abort" | "error"; "" while running
  std::string stop_reason;            // the stop string that ended it, if any
  std::string error;                  // finish_reason "error": the engine's message
};

// vLLM's Logprob, for one token of one prompt position (SamplingParams::prompt_logprobs).
struct PromptLogprob {
  int32_t token = 0;
  float logprob = 0;     // log-softmax of the raw model row (before any sampling transform)
  int32_t rank = 0;      // 1 + the tokens of the row with a greater logprob (ties share the better rank)
  std::string text;      // the token's bytes (Engine::token_piece; may be part of a UTF-8 character)
};

// vLLM's RequestOutput: one prompt's result (generate), or one delta of it (streaming).
struct Completion {
  std::string request_id;
  std::string prompt;                   // the prompt text ("" for token prompts; chat: the rendered template)
  std::vector<int32_t> prompt_token_ids;
  std::vector<Sample> outputs;          // generate: all n samples by index; streaming: the one that advanced
  bool finished = false;                // every sample of the request has finished
  int32_t num_cached_tokens = 0;        // prompt tokens served by the prefix cache
  // vLLM's prompt_logprobs, when SamplingParams::prompt_logprobs = N >= 0 (else nullopt): one list
  // per prompt token; list 0 is empty (the first token has no context), list i holds prompt token
  // i (as scored at position i - 1) first, then the row's top N that are not it. Streaming: in
  // the request's first delta only (nullopt in later ones).
  std::optional<std::vector<std::vector<PromptLogprob>>> prompt_logprobs;
  // Engine-clock timestamps (seconds): arrival, first token, last output.
  double arrival_time = 0, first_token_time = 0, last_token_time = 0;
};

// The requests of one generate / stream call, in flight. Destroying it cancels what is unfinished.
class GenerationRun {
 public:
  // The next delta: a Completion whose outputs[0] holds the text and tokens one sample produced
  // since its previous delta (finish_reason set on its last). Waits at most `timeout`; nullopt
  // on timeout or once done().
  std::optional<Completion> next_delta(std::chrono::milliseconds timeout);
  bool done() const { return batch_->done(); }
  void cancel() { batch_->cancel(); }
  // Reads the run to its end and returns one Completion per prompt, in prompt order, samples by
  // index. `interrupted` is polled about every 50 ms, outputs arriving or not; when it returns true the run
  // is cancelled and kCancelled returned. A sample that failed in the engine: kInternal with its
  // message.
  Result<std::vector<Completion>> collect(const std::function<bool()>& interrupted = {});
  const std::string& request_id(size_t i) const { return batch_->request_id(i); }
  size_t size() const { return batch_->size(); }

 private:
  friend class Llm;
  GenerationRun(const Engine& engine, std::unique_ptr<BatchRun> batch, std::vector<Completion> heads,
                std::vector<int32_t> n, std::vector<bool> logprobs, std::vector<bool> prompt_logprobs);
  // Whether `out` (of request i) brings the prompt logprobs still to be delivered.
  bool carries_prompt_logprobs(size_t i, const RequestOutput& out) const;
  // Completion::prompt_logprobs of request i from the engine output that carries them.
  std::vector<std::vector<PromptLogprob>> prompt_logprobs_of(size_t i, const RequestOutput& out) const;
  const Engine& engine_;  // token texts of the prompt logprobs
  std::unique_ptr<BatchRun> batch_;
  // Per request: id, prompt and prompt ids (no outputs); samples; samples not finished; logprobs
  // asked; prompt logprobs asked and not yet delivered by next_delta.
  std::vector<Completion> heads_;
  std::vector<int32_t> n_, unfinished_;
  std::vector<bool> logprobs_, prompt_logprobs_pending_;
};

class Llm {
 public:
  // Loads the model: Engine::create(config) after choosing config.device when it is "auto"
  // (engine/device_choice.h; the choice is logged). Errors: kInvalidArgument for a max_model_len
  // beyond the model's context; the engine's (file, memory plan, ...).
  static Result<std::unique_ptr<Llm>> create(EngineConfig config);

  // Tokenizes the text prompts and submits every prompt at once. `params` holds one entry for
  // all prompts or one per prompt. Errors: kInvalidArgument (sizes, parameters, prompt too long:
  // "request I: ..."), nothing submitted then.
  Result<std::unique_ptr<GenerationRun>> start(const std::vector<Prompt>& prompts,
                                               const std::vector<GenerationParams>& params);
  // start() + GenerationRun::collect().
  Result<std::vector<Completion>> generate(const std::vector<Prompt>& prompts, const std::vector<GenerationParams>& params,
                                           const std::function<bool()>& interrupted = {});

  // A conversation (JSON array of {role, content, ...}) as the server's /v1/chat/completions
  // prompts it: the model's chat template rendered (add_generation_prompt, tools, extra template
  // variables: null for none), tokenized with special tokens recognised and nothing added (the
  // template writes BOS). kUnimplemented when the model has no chat template.
  Result<Prompt> chat_prompt(const nlohmann::ordered_json& messages, bool add_generation_prompt = true,
                             const nlohmann::ordered_json& tools = nullptr,
                             const nlohmann::ordered_json& template_kwargs = nullptr) const;

  Engine& engine() { return *engine_; }
  const Engine& engine() const { return *engine_; }

 private:
  explicit Llm(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {}
  std::unique_ptr<Engine> engine_;
  std::atomic<uint64_t> next_request_id_{0};
};

}  // namespace pagoda::offline
