// A request as the scheduler and the KV cache manager see it: token ids and counters, no text.
// The engine owns Request objects; the scheduler holds pointers while they are waiting or
// running. Not thread-safe: only the engine-core thread touches them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/block_ids.h"
#include "core/sampling_params.h"

namespace pagoda {

enum class RequestStatus {
  kWaiting,
  kRunning,
  kPreempted,         // waiting again, KV freed (recompute) or swapped to host
  kFinishedStopped,   // EOS, a stop token or a stop string
  kFinishedLength,    // max_tokens or the model's maximum length
  kFinishedAborted,   // cancelled by the client
  kFinishedError,     // failed (reported with a message)
};
bool is_finished(RequestStatus s);
const char* finish_reason_name(RequestStatus s);  // "stop", "length", "abort", "error", ""

struct StopParams {
  int32_t max_tokens = 16;          // cap on generated tokens (the engine clamps to the model length)
  int32_t min_tokens = 0;           // EOS and stop ids ignored before this many tokens
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;    // stop strings (matched on text by the output processor)
  bool include_stop_str_in_output = false;
};

struct Request {
  std::string id;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  SamplingParams sampling;
  StopParams stop;
  std::vector<int32_t> eos_token_ids;  // the model's EOS/EOT ids (ignored when ignore_eos)
  int32_t priority = 0;                // lower value is served first (vLLM semantics)
  double arrival_time = 0;             // seconds, engine clock
  uint64_t arrival_seq = 0;            // tie-break: submission order
  uint64_t seed = 0;                   // sampling seed (given or drawn at submission)

  RequestStatus status = RequestStatus::kWaiting;
  int32_t num_computed_tokens = 0;     // tokens whose K/V are in the cache
  int32_t num_cached_prompt_tokens = 0;  // prefix-cache hit when first scheduled
  int32_t num_preemptions = 0;
  bool swapped_out = false;
  // n > 1: siblings wait until their leader's prompt is in the cache, then share its blocks
  // through the prefix cache. Empty for the leader and for n = 1.
  std::string prefill_leader;

  // Prefix-cache hashes of the full blocks of all_tokens(), extended as tokens arrive.
  std::vector<BlockHash> block_hashes;

  // Speculative decoding: draft tokens proposed after the last step, to be verified by the next
  // one. They are not part of all_tokens() (nor hashed, nor stop-checked) until the target model
  // accepts them; preemption drops them.
  std::vector<int32_t> spec_token_ids;

  int32_t num_prompt_tokens() const { return static_cast<int32_t>(prompt.size()); }
  int32_t num_tokens() const { return static_cast<int32_t>(prompt.size() + output.size()); }
  int32_t num_tokens_with_spec() const { return num_tokens() + static_cast<int32_t>(spec_token_ids.size()); }
  int32_t token_at(int32_t i) const { return i < num_prompt_tokens() ? prompt[i] : output[i - num_prompt_tokens()]; }
  std::vector<int32_t> all_tokens() const;
  bool finished() const { return is_finished(status); }
};

}  // namespace pagoda
