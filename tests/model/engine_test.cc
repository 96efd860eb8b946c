// The serving engine on real models: batch equivalence (concurrent greedy requests give exactly
// the tokens each gives alone), preemption under a tiny KV cache, cancellation freeing blocks,
// n > 1 sharing the prompt's blocks, seeds, stop strings, admission errors, planned vs actual memory,
// a failing forward pass ending its requests with an error while the engine keeps serving.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "common/dtype.h"
#include "common/process_stats.h"
#include "engine/engine.h"
#include "engine/engine_config.h"
#include "model/model_config.h"
#include "runtime/memory_plan.h"
#include "runtime/sampler.h"
#include "engine/engine_core.h"
#include "engine_test_util.h"
#include "runtime/model_executor.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

std::string smollm2_or_skip() {
  std::string p = test::smollm2_path();
  return p;
}

using test::collect;
using test::Collected;
using test::greedy_request;
using test::mixed_prompt;
EngineConfig base_config(const std::string& model) { return test::base_engine_config(model); }

class EngineBatchEquivalence : public ::testing::TestWithParam<bool> {};

// With prefix caching on and off: 64 concurrent greedy requests of mixed lengths (continuous
// batching, chunked prefill mixed with decodes) give exactly the tokens each gives alone.
TEST_P(EngineBatchEquivalence, ConcurrentGreedyRequestsMatchSoloRuns) {
  const std::string model = smollm2_or_skip();
  ASSERT_FALSE(model.empty()) << "models/SmolLM2-135M-Instruct.Q4_1.gguf missing: run scripts/setup.sh";
  EngineConfig cfg = base_config(model);
  cfg.enable_prefix_caching = GetParam();
  auto engine = Engine::create(cfg);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const int kRequests = 64, kTokens = 8;
  const int64_t vocab = (*engine)->model_config().vocab_size;
  auto make = [&](int i) { return greedy_request(mixed_prompt(i, vocab), kTokens); };
  std::vector<std::vector<int32_t>> solo(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    auto s = (*engine)->submit(make(i));
    ASSERT_TRUE(s.ok());
    solo[i] = collect(**s).tokens[0];
    ASSERT_EQ(solo[i].size(), static_cast<size_t>(kTokens));
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < kRequests; ++i) streams.push_back(*(*engine)->submit(make(i)));
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(collect(*streams[i]).tokens[0], solo[i]) << "request " << i;
  const EngineStats st = (*engine)->stats();
  EXPECT_EQ(st.free_kv_blocks, st.num_kv_blocks);  // everything released
  if (GetParam()) EXPECT_GT(st.prefix_cache_hits, 0);  // the concurrent round re-used the solo round's prompts
  else EXPECT_EQ(st.prefix_cache_hits, 0);
}

INSTANTIATE_TEST_SUITE_P(PrefixCaching, EngineBatchEquivalence, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "On" : "Off"; });

TEST(Engine, PreemptionUnderATinyCacheStillMatchesSoloRuns) {
  const std::string model = smollm2_or_skip();
  ASSERT_FALSE(model.empty());
  EngineConfig c = base_config(model);
  c.max_model_len = 128;
  c.block_size = 16;
  // 19 usable blocks of 16 tokens, ~3 of these sequences: 10 growing requests must preempt each other.
  Result<ModelConfig> mc = load_model_config(model);
  ASSERT_TRUE(mc.ok());
  c.kv_cache_memory = mc->kv_bytes_per_token(c.kv_dtype) * 16 * 20;
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    EngineConfig cm = c;
    if (mode == PreemptionMode::kSwap) cm.kv_tiers.host_bytes = mc->kv_bytes_per_token(c.kv_dtype) * 16 * 200;
    auto engine = Engine::create(cm);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    const int64_t vocab = mc->vocab_size;
    auto make = [&](int i) {
      GenerateRequest g;
      g.prompt_ids = mixed_prompt(i + 3, vocab);
      g.prompt_ids.resize(std::min<size_t>(g.prompt_ids.size(), 60));
      g.sampling.temperature = 0;
      g.stop.max_tokens = 24;
      g.stop.ignore_eos = true;
      return g;
    };
    std::vector<std::vector<int32_t>> solo;
    const int kRequests = 10;
    for (int i = 0; i < kRequests; ++i) solo.push_back(collect(**(*engine)->submit(make(i))).tokens[0]);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < kRequests; ++i) streams.push_back(*(*engine)->submit(make(i)));
    for (int i = 0; i < kRequests; ++i) EXPECT_EQ(collect(*streams[i]).tokens[0], solo[i]) << "request " << i;
    const EngineStats st = (*engine)->stats();
    EXPECT_GT(st.num_preemptions, 0) << (mode == PreemptionMode::kSwap ? "swap" : "recompute");
    EXPECT_EQ(st.free_kv_blocks, st.num_kv_blocks);
  }
}

TEST(Engine, SeedsReproduceAndParallelSamplesShareThePrompt) {
  const std::string model = smollm2_or_skip();
  ASSERT_FALSE(model.empty());
  auto engine = Engine::create(base_config(model));
  ASSERT_TRUE(engine.ok());
  GenerateRequest g;
  g.prompt = "Write a short poem about the sea. The sea is";
  g.sampling.temperature = 0.9f;
  g.sampling.top_p = 0.95f;
  g.sampling.seed = 1234;
  g.stop.max_tokens = 16;
  g.stop.ignore_eos = true;
  g.n = 4;
  Collected a = collect(**(*engine)->submit(g));
  Collected b = collect(**(*engine)->submit(g));
  EXPECT_EQ(a.tokens, b.tokens);  // same seed, same outputs (all four samples)
  ASSERT_EQ(a.tokens.size(), 4u);
  std::set<std::vector<int32_t>> distinct;
  for (auto& [i, t] : a.tokens) distinct.insert(t);
  EXPECT_GT(distinct.size(), 1u);  // samples differ from each other
  // Samples 1..3 reused the leader's full prompt blocks from the prefix cache.
  const int64_t prompt_len = static_cast<int64_t>((*engine)->tokenizer().encode(g.prompt).size());
  for (int i = 1; i < 4; ++i) EXPECT_EQ(b.cached[i], prompt_len / 16 * 16) << "sample " << i;
  g.sampling.seed = 99;
  Collected c = collect(**(*engine)->submit(g));
  EXPECT_NE(a.tokens, c.tokens);
}

TEST(Engine, StopStringsAcrossTokensAreNotEmitted) {
  const std::string model = smollm2_or_skip();
  ASSERT_FALSE(model.empty());
  auto engine = Engine::create(base_config(model));
  ASSERT_TRUE(engine.ok());
  GenerateRequest g;
  g.prompt = "The capital of France is";
  g.sampling.temperature = 0;
  g.stop.max_tokens = 30;
  Collected full = collect(**(*engine)->submit(g));
  const std::string text = full.text[0];
  ASSERT_GT(text.size(), 8u) << text;
  // A stop string that starts mid-token and spans several tokens: take characters 3..9.
  const std::string stop = text.substr(3, 6);
  g.stop.stop = {stop};
  Collected cut = collect(**(*engine)->submit(g));
  EXPECT_EQ(cut.text[0], text.substr(0, text.find(stop)));
  EXPECT_EQ(cut.finish[0], "stop");
  g.stop.include_stop_str_in_output = true;
  Collected with = collect(**(*engine)->submit(g));
  EXPECT_EQ(with.text[0], text.substr(0, text.find(stop) + stop.size()));
}

TEST(Engine, AdmissionErrorsNameTheNumbers) {
  const std::string model = smollm2_or_skip();
  ASSERT_FALSE(model.empty());
  auto engine = Engine::create(base_config(model));
  ASSERT_TRUE(engine.ok());
  GenerateRequest g;
  g.prompt_ids.assign(600, 5);
  auto r = (*engine)->submit(g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("600"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("512"), std::string::npos);
  g.prompt_ids.assign(100, 5);
  g.stop.max_tokens = 500;
  r = (*engine)->submit(g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("600"), std::string::npos) << r.status().message();
  g.stop.max_tokens = 5;
  g.sampling.top_p = 2;
  r = (*engine)->submit(g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("top_p"), std::string::npos);
  g.sampling.top_p = 1;
  g.prompt_ids = {-1};
  EXPECT_FALSE((*engine)->submit(g).ok());
}

// KV dtypes the CPU backend does not store (the FP8 cache is CUDA's; q8_0 and i8 no cache stores)
// are a clear error at start-up, not an abort inside the cache's constructor.
TEST(Engine, KvDtypesTheCpuCannotStoreAreAClearError) {
  const std::string model = smollm2_or_skip();
  ASSERT_FALSE(model.empty());
  for (DType kv : {DType::kF8E4M3, DType::kQ8_0, DType::kI8}) {
    EngineConfig c = base_config(model);
    c.kv_dtype = kv;
    auto engine = Engine::create(c);
    ASSERT_FALSE(engine.ok()) << dtype_name(kv);
    EXPECT_NE(engine.status().message().find(std::string(dtype_name(kv))), std::string::npos) << engine.status().message();
    EXPECT_NE(engine.status().message().find("f16"), std::string::npos) << engine.status().message();
    if (kv == DType::kF8E4M3) {
      EXPECT_NE(engine.status().message().find("cuda"), std::string::npos) << engine.status().message();
    }
  }
  // "fp8" names the E4M3 cache, as vLLM's --kv-cache-dtype does.
  EXPECT_EQ(dtype_from_name("fp8"), DType::kF8E4M3);
  EXPECT_EQ(dtype_from_name("F8_E4M3"), DType::kF8E4M3);
  // Not a GGUF tensor type: a file naming its id is rejected like any unknown type.
  EXPECT_FALSE(dtype_traits_of(static_cast<uint32_t>(DType::kF8E4M3)).has_value());
}

TEST(Engine, CancelFreesBlocksAndFinishesWithAbort) {
  const std::string model = smollm2_or_skip();
  ASSERT_FALSE(model.empty());
  auto engine = Engine::create(base_config(model));
  ASSERT_TRUE(engine.ok());
  GenerateRequest g;
  g.prompt = "Tell me a long story.";
  g.sampling.temperature = 0;
  g.stop.max_tokens = 400;
  g.stop.ignore_eos = true;
  auto s = (*engine)->submit(g);
  ASSERT_TRUE(s.ok());
  auto first = (*s)->next();
  ASSERT_TRUE(first.has_value());
  (*engine)->cancel((*s)->id());
  std::string reason;
  while (auto o = (*s)->next())
    if (o->finished) reason = o->finish_reason;
  EXPECT_EQ(reason, "abort");
  for (int i = 0; i < 100 && (*engine)->stats().free_kv_blocks != (*engine)->stats().num_kv_blocks; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ((*engine)->stats().free_kv_blocks, (*engine)->stats().num_kv_blocks);
}

TEST(Engine, PlannedMemoryMatchesActualWithinTwoPercent) {
  const std::string model = smollm2_or_skip();
  ASSERT_FALSE(model.empty());
  EngineConfig c = base_config(model);
  ThreadPool pool(2);
  auto loaded = load_model(model, {c.max_model_len});
  ASSERT_TRUE(loaded.ok());
  auto core = EngineCore::create(c, std::move(*loaded), pool);
  ASSERT_TRUE(core.ok()) << core.status().to_string();
  const MemoryPlan& plan = (*core)->memory_plan();
  // KV: what the storage actually allocated.
  const int64_t kv_actual = (*core)->executor().kv_cache_bytes();
  EXPECT_NEAR(static_cast<double>(kv_actual), static_cast<double>(plan.kv_cache), 0.02 * plan.kv_cache);
  // Weights: the bytes of every tensor the model reads.
  int64_t weights = 0;
  for (const auto& n : (*core)->model().weights->names())
    if (const Tensor* t = (*core)->model().weights->find(n)) weights += t->nbytes();
  EXPECT_NEAR(static_cast<double>(weights), static_cast<double>(plan.weights), 0.02 * plan.weights);
  // Workspace and logits at the planned maximum: 64 sequences x 8 tokens = the 512-token budget.
  for (int i = 0; i < 64; ++i) {
    auto r = std::make_unique<Request>();
    r->id = "w" + std::to_string(i);
    r->prompt.assign(8, 100 + i);
    r->stop.max_tokens = 1;
    ASSERT_TRUE((*core)->add_request(std::move(r)).ok());
  }
  const auto t_step = std::chrono::steady_clock::now();
  (*core)->step();
  const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_step).count();
  EXPECT_EQ((*core)->stats().last_step_tokens, 512);
  // The step's phases are timed (pagoda bench prints them): the forward pass takes time, and the
  // phases are parts of the step.
  // Each phase is timed (nonzero), the 512-token forward pass outweighs the bookkeeping around
  // it, and the phases fit in the step's wall time.
  const CoreStats& cs = (*core)->stats();
  EXPECT_GT(cs.schedule_s, 0.0);
  EXPECT_GT(cs.update_s, 0.0);
  EXPECT_GT(cs.execute_s, cs.schedule_s);
  EXPECT_GT(cs.execute_s, cs.update_s);
  EXPECT_LE(cs.schedule_s + cs.execute_s + cs.update_s, step_s);
  const double ws_actual = static_cast<double>((*core)->executor().workspace_bytes());
  EXPECT_NEAR(ws_actual, static_cast<double>(plan.workspace + plan.logits), 0.02 * (plan.workspace + plan.logits));
}

// The executor the engine built, whose forward pass throws while `mode` says so (1: a
// std::runtime_error, 2: an exception of no std type); otherwise it passes every call through.
class FaultyExecutor final : public ModelExecutor {
 public:
  FaultyExecutor(std::unique_ptr<ModelExecutor> inner, std::atomic<int>& mode) : inner_(std::move(inner)), mode_(mode) {}
  std::string device_name() const override { return inner_->device_name(); }
  const Tensor& forward(const ForwardBatch& batch) override {
    fail();
    return inner_->forward(batch);
  }
  void swap_out(const std::vector<BlockCopy>& c) override { inner_->swap_out(c); }
  void swap_in(const std::vector<BlockCopy>& c) override { inner_->swap_in(c); }
  int64_t workspace_bytes() const override { return inner_->workspace_bytes(); }
  int64_t kv_cache_bytes() const override { return inner_->kv_cache_bytes(); }
  bool samples_on_device() const override { return inner_->samples_on_device(); }
  void row_logprobs(std::span<const RowLogprobSpec> rows, std::vector<RowLogprobs>& out) override {
    inner_->row_logprobs(rows, out);
  }
  void forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> specs, std::vector<SampleResult>& results,
                      const std::function<void()>& before_sampling) override {
    fail();
    inner_->forward_sample(batch, specs, results, before_sampling);
  }

 private:
  void fail() const {
    if (mode_ == 1) throw std::runtime_error("injected device fault");
    if (mode_ == 2) throw 7;
  }
  std::unique_ptr<ModelExecutor> inner_;
  std::atomic<int>& mode_;
};

// While the forward pass throws, every request ends with finish reason "error" and a message
// that names the failure (std and non-std exceptions alike), none hangs and none is lost; once it
// stops throwing, the same engine serves new requests with the tokens it gave before the fault,
// and every KV block is free again.
TEST(Engine, AFailedStepEndsItsRequestsWithAnErrorAndServingGoesOn) {
  const std::string model = smollm2_or_skip();
  ASSERT_FALSE(model.empty());
  std::atomic<int> mode{0};
  auto engine = Engine::create(base_config(model), [&mode](std::unique_ptr<ModelExecutor> ex) {
    return std::unique_ptr<ModelExecutor>(std::make_unique<FaultyExecutor>(std::move(ex), mode));
  });
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto make = [](int i) {
    GenerateRequest g;
    g.prompt = "Once upon a time, request " + std::to_string(i) + " went";
    g.sampling.temperature = 0;
    g.stop.max_tokens = 4;
    g.stop.ignore_eos = true;
    return g;
  };
  std::vector<std::vector<int32_t>> before;
  for (int i = 0; i < 3; ++i) {
    Collected c = collect(**(*engine)->submit(make(i)));
    ASSERT_EQ(c.finish[0], "length");
    before.push_back(c.tokens[0]);
  }
  for (int fault : {1, 2}) {
    mode = fault;
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 3; ++i) streams.push_back(*(*engine)->submit(make(i)));
    for (int i = 0; i < 3; ++i) {
      std::optional<RequestOutput> last;
      int64_t tokens = 0;
      while (auto o = streams[i]->next_for(std::chrono::seconds(60))) {
        tokens += static_cast<int64_t>(o->tokens.size());
        last = std::move(o);
        if (last->finished) break;
      }
      ASSERT_TRUE(last.has_value() && last->finished) << "fault " << fault << ", request " << i << " did not finish";
      EXPECT_EQ(last->finish_reason, "error") << "fault " << fault << ", request " << i;
      EXPECT_NE(last->error.find(fault == 1 ? "injected device fault" : "unknown exception"), std::string::npos)
          << last->error;
      EXPECT_EQ(tokens, 0) << "no forward pass ran, so no token was sampled";
    }
    mode = 0;
    const int i = fault;  // a request that failed just now
    Collected c = collect(**(*engine)->submit(make(i)));
    EXPECT_EQ(c.finish[0], "length") << "fault " << fault << ", request " << i;
    EXPECT_EQ(c.tokens[0], before[i]) << "fault " << fault << ", request " << i;
  }
  const EngineStats st = (*engine)->stats();
  EXPECT_EQ(st.free_kv_blocks, st.num_kv_blocks);
}

}  // namespace
}  // namespace pagoda
