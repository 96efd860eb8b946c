// Helpers of the engine tests on CUDA (tests/gpu/cuda_engine_test.cc, cuda_spec_engine_test.cc):
// the models they run on, the engine configuration for the device, one batch of requests submitted
// to two engines, and the greedy comparison of a plain and a speculative engine.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_config.h"
#include "engine_test_util.h"
#include "gpu_test_util.h"
#include "test_paths.h"

namespace pagoda::cuda_engine_test {

// (model, tokenizer) pairs the engine tests run on: a tiny f32 GGUF, and the bf16 GPU model.
inline std::vector<std::pair<std::string, std::string>> engine_models() {
  std::vector<std::pair<std::string, std::string>> m;
  const std::string tiny = test::models_dir() + "/tiny/llama3/model-f32.gguf";
  if (std::filesystem::exists(tiny)) m.push_back({tiny, ""});
  const std::string dir = test::gpu_ref_dir();
  if (!dir.empty() && std::filesystem::exists(dir + "/qwen3-bf16/config.json")) m.push_back({dir + "/qwen3-bf16", test::stories260k_gguf()});
  return m;
}

inline EngineConfig cuda_config(const std::string& model, const std::string& tok) {
  EngineConfig c = test::base_engine_config(model);
  c.tokenizer = tok;
  c.device = "cuda";
  return c;
}

// Requests make(0) .. make(batch - 1) submitted to `a` (all at once), then to `b`; each request's
// generated tokens from a and from b.
inline std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> tokens_of_both(
    Engine& a, Engine& b, int batch, const std::function<GenerateRequest(int)>& make) {
  std::vector<std::shared_ptr<RequestStream>> sa, sb;
  for (int i = 0; i < batch; ++i) sa.push_back(*a.submit(make(i)));
  for (int i = 0; i < batch; ++i) sb.push_back(*b.submit(make(i)));
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> out;
  for (int i = 0; i < batch; ++i) out.emplace_back(test::collect(*sa[i]).tokens[0], test::collect(*sb[i]).tokens[0]);
  return out;
}

// Batches of 1 and 8 requests make(0) .. on `plain` and on `spec`: with `invariant` (both engines
// batch-invariant) each request's tokens are equal; the count of equal requests is printed as
// "<label> batch-invariant I batch B: N/B equal to plain decoding".
inline void expect_same_greedy_tokens(Engine& plain, Engine& spec, bool invariant,
                                      const std::function<GenerateRequest(int)>& make, const std::string& label) {
  for (int batch : {1, 8}) {
    const auto pairs = tokens_of_both(plain, spec, batch, make);
    int same = 0;
    for (int i = 0; i < batch; ++i) {
      const auto& [x, y] = pairs[static_cast<size_t>(i)];
      same += x == y;
      if (invariant) {
        EXPECT_EQ(x, y) << label << " batch " << batch << " request " << i;
      }
    }
    std::printf("%s batch-invariant %d batch %d: %d/%d equal to plain decoding\n", label.c_str(), invariant, batch, same,
                batch);
  }
}

}  // namespace pagoda::cuda_engine_test
