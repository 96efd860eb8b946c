// Helpers of the engine tests, shared by the CPU tier (tests/model) and the GPU tier (tests/gpu).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_config.h"

namespace pagoda::test {

// Every output of a stream: tokens and text per sample index, finish reason, cached prompt tokens.
struct Collected {
  std::map<int, std::vector<int32_t>> tokens;
  std::map<int, std::string> text;
  std::map<int, std::string> finish;
  std::map<int, int32_t> cached;
};
inline Collected collect(RequestStream& s) {
  Collected c;
  while (auto o = s.next()) {
    for (const auto& t : o->tokens) c.tokens[o->index].push_back(t.token);
    c.text[o->index] += o->text;
    if (o->finished) {
      c.finish[o->index] = o->finish_reason;
      c.cached[o->index] = o->num_cached_tokens;
    }
  }
  return c;
}

// Prompt logprobs of every sample of a stream (RequestOutput::prompt_logprobs, by sample index),
// and its generated tokens.
struct CollectedPromptLogprobs {
  std::map<int, std::vector<RowLogprobs>> prompt;
  std::map<int, std::vector<int32_t>> tokens;
  std::map<int, int32_t> cached;
  int outputs_with_prompt_logprobs = 0;
};
inline CollectedPromptLogprobs collect_prompt_logprobs(RequestStream& s) {
  CollectedPromptLogprobs c;
  while (auto o = s.next()) {
    for (const auto& t : o->tokens) c.tokens[o->index].push_back(t.token);
    if (!o->prompt_logprobs.empty()) {
      ++c.outputs_with_prompt_logprobs;
      c.prompt[o->index] = o->prompt_logprobs;
    }
    if (o->finished) c.cached[o->index] = o->num_cached_tokens;
  }
  return c;
}
// 64 MiB of KV, 64 sequences, 512-token budget and context, 2 threads.
inline EngineConfig base_engine_config(const std::string& model) {
  EngineConfig c;
  c.model = model;
  c.threads = 2;
  c.max_model_len = 512;
  c.kv_cache_memory = int64_t{64} << 20;
  c.scheduler.max_num_seqs = 64;
  c.scheduler.max_num_batched_tokens = 512;
  c.plan_cache = "off";  // tests that exercise the plan cache name a directory of their own
  return c;
}

// A greedy request for `max_tokens` tokens that ignores EOS (a fixed-length token stream to compare).
inline GenerateRequest greedy_request(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerateRequest g;
  g.prompt_ids = std::move(prompt);
  g.sampling.temperature = 0;
  g.stop.max_tokens = max_tokens;
  g.stop.ignore_eos = true;
  return g;
}

// Request i's prompt: 1-60 ids spread over the vocabulary (mixed lengths for batching tests).
inline std::vector<int32_t> mixed_prompt(int i, int64_t vocab) {
  std::vector<int32_t> p;
  const int len = 1 + (i * 37) % 60;
  for (int k = 0; k < len; ++k) p.push_back(static_cast<int32_t>((i * 7919 + k * 104729) % (vocab - 10) + 5));
  return p;
}

}  // namespace pagoda::test
