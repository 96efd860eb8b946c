// One OpenAI generation request in flight (/v1/completions or /v1/chat/completions): the engine
// streams of its prompts (n samples each), turned into the OpenAI response: SSE chunks as outputs
// arrive (stream=true), or one JSON body at the end.
//
// Choice index = prompt index x n + sample index (OpenAI's order); with best_of > n the samples
// of a prompt are ranked and the best n returned. Usage counts each prompt once and every
// sample's generated tokens. Per finished sequence it records the latency metrics; at
// the end it reports the tokens used to its admission ticket. abort() (the client left) cancels
// the engine requests; destruction does too if they are still running.
//
// Thread-safety: attach/poll/abort on one strand (the connection's); the wake callback is called
// from the engine thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/tool_call_parser.h"
#include "engine/engine.h"
#include "server/access_log.h"
#include "server/http_message.h"
#include "server/serving_context.h"

namespace pagoda::server {

struct JobSpec {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;         // stream_options.continuous_usage_stats: usage on every chunk
  int32_t n = 1;                         // choices returned per prompt
  // Samples generated per prompt (engine n); > n (not streaming): the n with the highest mean
  // token logprob are returned, in that order (docs/decisions.md#d38). Usage counts them all.
  int32_t best_of = 1;
  int32_t logprobs = -1;                 // -1 none; else top-N (chat: top_logprobs)
  bool tokens_as_ids = false;            // return_tokens_as_token_ids: logprob tokens as "token_id:N"
  std::string id;                        // chatcmpl-... / cmpl-...
  std::string model;
  int64_t created = 0;
  std::vector<std::string> echo_texts;   // completions with echo: per prompt
  // Prompt logprobs (the engine's RequestOutput::prompt_logprobs): echo_logprobs puts them ahead
  // of the completion's own in choices[].logprobs (first token null, OpenAI's legacy echo);
  // prompt_logprobs >= 0 adds vLLM's prompt_logprobs (per choice on completions, top level on
  // chat: [null, {token_id: {logprob, rank, decoded_token}}, ...], the prompt token plus the top N).
  bool echo_logprobs = false;
  int32_t prompt_logprobs = -1;
  std::vector<std::vector<int32_t>> prompt_ids;  // per prompt, when either is asked for
  AccessLogEntry access;                 // remote, method, path: the access line written at the end
  double start = 0;                      // ServingContext::now() when the request arrived
  // Chat with tools (tool_choice other than none): tool calls are parsed out of the text in this
  // format; message.tool_calls / streaming tool_calls deltas, finish_reason "tool_calls".
  const api::ToolCallFormat* tool_format = nullptr;
  bool parallel_tool_calls = true;
};

class GenerationJob : public AsyncBody {
 public:
  // `streams[i]` / `engine_ids[i]` belong to prompt i.
  GenerationJob(ServingContext& ctx, JobSpec spec, std::vector<std::shared_ptr<RequestStream>> streams,
                std::vector<std::string> engine_ids, std::unique_ptr<ServingContext::Ticket> ticket);
  ~GenerationJob() override;

  bool streaming() const override { return spec_.stream; }
  void attach(std::function<void()> wake) override;
  Poll poll() override;
  void abort() override;

 private:
  struct Choice {
    std::string text;
    nlohmann::ordered_json logprobs;     // accumulated (non-streaming)
    int32_t num_output_tokens = 0;
    size_t text_offset = 0;              // completions logprobs text_offset
    bool started = false, finished = false;
    std::string finish_reason;
    SequenceTimings timings;
    std::unique_ptr<api::ToolCallParser> tools;  // spec_.tool_format set
    double logprob_sum = 0;              // of the sampled tokens (best_of ranking)
    nlohmann::ordered_json prompt_logprobs;  // vLLM's, once the first output brought them (else null)
    bool prompt_logprobs_done = false;
  };
  // The samples returned, in choice order: all of them, or per prompt the best n of best_of.
  std::vector<size_t> returned_samples() const;
  std::string token_label(int32_t id, const std::string& piece) const;
  nlohmann::ordered_json chunk_usage(size_t prompt, const Choice& c) const;
  void handle(size_t prompt, RequestOutput& out, std::string* sse);
  nlohmann::ordered_json chunk_head() const;
  nlohmann::ordered_json logprobs_json(const RequestOutput& out, Choice& c) const;
  // The legacy logprobs object of prompt `prompt`'s tokens (token 0: null), offsets from 0.
  nlohmann::ordered_json echo_logprobs_json(size_t prompt, const RequestOutput& out) const;
  // vLLM's prompt_logprobs list of prompt `prompt` (entry 0: null).
  nlohmann::ordered_json vllm_prompt_logprobs(size_t prompt, const RequestOutput& out) const;
  nlohmann::ordered_json usage_json() const;
  // Streaming: the chunks for a parsed delta (content, then one chunk per tool-call delta).
  void tool_chunks(size_t index, const api::ParsedDelta& d, const nlohmann::ordered_json& usage, std::string* sse) const;
  std::string final_body() const;
  void finish_all();

  ServingContext& ctx_;
  JobSpec spec_;
  std::vector<std::shared_ptr<RequestStream>> streams_;
  std::vector<std::string> engine_ids_;
  std::unique_ptr<ServingContext::Ticket> ticket_;
  std::vector<Choice> choices_;
  std::vector<int32_t> prompt_tokens_, cached_tokens_;
  size_t num_finished_ = 0;
  bool aborted_ = false, complete_ = false;
  std::string error_;                   // first error of a sequence (non-streaming: a 500)
};

// JSON text with invalid UTF-8 replaced (token pieces may be partial characters).
std::string dump_json(const nlohmann::ordered_json& j);
std::string dump_json(const nlohmann::json& j);

}  // namespace pagoda::server
