// Speculative decoding settings (one struct, part of EngineConfig; the runner reads it too).
//
// A proposer drafts up to num_speculative_tokens tokens per decoding request after each step; the
// next step computes the target model at the request's last token and at every draft, and keeps
// the longest prefix of drafts the verification accepts plus one token of its own (greedy: the
// target's argmax; sampling: the rejection rule that keeps the target distribution exactly).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace pagoda {

struct SpeculativeConfig {
  std::string method;                  // "" (off) | "ngram" (prompt lookup) | "draft" (a smaller model) |
                                       // "eagle3" (an EAGLE-3 head over the target's hidden states) |
                                       // "mtp" (the target checkpoint's MTP module, MiMo layout)
  std::string model;                   // draft model (.gguf or HF directory), EAGLE-3 head directory, or
                                       // the directory holding the MTP layers (mtp; "": the target's)
  int32_t num_speculative_tokens = 4;  // most drafts per request per step
  int32_t ngram_min = 1;               // prompt lookup: shortest suffix matched
  int32_t ngram_max = 4;               // ... and longest (tried first)
  bool adaptive = true;                // per-request draft length follows its measured acceptance
  // Adaptive speculation's cost model: one more verified position costs this fraction of a plain
  // decode step (weight reads dominate a small batch; CPU-measured about 0.1 on a 1.5B model).
  double verify_token_cost = 0.1;
  // No drafts in a step with more than this many decoding requests (0: never off).
  int32_t disable_by_batch_size = 32;
  // Greedy verification on an executor that samples on its device (CUDA) picks each verified
  // row's token there and copies back ids only; false: every verification step takes the logits
  // to the host (benchmarks compare the two).
  bool device_verify = true;
  // EAGLE-3 heads and MTP modules on a device target: the head's passes on the device (its weights
  // and KV cache in device memory) instead of the host; a head the device runner does not take
  // stays on the host (logged). Off by default until measured.
  bool device_head = false;

  bool enabled() const { return !method.empty(); }
  Status validate() const {
    if (method.empty()) return {};
    if (method != "ngram" && method != "draft" && method != "eagle3" && method != "mtp")
      return invalid_argument("speculative method must be 'ngram', 'draft', 'eagle3' or 'mtp', got '{}'", method);
    if (method == "draft" && model.empty()) return invalid_argument("speculative method 'draft' needs a draft model path");
    if (method == "eagle3" && model.empty())
      return invalid_argument("speculative method 'eagle3' needs the EAGLE-3 head's directory (model)");
    if (method == "ngram" && !model.empty()) return invalid_argument("a speculative draft model needs method 'draft' or 'eagle3'");
    if (num_speculative_tokens < 1 || num_speculative_tokens > 16)
      return invalid_argument("num_speculative_tokens must be in [1, 16], got {}", num_speculative_tokens);
    if (ngram_min < 1 || ngram_max < ngram_min || ngram_max > 16)
      return invalid_argument("prompt lookup needs 1 <= ngram_min <= ngram_max <= 16, got {} and {}", ngram_min, ngram_max);
    if (disable_by_batch_size < 0) return invalid_argument("disable_by_batch_size must be >= 0, got {}", disable_by_batch_size);
    if (device_head && method != "eagle3" && method != "mtp")
      return invalid_argument("device_head applies to the eagle3 and mtp heads, not method '{}'", method);
    return {};
  }
  std::string to_string() const {
    if (method.empty()) return "off";
    return method + (model.empty() ? "" : " " + model) + " k=" + std::to_string(num_speculative_tokens) +
           (method == "ngram" ? " n=" + std::to_string(ngram_min) + ".." + std::to_string(ngram_max) : "") +
           (adaptive ? " adaptive" : " fixed") + (device_verify ? "" : " host-verify") +
           (device_head ? " device-head" : "") +
           (disable_by_batch_size > 0 ? ", no drafts above batch " + std::to_string(disable_by_batch_size) : "");
  }
};

}  // namespace pagoda
