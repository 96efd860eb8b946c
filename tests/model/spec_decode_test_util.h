// Helpers of the speculative-decoding engine tests on the CPU (tests/model/spec_decode_engine_test.cc,
// tests/model/spec_decode_constrained_test.cc): the tiny models' paths, a proposer case and the
// engine configuration it gives, the greedy requests the equivalence tests submit, and a CPU
// executor that samples on "the device" as the CUDA executor does.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine_config.h"
#include "engine/engine_core.h"
#include "engine/executor_decorator.h"
#include "model/model_loader.h"
#include "engine_test_util.h"
#include "runtime/model_executor.h"
#include "runtime/sampler.h"
#include "test_paths.h"

namespace pagoda::spec_test {

inline std::string tiny(const std::string& name) { return test::models_dir() + "/tiny/" + name; }

struct SpecCase {
  std::string name;
  std::string target;  // path (empty: SmolLM2)
  std::string method;
  std::string draft;
  bool accepts = true;  // the proposer's drafts get accepted at all (not so for another model's weights)
};

inline std::string target_path(const SpecCase& c) { return c.target.empty() ? test::smollm2_path() : c.target; }

inline EngineConfig config_for(const std::string& model, const SpecCase* spec) {
  EngineConfig c = test::base_engine_config(model);
  c.max_model_len = 256;
  if (spec) {
    c.speculative.method = spec->method;
    c.speculative.model = spec->draft;
    c.speculative.num_speculative_tokens = 4;
  }
  return c;
}

inline GenerateRequest greedy_request(int i, int64_t vocab, int max_tokens) {
  GenerateRequest g;
  g.prompt_ids = test::mixed_prompt(i + 1, vocab);
  // A repeated stretch gives prompt lookup something to find.
  if (i % 2 == 0) {
    const auto head = g.prompt_ids;
    g.prompt_ids.insert(g.prompt_ids.end(), head.begin(), head.end());
  }
  g.sampling.temperature = 0;
  g.sampling.logprobs = i % 3 == 0 ? 2 : -1;
  if (i % 4 == 1) {  // penalties see the accepted drafts before each position
    g.sampling.repetition_penalty = 1.3f;
    g.sampling.presence_penalty = 0.4f;
    g.sampling.frequency_penalty = 0.2f;
  }
  g.stop.max_tokens = max_tokens;
  g.stop.ignore_eos = true;
  return g;
}

// Requests tag0 .. tag(n - 1) with the prompts mixed_prompt(i + 1, vocab), greedy, shaped by
// `shape` (stop conditions, a constraint), run on `e` until all finish; each one's generated tokens.
inline std::vector<std::vector<int32_t>> run_greedy_core(EngineCore& e, const std::string& tag, int n,
                                                        const std::function<void(Request&)>& shape) {
  const int64_t vocab = e.model_config().vocab_size;
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto r = std::make_unique<Request>();
    r->id = tag + std::to_string(i);
    r->prompt = test::mixed_prompt(i + 1, vocab);
    r->sampling.temperature = 0;
    shape(*r);
    EXPECT_TRUE(e.add_request(std::move(r)).ok());
  }
  while (e.has_unfinished())
    for (const CoreOutput& o : e.step())
      if (o.has_token) out[static_cast<size_t>(std::stoi(o.id.substr(tag.size())))].push_back(o.sample.token);
  return out;
}

// Request tag + i's whole sequence (its prompt of run_greedy_core, then record[i]), by request id:
// what a replaying proposer drafts from.
inline std::unordered_map<std::string, std::vector<int32_t>> recorded_sequences(
    const std::vector<std::vector<int32_t>>& record, const std::string& tag, int64_t vocab) {
  std::unordered_map<std::string, std::vector<int32_t>> seqs;
  for (size_t i = 0; i < record.size(); ++i) {
    std::vector<int32_t> t = test::mixed_prompt(static_cast<int>(i) + 1, vocab);
    t.insert(t.end(), record[i].begin(), record[i].end());
    seqs[tag + std::to_string(i)] = std::move(t);
  }
  return seqs;
}

// A CPU executor that samples each spec'd row itself (ModelRunner's forward_sample path, what CUDA
// runs), applying structured-output masks per row as the CUDA executor applies them; counts the
// steps that verified drafts (more sample rows than sequences) in multi_row_steps.
class SamplingCpuExecutor final : public ModelExecutor {
 public:
  explicit SamplingCpuExecutor(std::unique_ptr<ModelExecutor> inner) : inner_(std::move(inner)) {}
  std::string device_name() const override { return inner_->device_name(); }
  const Tensor& forward(const ForwardBatch& b) override { return inner_->forward(b); }
  void swap_out(const std::vector<BlockCopy>& c) override { inner_->swap_out(c); }
  void swap_in(const std::vector<BlockCopy>& c) override { inner_->swap_in(c); }
  int64_t workspace_bytes() const override { return inner_->workspace_bytes(); }
  int64_t kv_cache_bytes() const override { return inner_->kv_cache_bytes(); }
  bool samples_on_device() const override { return true; }
  void forward_sample(const ForwardBatch& b, std::span<const SampleSpec> specs, std::vector<SampleResult>& out,
                      const std::function<void()>& before_sampling) override {
    const Tensor& logits = inner_->forward(b);
    if (before_sampling) before_sampling();
    const int64_t vocab = logits.dim(1);
    if (specs.size() > b.seqs.size()) ++multi_row_steps;
    out.clear();
    for (const SampleSpec& sp : specs) {
      std::vector<float> row(logits.data_as<float>() + sp.logits_row * vocab, logits.data_as<float>() + (sp.logits_row + 1) * vocab);
      for (int32_t t : sp.blocked_ids) row[t] = -std::numeric_limits<float>::infinity();
      Rng rng(1);
      std::vector<uint32_t> mask;  // as the CUDA executor: ids past the spec's mask disallowed
      if (!sp.allowed_mask.empty()) {
        mask.assign((vocab + 31) / 32, 0u);
        std::copy_n(sp.allowed_mask.begin(), std::min(sp.allowed_mask.size(), mask.size()), mask.begin());
      }
      out.push_back(sampler_.sample(row, *sp.params, sp.history, rng, mask));
    }
  }
  static inline int multi_row_steps = 0;

 private:
  std::unique_ptr<ModelExecutor> inner_;
  Sampler sampler_;
};

// The executor decorator that puts a SamplingCpuExecutor around an engine's executor.
inline ExecutorDecorator device_sampling_decorator() {
  return [](std::unique_ptr<ModelExecutor> ex) {
    return std::unique_ptr<ModelExecutor>(std::make_unique<SamplingCpuExecutor>(std::move(ex)));
  };
}

// An EngineCore of config c on `pool` (c.model loaded for c.max_model_len), its executor in a
// SamplingCpuExecutor when `device_sampling`; the load's or the creation's error otherwise.
inline Result<std::unique_ptr<EngineCore>> make_core(const EngineConfig& c, ThreadPool& pool, bool device_sampling = false) {
  ModelLoadOptions lo;
  lo.max_model_len = c.max_model_len;
  auto loaded = load_model(c.model, lo);
  if (!loaded.ok()) return loaded.status();
  return EngineCore::create(c, std::move(*loaded), pool, device_sampling ? device_sampling_decorator() : ExecutorDecorator{});
}

}  // namespace pagoda::spec_test
