// The engine on CUDA (the GPU column of the engine tests): batch equivalence and preemption in the
// batch-invariant mode, lazy graph capture, sliding-window eviction, host KV tiers, prompt
// logprobs, mixture-of-experts batches, seeded sampling, weight offload, planned vs allocated
// memory (speculative decoding: cuda_spec_engine_test.cc). Every test skips with a message when no
// GPU is present.
#include <gtest/gtest.h>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include "engine/engine.h"
#include "engine/engine_config.h"
#include "model/model_config.h"
#include "runtime/draft_head_device_memory.h"
#include "runtime/memory_plan.h"
#include "common/dtype.h"
#include "engine/engine_core.h"
#include "grammar/constraint.h"
#include "gpu_test_util.h"
#include "model/draft_head.h"
#include "model/model_loader.h"
#include "cuda_engine_test_util.h"
#include "engine_test_util.h"
#include "prompt_logprobs_reference.h"
#include "reference_data.h"
#include "test_paths.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

// ---- the engine on CUDA ------------------------------------------------------------------------

using test::collect;
using test::Collected;
using test::greedy_request;
using test::mixed_prompt;
using cuda_engine_test::cuda_config;
using cuda_engine_test::engine_models;

TEST(CudaEngine, ConcurrentGreedyRequestsMatchSoloRunsInBatchInvariantMode) {
  PAGODA_REQUIRE_GPU();
  for (const auto& [model, tok] : engine_models()) {
    for (bool invariant : {true, false}) {
      EngineConfig c = cuda_config(model, tok);
      c.batch_invariant = invariant;
      auto engine = Engine::create(c);
      ASSERT_TRUE(engine.ok()) << engine.status().to_string();
      const int kRequests = 48, kTokens = 8;
      const int64_t vocab = (*engine)->model_config().vocab_size;
      auto make = [&](int i) { return greedy_request(mixed_prompt(i, vocab), kTokens); };
      std::vector<std::vector<int32_t>> solo(kRequests);
      for (int i = 0; i < kRequests; ++i) solo[i] = collect(**(*engine)->submit(make(i))).tokens[0];
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (int i = 0; i < kRequests; ++i) streams.push_back(*(*engine)->submit(make(i)));
      int same = 0;
      for (int i = 0; i < kRequests; ++i) {
        const auto got = collect(*streams[i]).tokens[0];
        same += got == solo[i];
        if (invariant) {
          EXPECT_EQ(got, solo[i]) << model << " request " << i;
        }
      }
      std::printf("[cuda-engine] %s batch-invariant %d: %d/%d concurrent requests equal their solo runs\n", model.c_str(),
                  invariant, same, kRequests);
      const EngineStats st = (*engine)->stats();
      EXPECT_EQ(st.free_kv_blocks, st.num_kv_blocks);
      EXPECT_GT(st.device_memory_used, 0);
    }
  }
}

// Lazy graph capture (TuningConfig::graph_capture, the default): a bucket's graphs are captured
// at its first decode step, on padding inputs. In batch-invariant mode the greedy tokens of 24
// concurrent requests (buckets 1 to 24 met as requests start and finish) are the same with lazy
// capture, with every bucket captured at start and with no graphs; the default mode prints its
// agreement.
TEST(CudaEngine, LazyGraphCaptureKeepsGreedyOutput) {
  PAGODA_REQUIRE_GPU();
  for (const auto& [model, tok] : engine_models()) {
    for (bool invariant : {true, false}) {
      std::map<std::string, std::vector<std::vector<int32_t>>> out;
      for (const std::string mode : {"start", "lazy", "none"}) {
        EngineConfig c = cuda_config(model, tok);
        c.batch_invariant = invariant;
        c.cuda_graphs = mode != "none";
        if (mode != "none") c.tuning.graph_capture = mode;
        auto engine = Engine::create(c);
        ASSERT_TRUE(engine.ok()) << engine.status().to_string();
        const int64_t vocab = (*engine)->model_config().vocab_size;
        std::vector<std::shared_ptr<RequestStream>> streams;
        for (int i = 0; i < 24; ++i) {
          GenerateRequest g;
          g.prompt_ids = mixed_prompt(i, vocab);
          g.sampling.temperature = 0;
          g.stop.max_tokens = 4 + i % 9;  // requests finish at different steps: the batch shrinks
          g.stop.ignore_eos = true;
          streams.push_back(*(*engine)->submit(g));
        }
        for (auto& st : streams) out[mode].push_back(collect(*st).tokens[0]);
      }
      int same = 0;
      for (size_t i = 0; i < out["lazy"].size(); ++i) {
        same += out["lazy"][i] == out["start"][i] && out["lazy"][i] == out["none"][i];
        if (invariant) {
          EXPECT_EQ(out["lazy"][i], out["start"][i]) << model << " request " << i;
          EXPECT_EQ(out["lazy"][i], out["none"][i]) << model << " request " << i;
        }
      }
      std::printf("[cuda-engine] %s batch-invariant %d: lazy = start = no graphs for %d/24 requests\n", model.c_str(),
                  invariant, same);
    }
  }
}

// Sliding-window KV eviction on the device (kv/kv_cache_manager.h): the tiny Phi-3 (every layer
// slides, window 48) in a 7-block cache gives the greedy tokens of a cache that keeps every block,
// with no preemption: the kernels read only the window's blocks of a table whose released entries
// are the null block.
TEST(CudaEngine, SlidingWindowEvictionKeepsGreedyOutput) {
  PAGODA_REQUIRE_GPU();
  const std::string model = test::models_dir() + "/tiny/phi3/model-f32.gguf";
  Result<ModelConfig> mc = load_model_config(model);
  ASSERT_TRUE(mc.ok()) << mc.status().to_string();
  auto config = [&](bool eviction, int64_t blocks) {
    EngineConfig c = cuda_config(model, "");
    c.max_model_len = 256;
    c.scheduler.max_num_batched_tokens = 16;
    c.scheduler.max_num_seqs = 4;
    c.sliding_window_eviction = eviction;
    c.kv_cache_memory = mc->kv_bytes_per_token(c.kv_dtype) * 16 * (blocks + 1);
    return c;
  };
  for (const char* dtype : {"f32", "bf16"}) {
    EngineConfig full_cfg = config(false, 80), windowed_cfg = config(true, 7);
    full_cfg.dtype = windowed_cfg.dtype = dtype;
    auto full = Engine::create(full_cfg);
    auto windowed = Engine::create(windowed_cfg);
    ASSERT_TRUE(full.ok()) << full.status().to_string();
    ASSERT_TRUE(windowed.ok()) << windowed.status().to_string();
    for (int seed = 0; seed < 3; ++seed) {
      GenerateRequest g;
      for (int i = 0; i < 40 + 13 * seed; ++i) g.prompt_ids.push_back(3 + (seed * 131 + i * 37) % 500);
      g.sampling.temperature = 0;
      g.stop.max_tokens = 200 - 10 * seed;
      g.stop.ignore_eos = true;
      const auto want = collect(**(*full)->submit(g)).tokens[0];
      const auto got = collect(**(*windowed)->submit(g)).tokens[0];
      EXPECT_EQ(got, want) << dtype << " seed " << seed;
    }
    EXPECT_EQ((*windowed)->stats().num_preemptions, 0) << dtype;
  }
}

TEST(CudaEngine, PreemptionUnderATinyCacheStillMatchesSoloRuns) {
  PAGODA_REQUIRE_GPU();
  for (const auto& [model, tok] : engine_models()) {
    EngineConfig c = cuda_config(model, tok);
    c.batch_invariant = true;
    c.max_model_len = 128;
    Result<ModelConfig> mc = load_model_config(model);
    ASSERT_TRUE(mc.ok());
    c.kv_cache_memory = mc->kv_bytes_per_token(c.kv_dtype) * 16 * 26;
    for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
      EngineConfig cm = c;
      if (mode == PreemptionMode::kSwap) cm.kv_tiers.host_bytes = mc->kv_bytes_per_token(c.kv_dtype) * 16 * 200;
      auto engine = Engine::create(cm);
      ASSERT_TRUE(engine.ok()) << engine.status().to_string();
      auto make = [&](int i) {
        GenerateRequest g;
        g.prompt_ids = mixed_prompt(i + 3, mc->vocab_size);
        g.prompt_ids.resize(std::min<size_t>(g.prompt_ids.size(), 60));
        g.sampling.temperature = 0;
        g.stop.max_tokens = 40;
        g.stop.ignore_eos = true;
        return g;
      };
      std::vector<std::vector<int32_t>> solo;
      for (int i = 0; i < 16; ++i) solo.push_back(collect(**(*engine)->submit(make(i))).tokens[0]);
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (int i = 0; i < 16; ++i) streams.push_back(*(*engine)->submit(make(i)));
      for (int i = 0; i < 16; ++i) EXPECT_EQ(collect(*streams[i]).tokens[0], solo[i]) << model << " request " << i;
      const EngineStats st = (*engine)->stats();
      EXPECT_GT(st.num_preemptions, 0) << (mode == PreemptionMode::kSwap ? "swap" : "recompute");
      EXPECT_EQ(st.free_kv_blocks, st.num_kv_blocks);
    }
  }
}

// KV cache tiers on CUDA: the pinned host blocks, copied on the copy stream. A host block written
// from the host, copied to a device block and back to another host block reads back the same
// bytes (runs of consecutive ids are one copy; a lone block another).
TEST(CudaKvTier, HostBlocksRoundTripThroughTheCopyStream) {
  PAGODA_REQUIRE_GPU();
  for (const auto& [model, tok] : engine_models()) {
    ModelLoadOptions lo;
    lo.max_model_len = 128;
    lo.cpu_kernels = false;
    auto loaded = load_model(model, lo);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    KvCacheSpec spec;
    spec.num_blocks = 16;
    spec.block_size = 16;
    spec.dtype = DType::kF16;
    spec.num_host_blocks = 12;
    CudaExecutorOptions co;
    co.max_model_len = 128;
    co.max_num_seqs = 4;
    co.max_num_tokens = 64;
    co.cuda_graphs = false;
    auto ex = make_cuda_executor(*loaded->model, spec, co);
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    const int64_t bytes = (*ex)->host_block_bytes();
    ASSERT_EQ(bytes, loaded->config.kv_bytes_per_token(DType::kF16) * 16);
    std::vector<std::vector<uint8_t>> written;
    for (BlockId h = 1; h <= 4; ++h) {
      std::vector<uint8_t> v(static_cast<size_t>(bytes));
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 13 + h * 101);
      (*ex)->write_host_block(h, v);
      written.push_back(std::move(v));
    }
    (*ex)->swap_in({{1, 3}, {2, 4}, {3, 5}, {4, 9}});     // a run of three, then one
    (*ex)->swap_out({{3, 8}, {4, 9}, {5, 10}, {9, 11}});
    for (BlockId h = 8; h <= 11; ++h) {
      std::vector<uint8_t> back(static_cast<size_t>(bytes));
      (*ex)->read_host_block(h, back);
      EXPECT_EQ(back, written[h - 8]) << model << " host block " << h;
    }
  }
}

// Shared prefixes larger than the device KV pool: greedy tokens (batch-invariant mode) are the
// same without tiers, with the pinned host tier and with a disk tier, and the second round's
// prefixes come back from the tiers (counted).
TEST(CudaKvTier, GreedyOutputsAreTheSameWithAndWithoutTiers) {
  PAGODA_REQUIRE_GPU();
  for (const auto& [model, tok] : engine_models()) {
    EngineConfig c = cuda_config(model, tok);
    c.batch_invariant = true;
    c.max_model_len = 256;
    c.scheduler.max_num_seqs = 4;
    c.scheduler.max_num_batched_tokens = 256;
    Result<ModelConfig> mc = load_model_config(model);
    ASSERT_TRUE(mc.ok());
    c.kv_cache_memory = mc->kv_bytes_per_token(c.kv_dtype) * 16 * 25;
    const fs::path dir = fs::temp_directory_path() / fmt::format("pagoda_cuda_kv_tier_{}", ::getpid());
    fs::remove_all(dir);
    auto run = [&](const EngineConfig& cfg, EngineStats* stats) {
      std::vector<std::vector<int32_t>> out;
      auto engine = Engine::create(cfg);
      EXPECT_TRUE(engine.ok()) << engine.status().to_string();
      if (!engine.ok()) return out;
      for (int round = 0; round < 2; ++round)
        for (int p = 0; p < 6; ++p) {
          GenerateRequest g;
          for (int k = 0; k < 160; ++k) g.prompt_ids.push_back(static_cast<int32_t>((p * 7919 + k * 104729) % (mc->vocab_size - 10) + 5));
          for (int k = 0; k < 8; ++k) g.prompt_ids.push_back(static_cast<int32_t>((round * 31 + p * 131 + k * 17 + 3) % (mc->vocab_size - 10) + 5));
          g.sampling.temperature = 0;
          g.stop.max_tokens = 6;
          g.stop.ignore_eos = true;
          out.push_back(collect(**(*engine)->submit(g)).tokens[0]);
        }
      *stats = (*engine)->stats();
      return out;
    };
    EngineStats plain_st, host_st, disk_st;
    const auto plain = run(c, &plain_st);
    EngineConfig host = c;
    host.kv_tiers.host_bytes = int64_t{64} << 20;
    EXPECT_EQ(run(host, &host_st), plain) << model;
    EXPECT_GE(host_st.kv_tier.host_hits, 6 * 160) << model;
    EngineConfig disk = c;
    disk.kv_tiers.disk_dir = dir.string();
    EXPECT_EQ(run(disk, &disk_st), plain) << model;
    EXPECT_GT(disk_st.kv_tier.disk_hits, 0) << model;
    std::printf("[cuda-kv-tier] %s: host-tier hits %lld tokens, disk-tier hits %lld tokens (%lld blocks written)\n",
                model.c_str(), static_cast<long long>(host_st.kv_tier.host_hits),
                static_cast<long long>(disk_st.kv_tier.disk_hits), static_cast<long long>(disk_st.kv_tier.disk_stores));
    fs::remove_all(dir);
  }
}

// Prompt logprobs on CUDA (the executor's row_logprobs on the device logits) against the CPU
// reference of one whole-prompt forward pass, f32 on both: under chunked prefill, after a
// prefix-cache hit of the same prompt, and without changing the tokens.
TEST(CudaEngine, PromptLogprobsMatchTheCpu) {
  PAGODA_REQUIRE_GPU();
  const std::string model = test::models_dir() + "/tiny/llama3/model-f32.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << "no " << model;
  for (int32_t budget : {512, 24}) {
    EngineConfig c = cuda_config(model, "");
    c.kv_dtype = DType::kF32;
    c.scheduler.max_num_batched_tokens = budget;
    auto engine = Engine::create(c);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    const int64_t vocab = (*engine)->model_config().vocab_size;
    std::vector<int32_t> prompt;
    for (int k = 0; k < 100; ++k) prompt.push_back(static_cast<int32_t>((k * 7919 + 13) % (vocab - 10) + 5));
    const int32_t top_n = 5;
    const auto want = test::reference_prompt_logprobs(model, prompt, top_n);
    ASSERT_EQ(want.size(), prompt.size() - 1);
    auto request = [&](int32_t plp) {
      GenerateRequest g;
      g.prompt_ids = prompt;
      g.sampling.temperature = 0;
      g.sampling.prompt_logprobs = plp;
      g.stop.max_tokens = 6;
      g.stop.ignore_eos = true;
      return g;
    };
    auto plain = test::collect_prompt_logprobs(**(*engine)->submit(request(-1)));
    auto with = test::collect_prompt_logprobs(**(*engine)->submit(request(top_n)));
    EXPECT_EQ(with.cached[0], 0);
    EXPECT_EQ(with.tokens[0], plain.tokens[0]);
    ASSERT_EQ(with.prompt[0].size(), want.size());
    double worst = 0;
    int rank_equal = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const RowLogprobs& g = with.prompt[0][i];
      worst = std::max(worst, std::abs(double(g.logprob) - want[i].logprob));
      rank_equal += g.rank == want[i].rank;
      ASSERT_EQ(g.top.size(), static_cast<size_t>(top_n));
      for (int k = 0; k < top_n; ++k) {
        EXPECT_NEAR(g.top[k].logprob, want[i].top[k].logprob, 1e-3) << "token " << i + 1 << " top " << k;
        if (k == 0 && want[i].top[0].logprob - want[i].top[1].logprob > 1e-3) {
          EXPECT_EQ(g.top[0].token, want[i].top[0].token) << "token " << i + 1;
        }
      }
    }
    EXPECT_LE(worst, 1e-3) << "budget " << budget;
    EXPECT_GE(rank_equal, static_cast<int>(want.size() * 9 / 10)) << "budget " << budget;
    std::printf("[cuda-prompt-logprobs] budget %d: max |logprob diff| vs CPU %.2e, ranks equal %d/%zu\n", budget, worst,
                rank_equal, want.size());
  }
}

// Mixture of experts through the engine on CUDA (backend/cuda/moe.cu; continuous batching over
// the paged KV cache, decode steps replayed from CUDA graphs): concurrent greedy requests equal
// their solo runs (exactly in batch-invariant mode, counted otherwise; Q4_0 experts included), the
// tiny f32 models' tokens
// equal the CPU engine's (f32 weights, activations and KV on both; the same budget as
// CudaParity.CpuAndCudaAgreeOnTheF32Path, at least 3 in 4 requests through a whole batch), and
// the memory plan is what the executor allocated.
TEST(CudaEngine, MixtureOfExpertsBatchesMatchSoloRunsAndTheCpu) {
  PAGODA_REQUIRE_GPU();
  std::vector<std::pair<std::string, std::string>> models;
  // model-q4_0: the experts in their blocks (moe_matmul_quant; batch-invariant: the GEMM at every size).
  for (const char* m : {"/tiny/mixtral/model-f32.gguf", "/tiny/qwen2-moe/model-f32.gguf", "/tiny/olmoe/model-f32.gguf",
                        "/tiny/mixtral/model-q4_0.gguf"})
    if (fs::exists(test::models_dir() + m)) models.push_back({test::models_dir() + m, ""});
  const std::string dir = test::gpu_ref_dir();
  if (!dir.empty() && fs::exists(dir + "/qwen3moe-bf16/config.json")) models.push_back({dir + "/qwen3moe-bf16", test::stories260k_gguf()});
  ASSERT_FALSE(models.empty()) << "no tiny MoE models under " << test::models_dir();
  const int kRequests = 24, kTokens = 12;
  for (const auto& [model, tok] : models) {
    const bool f32 = model.find("-f32.gguf") != std::string::npos;
    auto make = [&](int i, int64_t vocab) {
      GenerateRequest g;
      g.prompt_ids = mixed_prompt(i, vocab);
      g.sampling.temperature = 0;
      g.stop.max_tokens = kTokens;
      g.stop.ignore_eos = true;
      return g;
    };
    std::vector<std::vector<int32_t>> batched_default;
    for (bool invariant : {true, false}) {
      EngineConfig c = cuda_config(model, tok);
      c.batch_invariant = invariant;
      if (f32) c.kv_dtype = DType::kF32;
      auto engine = Engine::create(c);
      ASSERT_TRUE(engine.ok()) << engine.status().to_string();
      const int64_t vocab = (*engine)->model_config().vocab_size;
      std::vector<std::vector<int32_t>> solo(kRequests);
      for (int i = 0; i < kRequests; ++i) solo[i] = collect(**(*engine)->submit(make(i, vocab))).tokens[0];
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (int i = 0; i < kRequests; ++i) streams.push_back(*(*engine)->submit(make(i, vocab)));
      int same = 0;
      for (int i = 0; i < kRequests; ++i) {
        const auto got = collect(*streams[i]).tokens[0];
        same += got == solo[i];
        if (invariant) {
          EXPECT_EQ(got, solo[i]) << model << " request " << i;
        } else {
          batched_default.push_back(got);
        }
      }
      std::printf("[cuda-moe-engine] %s batch-invariant %d: %d/%d concurrent requests equal their solo runs\n",
                  model.c_str(), invariant, same, kRequests);
      const EngineStats st = (*engine)->stats();
      EXPECT_EQ(st.free_kv_blocks, st.num_kv_blocks);
    }
    if (f32) {
      EngineConfig cc = test::base_engine_config(model);
      cc.device = "cpu";
      cc.kv_dtype = DType::kF32;
      auto cpu = Engine::create(cc);
      ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
      const int64_t vocab = (*cpu)->model_config().vocab_size;
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (int i = 0; i < kRequests; ++i) streams.push_back(*(*cpu)->submit(make(i, vocab)));
      int equal = 0;
      for (int i = 0; i < kRequests; ++i) equal += collect(*streams[i]).tokens[0] == batched_default[i];
      EXPECT_GE(4 * equal, 3 * kRequests) << model << ": CUDA and CPU greedy tokens agree on " << equal << " of " << kRequests;
      std::printf("[cuda-moe-engine] %s: %d/%d batched requests equal the CPU engine's tokens\n", model.c_str(), equal,
                  kRequests);
    }
    // The plan's workspace (MoE buffers included) is what the executor allocated.
    EngineConfig c = cuda_config(model, tok);
    ThreadPool pool(2);
    ModelLoadOptions lo;
    lo.max_model_len = c.max_model_len;
    lo.cpu_kernels = false;
    auto loaded = load_model(model, lo);
    ASSERT_TRUE(loaded.ok());
    auto core = EngineCore::create(c, std::move(*loaded), pool);
    ASSERT_TRUE(core.ok()) << core.status().to_string();
    const MemoryPlan& plan = (*core)->memory_plan();
    EXPECT_NEAR(double((*core)->executor().workspace_bytes()), double(plan.workspace + plan.logits),
                0.02 * (plan.workspace + plan.logits))
        << model;
    std::printf("[cuda-moe-engine] %s: %s\n", model.c_str(), (*core)->executor().describe().c_str());
  }
}

TEST(CudaEngine, SeededSamplingReproducesOnTheDevice) {
  PAGODA_REQUIRE_GPU();
  for (const auto& [model, tok] : engine_models()) {
    auto engine = Engine::create(cuda_config(model, tok));
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    GenerateRequest g;
    g.prompt = "Once upon a time, there was a little";
    g.sampling.temperature = 0.9f;
    g.sampling.top_p = 0.95f;
    g.sampling.top_k = 40;
    g.sampling.repetition_penalty = 1.1f;
    g.sampling.seed = 1234;
    g.sampling.logprobs = 2;
    g.stop.max_tokens = 16;
    g.stop.ignore_eos = true;
    g.n = 4;
    Collected a = collect(**(*engine)->submit(g));
    Collected b = collect(**(*engine)->submit(g));
    EXPECT_EQ(a.tokens, b.tokens) << model;
    std::set<std::vector<int32_t>> distinct;
    for (auto& [i, t] : a.tokens) distinct.insert(t);
    EXPECT_GT(distinct.size(), 1u) << model;
  }
}

// Weight offload (runtime/weight_offload_plan.h, backend/cuda/weight_streamer.h): layers whose
// weights stream from pinned host memory every forward pass give the resident model's greedy
// tokens (batch-invariant mode: the same arithmetic, so the same tokens; decode graphs replay the
// copies), with one, half and every layer streamed, 16-bit, f32 and q8_0 weights; the memory plan counts the slots instead of
// the streamed layers, and a budget the whole model does not fit chooses offload by itself.
TEST(CudaEngine, WeightOffloadKeepsGreedyOutput) {
  PAGODA_REQUIRE_GPU();
  // Also native quantized weights: their layers stream in the device layout (planar q8_0 rows).
  auto models = engine_models();
  const std::string q8 = test::models_dir() + "/tiny/llama3/model-q8_0.gguf";
  if (fs::exists(q8)) models.push_back({q8, ""});
  for (const auto& [model, tok] : models) {
    for (bool invariant : {true, false}) {
      std::vector<std::vector<int32_t>> resident;
      int64_t resident_weights = 0;
      for (const double share : {0.0, 0.01, 0.5, 1.0}) {
        EngineConfig c = cuda_config(model, tok);
        c.batch_invariant = invariant;
        c.cpu_offload_bytes = 0;
        if (share > 0) {
          ModelLoadOptions lo;
          lo.cpu_kernels = false;
          auto probe = load_model(model, lo);
          ASSERT_TRUE(probe.ok());
          int64_t bytes = 0;
          for (const LinearEntry& e : probe->model->weights().linears)
            for (const Tensor& p : e.parts) bytes += p.nbytes();
          c.cpu_offload_bytes = std::max<int64_t>(1, static_cast<int64_t>(share * bytes));
        }
        auto engine = Engine::create(c);
        ASSERT_TRUE(engine.ok()) << engine.status().to_string();
        const MemoryPlan& plan = (*engine)->memory_plan();
        if (share == 0) {
          EXPECT_EQ(plan.offloaded_weights, 0);
          resident_weights = plan.weights;
        } else {
          EXPECT_GT(plan.offloaded_weights, 0) << share;
          EXPECT_NE(plan.offload.find("stream from host memory"), std::string::npos) << plan.offload;
          if (share == 1.0 && (*engine)->model_config().num_layers >= 4) {
            EXPECT_LT(plan.weights, resident_weights) << plan.to_string();  // layers less two slots
          }
        }
        const int64_t vocab = (*engine)->model_config().vocab_size;
        std::vector<std::shared_ptr<RequestStream>> streams;
        for (int i = 0; i < 12; ++i) {
          GenerateRequest g;
          g.prompt_ids = mixed_prompt(i, vocab);
          g.sampling.temperature = 0;
          g.stop.max_tokens = 6 + i % 7;
          g.stop.ignore_eos = true;
          streams.push_back(*(*engine)->submit(g));
        }
        std::vector<std::vector<int32_t>> out;
        for (auto& st : streams) out.push_back(collect(*st).tokens[0]);
        if (share == 0) {
          resident = out;
          continue;
        }
        int same = 0;
        for (size_t i = 0; i < out.size(); ++i) {
          same += out[i] == resident[i];
          if (invariant) {
            EXPECT_EQ(out[i], resident[i]) << model << " share " << share << " request " << i;
          }
        }
        std::printf("[cuda-offload] %s batch-invariant %d, %s: %d/12 requests as resident\n", model.c_str(), invariant,
                    plan.offload.c_str(), same);
      }
    }
    // Auto: a budget below the resident weights picks offload instead of refusing (streaming
    // saves layers less two slots: a model of 4 layers or more).
    EngineConfig c = cuda_config(model, tok);
    c.kv_cache_memory = 0;
    auto info = cuda_memory_info(0);
    ASSERT_TRUE(info.ok());
    ModelLoadOptions lo;
    lo.cpu_kernels = false;
    auto loaded = load_model(model, lo);
    ASSERT_TRUE(loaded.ok());
    if (loaded->config.num_layers < 4) continue;
    ThreadPool pool(2);
    c.cpu_offload_bytes = 0;
    auto base = EngineCore::create(c, std::move(*loaded), pool);
    ASSERT_TRUE(base.ok()) << base.status().to_string();
    const MemoryPlan p0 = (*base)->memory_plan();
    base->reset();
    // The budget: the plan's fixed terms, with the weights 40 % smaller, and one sequence of KV.
    const int64_t need = p0.total - p0.kv_cache + (p0.max_model_len / c.block_size + 3) * p0.block_bytes -
                         static_cast<int64_t>(0.4 * double(p0.weights));
    c.memory_utilization = double(need) / double(info->total);  // p0's overhead counts what is in use
    for (const int64_t mode : {int64_t{0}, EngineConfig::kAutoOffload}) {
      c.cpu_offload_bytes = mode;
      auto again = load_model(model, lo);
      ASSERT_TRUE(again.ok());
      auto core = EngineCore::create(c, std::move(*again), pool);
      if (mode == 0) {
        EXPECT_FALSE(core.ok()) << "the resident model fit a budget meant to be too small";
        continue;
      }
      ASSERT_TRUE(core.ok()) << core.status().to_string();
      EXPECT_GT((*core)->memory_plan().offloaded_weights, 0) << (*core)->memory_plan().to_string();
      std::printf("[cuda-offload] auto: %s\n", (*core)->memory_plan().to_string().c_str());
    }
  }
}

TEST(CudaEngine, PlannedMemoryMatchesAllocated) {
  PAGODA_REQUIRE_GPU();
  for (const auto& [model, tok] : engine_models()) {
    EngineConfig c = cuda_config(model, tok);
    ThreadPool pool(2);
    ModelLoadOptions lo;
    lo.max_model_len = c.max_model_len;
    lo.cpu_kernels = false;
    auto loaded = load_model(model, lo);
    ASSERT_TRUE(loaded.ok());
    auto core = EngineCore::create(c, std::move(*loaded), pool);
    ASSERT_TRUE(core.ok()) << core.status().to_string();
    const MemoryPlan& plan = (*core)->memory_plan();
    EXPECT_NEAR(double((*core)->executor().kv_cache_bytes()), double(plan.kv_cache), 0.02 * plan.kv_cache) << model;
    EXPECT_NEAR(double((*core)->executor().workspace_bytes()), double(plan.workspace + plan.logits),
                0.02 * (plan.workspace + plan.logits))
        << model;
    std::printf("[cuda-memplan] %s: %s | %s\n", model.c_str(), (*core)->executor().describe().c_str(),
                plan.to_string().c_str());
  }
}

}  // namespace
}  // namespace pagoda
