// Speculative decoding through the engine on CUDA: n-gram lookup, structured outputs with drafts,
// EAGLE-3 / MTP heads (host and device), a draft model on the device, and the memory plan of a
// device draft head. Greedy output equals plain decoding in batch-invariant mode. Every test skips
// with a message when no GPU is present.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "cuda_engine_test_util.h"
#include "engine/engine.h"
#include "engine/engine_config.h"
#include "engine/engine_core.h"
#include "engine_test_util.h"
#include "gpu_test_util.h"
#include "grammar/constraint.h"
#include "model/draft_head.h"
#include "model/model_config.h"
#include "model/model_loader.h"
#include "runtime/draft_head_device_memory.h"
#include "runtime/memory_plan.h"
#include "test_paths.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

using test::collect;
using test::greedy_request;
using test::mixed_prompt;
using cuda_engine_test::cuda_config;
using cuda_engine_test::engine_models;
using cuda_engine_test::expect_same_greedy_tokens;
using cuda_engine_test::tokens_of_both;

// Speculative decoding on the GPU: verification steps take the logits to the host. Greedy output
// equals plain decoding in batch-invariant mode (every row through the split-KV kernel); in the
// default mode the count of equal requests is printed.
TEST(CudaEngine, NgramSpeculationKeepsGreedyOutput) {
  PAGODA_REQUIRE_GPU();
  for (const auto& [model, tok] : engine_models()) {
    for (bool invariant : {true, false}) {
      EngineConfig c = cuda_config(model, tok);
      c.batch_invariant = invariant;
      auto plain = Engine::create(c);
      ASSERT_TRUE(plain.ok()) << plain.status().to_string();
      EngineConfig cs = c;
      cs.speculative.method = "ngram";
      auto spec = Engine::create(cs);
      ASSERT_TRUE(spec.ok()) << spec.status().to_string();
      const int64_t vocab = (*plain)->model_config().vocab_size;
      auto make = [&](int i) {
        GenerateRequest g;
        g.prompt_ids = mixed_prompt(i, vocab);
        const auto head = g.prompt_ids;
        g.prompt_ids.insert(g.prompt_ids.end(), head.begin(), head.end());  // something to look up
        g.sampling.temperature = 0;
        g.stop.max_tokens = 32;
        g.stop.ignore_eos = true;
        return g;
      };
      expect_same_greedy_tokens(**plain, **spec, invariant, make, "[cuda-spec] " + model);
      const EngineStats st = (*spec)->stats();
      EXPECT_GT(st.spec_num_draft_tokens, 0);
      EXPECT_EQ(st.free_kv_blocks, st.num_kv_blocks);
    }
  }
}

// Structured outputs with speculation on the GPU (device-side greedy verification with a mask
// per verified row; masks as wide as the tokenizer's vocabulary, narrower than the model's for the
// qwen3 shape): in batch-invariant mode the output equals plain constrained decoding, with n-gram
// drafts and (tiny llama) a draft model; every output is taken by a fresh constraint.
TEST(CudaEngine, ConstrainedOutputWithSpeculationKeepsGreedyOutput) {
  PAGODA_REQUIRE_GPU();
  const grammar::ConstraintSource schema{
      grammar::ConstraintKind::kJsonSchema,
      R"({"type":"object","properties":{"name":{"enum":["alice","bob","carol"]},"note":{"type":"string","maxLength":24},)"
      R"("tags":{"type":"array","items":{"enum":["red","green","blue"]},"minItems":1,"maxItems":8},)"
      R"("age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","note","tags","age"]})",
      {},
      nullptr};
  for (const auto& [model, tok] : engine_models()) {
    const bool tiny = tok.empty();
    for (const std::string method : {"ngram", "draft"}) {
      if (method == "draft" && !tiny) continue;
      SCOPED_TRACE(model + " " + method);
      EngineConfig c = cuda_config(model, tok);
      c.batch_invariant = true;
      auto plain = Engine::create(c);
      ASSERT_TRUE(plain.ok()) << plain.status().to_string();
      EngineConfig cs = c;
      cs.speculative.method = method;
      if (method == "draft") cs.speculative.model = test::models_dir() + "/tiny/llama3/model-q8_0.gguf";
      auto spec = Engine::create(cs);
      ASSERT_TRUE(spec.ok()) << spec.status().to_string();
      auto constraint = (*plain)->constraint(schema);
      ASSERT_TRUE(constraint.ok()) << constraint.status().to_string();
      const int64_t vocab = (*plain)->model_config().vocab_size;
      auto make = [&](int i) {
        GenerateRequest g;
        g.prompt_ids = mixed_prompt(i, vocab);
        g.sampling.temperature = 0;
        g.sampling.constraint = *constraint;
        g.stop.max_tokens = 96;
        return g;
      };
      for (int batch : {1, 8}) {
        const auto pairs = tokens_of_both(**plain, **spec, batch, make);
        for (int i = 0; i < batch; ++i) {
          const auto& [x, y] = pairs[static_cast<size_t>(i)];
          EXPECT_EQ(x, y) << "batch " << batch << " request " << i;
          auto fresh = (*constraint)->start();
          for (size_t j = 0; j < y.size(); ++j) ASSERT_TRUE(fresh->advance(y[j])) << "request " << i << " token " << j;
        }
      }
      const EngineStats st = (*spec)->stats();
      std::printf("[cuda-constrained-spec] %s %s: draft tokens %lld, accepted %lld\n", model.c_str(), method.c_str(),
                  static_cast<long long>(st.spec_num_draft_tokens), static_cast<long long>(st.spec_num_accepted_tokens));
      EXPECT_GT(st.spec_num_draft_tokens, 0);
      EXPECT_EQ(st.free_kv_blocks, st.num_kv_blocks);
    }
  }
}

// Draft heads on a CUDA target: the executor captures the head's layers into a device buffer
// inside the decode and verification graphs (graphs stay on) and copies the step's rows back once;
// the head drafts on the host, an MTP module's logits through the target's output head on the
// device. The EAGLE-3 echo head of tools/make_draft_heads.py drafts the target's own greedy token
// (drafts accepted); the MTP module has random weights. Batch-invariant mode: output equal to plain
// decoding at batch 1, 4 and 8, with the head on the host and on the device (--spec-device-head).
TEST(CudaEngine, DraftHeadsKeepGreedyOutput) {
  PAGODA_REQUIRE_GPU();
  struct HeadCase {
    const char* method;
    std::string target, head;
    bool accepts;  // drafts that the target accepts (the echo head)
  };
  const std::vector<HeadCase> heads = {
      {"eagle3", test::models_dir() + "/tiny/llama3/model-f32.gguf", test::models_dir() + "/tiny/eagle3-llama3-echo", true},
      {"eagle3", test::models_dir() + "/tiny/llama3/model-f32.gguf", test::models_dir() + "/tiny/eagle3-llama3", false},
      {"mtp", test::models_dir() + "/tiny/qwen2/model-f32.gguf", test::models_dir() + "/tiny/mimo-mtp", false}};
  for (const HeadCase& hc : heads) {
    ASSERT_TRUE(fs::exists(hc.target) && fs::exists(hc.head)) << "tools/make_tiny_models.py and tools/make_draft_heads.py";
    EngineConfig c = cuda_config(hc.target, "");
    c.batch_invariant = true;
    auto plain = Engine::create(c);
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    const int64_t vocab = (*plain)->model_config().vocab_size;
    auto make = [&](int i) { return greedy_request(mixed_prompt(i, vocab), 40); };
    for (bool device_head : {false, true}) {
      SCOPED_TRACE(hc.head + (device_head ? " (device head)" : " (host head)"));
      EngineConfig cs = c;
      cs.speculative.method = hc.method;
      cs.speculative.model = hc.head;
      cs.speculative.device_head = device_head;
      auto spec = Engine::create(cs);
      ASSERT_TRUE(spec.ok()) << spec.status().to_string();
      for (int batch : {1, 4, 8}) {
        const auto pairs = tokens_of_both(**plain, **spec, batch, make);
        for (int i = 0; i < batch; ++i)
          EXPECT_EQ(pairs[static_cast<size_t>(i)].first, pairs[static_cast<size_t>(i)].second)
              << "batch " << batch << " request " << i;
      }
      const EngineStats st = (*spec)->stats();
      EXPECT_GT(st.spec_num_draft_tokens, 0);
      if (hc.accepts) {
        EXPECT_GT(st.spec_num_accepted_tokens, 0);
      }
      EXPECT_EQ(st.free_kv_blocks, st.num_kv_blocks);
      std::printf("[cuda-spec-%s] %s%s: drafts %lld, draft tokens %lld, accepted %lld\n", hc.method, hc.head.c_str(),
                  device_head ? " device head" : "", static_cast<long long>(st.spec_num_drafts),
                  static_cast<long long>(st.spec_num_draft_tokens), static_cast<long long>(st.spec_num_accepted_tokens));
    }
  }
}

// A draft model on the same GPU (its own CUDA executor; its weights and KV in the device memory
// plan): greedy output equals plain decoding in batch-invariant mode (in the default mode the count
// of equal requests is printed). The draft is the tiny model's q8_0 file, or the bf16 model
// itself (high acceptance either way); the plan's draft share is what the draft executor holds.
TEST(CudaEngine, DraftModelOnTheDeviceKeepsGreedyOutput) {
  PAGODA_REQUIRE_GPU();
  for (const auto& [model, tok] : engine_models()) {
    const std::string q8 = test::models_dir() + "/tiny/llama3/model-q8_0.gguf";
    const std::string draft = tok.empty() && fs::exists(q8) ? q8 : model;
    for (bool invariant : {true, false}) {
      EngineConfig c = cuda_config(model, tok);
      c.batch_invariant = invariant;
      auto plain = Engine::create(c);
      ASSERT_TRUE(plain.ok()) << plain.status().to_string();
      EngineConfig cs = c;
      cs.speculative.method = "draft";
      cs.speculative.model = draft;
      auto spec = Engine::create(cs);
      ASSERT_TRUE(spec.ok()) << spec.status().to_string();
      const int64_t vocab = (*plain)->model_config().vocab_size;
      auto make = [&](int i) { return greedy_request(mixed_prompt(i, vocab), 40); };
      expect_same_greedy_tokens(**plain, **spec, invariant, make, "[cuda-spec-draft] " + model + " draft " + draft);
      const EngineStats st = (*spec)->stats();
      EXPECT_GT(st.spec_num_accepted_tokens, 0);
      EXPECT_EQ(st.free_kv_blocks, st.num_kv_blocks);
      std::printf("[cuda-spec-draft] drafts %lld, draft tokens %lld, accepted %lld\n",
                  static_cast<long long>(st.spec_num_drafts), static_cast<long long>(st.spec_num_draft_tokens),
                  static_cast<long long>(st.spec_num_accepted_tokens));
    }
    // The plan holds the draft's share, and the target's cache is smaller by it.
    EngineConfig c = cuda_config(model, tok);
    EngineConfig cs = c;
    cs.speculative.method = "draft";
    cs.speculative.model = draft;
    ThreadPool pool(2);
    auto core_of = [&](const EngineConfig& cfg) {
      ModelLoadOptions lo;
      lo.max_model_len = cfg.max_model_len;
      lo.cpu_kernels = false;
      auto loaded = load_model(model, lo);
      EXPECT_TRUE(loaded.ok());
      return EngineCore::create(cfg, std::move(*loaded), pool);
    };
    MemoryPlan plain_plan;
    {
      auto core = core_of(c);
      ASSERT_TRUE(core.ok()) << core.status().to_string();
      plain_plan = (*core)->memory_plan();
    }
    auto core = core_of(cs);
    ASSERT_TRUE(core.ok()) << core.status().to_string();
    const MemoryPlan& plan = (*core)->memory_plan();
    EXPECT_GT(plan.draft_fixed, 0);
    EXPECT_GT(plan.draft_kv_cache, 0);
    EXPECT_LT(plan.num_blocks, plain_plan.num_blocks);
    std::printf("[cuda-spec-draft] plan with draft: %s\n", plan.to_string().c_str());
  }
}

// --spec-device-head: the engine's plan counts the head's device share (weights, pass buffers, the
// lookahead blocks of its cache fixed; a cache block per target block) as a draft model's
// (engine_core.h add_device_draft_head), from the head loaded before the plan; a host head adds
// nothing to the device's plan. The tiny llama's EAGLE-3 head and the tiny qwen2's MTP module, f32.
TEST(CudaEngine, PlanCountsTheDeviceDraftHead) {
  PAGODA_REQUIRE_GPU();
  struct HeadCase {
    const char* method;
    std::string target, head;
  };
  const std::vector<HeadCase> heads = {
      {"eagle3", test::models_dir() + "/tiny/llama3/model-f32.gguf", test::models_dir() + "/tiny/eagle3-llama3"},
      {"mtp", test::models_dir() + "/tiny/qwen2/model-f32.gguf", test::models_dir() + "/tiny/mimo-mtp"}};
  ThreadPool pool(2);
  for (const HeadCase& hc : heads) {
    ASSERT_TRUE(fs::exists(hc.target) && fs::exists(hc.head)) << "tools/make_tiny_models.py and tools/make_draft_heads.py";
    for (bool device_head : {false, true}) {
      SCOPED_TRACE(hc.head + (device_head ? " (device head)" : " (host head)"));
      EngineConfig c = cuda_config(hc.target, "");
      c.speculative.method = hc.method;
      c.speculative.model = hc.head;
      c.speculative.device_head = device_head;
      ModelLoadOptions lo;
      lo.max_model_len = c.max_model_len;
      lo.cpu_kernels = false;
      auto loaded = load_model(hc.target, lo);
      ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
      auto core = EngineCore::create(c, std::move(*loaded), pool);
      ASSERT_TRUE(core.ok()) << core.status().to_string();
      const MemoryPlan& plan = (*core)->memory_plan();
      std::printf("[cuda-memplan-head] %s: %s\n", hc.head.c_str(), plan.to_string().c_str());
      if (!device_head) {
        EXPECT_EQ(plan.draft_fixed, 0);
        EXPECT_EQ(plan.draft_kv_cache, 0);
        continue;
      }
      // The same head on the host, its device bytes in the executor's f32.
      auto host = load_model(hc.target);
      ASSERT_TRUE(host.ok()) << host.status().to_string();
      const ModelWeights& tw = host->model->weights();
      auto head = std::string(hc.method) == "eagle3"
                      ? load_eagle3_head(hc.head, host->config, tw.token_embd, plan.max_model_len)
                      : load_mimo_mtp_head(hc.head, host->config, tw.token_embd, tw.linear(tw.output).cpu, plan.max_model_len);
      ASSERT_TRUE(head.ok()) << head.status().to_string();
      const DraftHeadDeviceMemory m = device_draft_head_memory(**head, tw.token_embd, DType::kF32, c);
      const int64_t bs = c.block_size;
      EXPECT_EQ(m.kv_bytes_per_token, 2 * (*head)->config.num_kv_heads * (*head)->config.head_dim * 4);
      EXPECT_EQ(plan.draft_label, "draft head");
      EXPECT_EQ(plan.draft_fixed, m.weights + m.pass_buffers + (draft_lookahead_blocks(c) + 1) * bs * m.kv_bytes_per_token);
      EXPECT_EQ(plan.draft_kv_cache, plan.num_blocks * bs * m.kv_bytes_per_token);
      EXPECT_EQ(plan.total, plan.weights + plan.workspace + plan.logits + plan.runtime_overhead + plan.kv_cache +
                                plan.draft_fixed + plan.draft_kv_cache);
    }
  }
}

}  // namespace
}  // namespace pagoda
