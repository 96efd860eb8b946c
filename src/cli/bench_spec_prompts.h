// `pagoda bench spec --spec-method ...`: a real proposer (n-gram prompt lookup or a draft model)
// against plain decoding on text prompts, in one process on one engine core.
//
// The requests are the first B prompts of --prompt-file (cycled; optionally wrapped in the
// target's chat template), greedy, at most --output-len tokens each (stopping at EOS as plain
// decoding does, so both runs do the same work); round r takes prompts r*B .. r*B+B-1. Per round: a plain run and one speculative run per
// configuration (method x k in --spec-tokens), the order reversed every other round so that a
// drift of the machine's load falls on both sides. Every speculative run's tokens are compared
// with the plain run's of its round (greedy: they must be equal). Reported per configuration:
// decode tok/s of both (tokens after each request's first over the time after the batch's first
// step), the speedup, the process CPU seconds per generated token (steadier than wall time on a
// shared machine), vLLM's acceptance and the acceptance per draft position, tokens per
// verification, and the split of a speculative step's time: drafting (the proposer's propose()
// calls) vs the target's step (scheduling, the verification forward, the verifier).
#pragma once

#include <string>
#include <vector>

#include "model/load_format.h"

namespace pagoda::cli {

struct SpecPromptBenchOptions {
  std::string model;
  LoadFormat load_format = LoadFormat::kAuto;  // the target's (its directory still gives the tokenizer)
  std::string device = "auto";
  std::string dtype = "auto";
  bool cuda_graphs = true;
  bool batch_invariant = false;
  int threads = 0;
  std::vector<std::string> methods;   // "ngram" and/or "draft"
  std::string draft_model;            // method draft
  std::vector<int> spec_tokens;       // k values
  bool adaptive = false;              // default here: fixed k, so each row is one k
  int ngram_min = 1, ngram_max = 4;
  std::vector<int> batches = {1};
  std::string prompt_file;
  bool chat = false;
  int output_len = 128;
  int rounds = 3;
  int max_num_batched_tokens = 2048;
  double memory_utilization = 0.9;
  bool json = false;
};

// Returns the process exit code (0: ran and every speculative output equals plain decoding's;
// 3: ran but some output differs; 1/2: failed).
int run_spec_prompt_bench(const SpecPromptBenchOptions& o);

}  // namespace pagoda::cli
