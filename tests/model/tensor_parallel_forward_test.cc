// A tensor-parallel forward on the CPU (runtime/cpu_layer_ops.h with a TensorParallelRank, the
// ranks as threads: runtime/tensor_parallel_comm.h), each rank's model loaded from its shards
// through the family loader (model/tensor_parallel_source.h), against the whole model on random
// weights of tiny configs: a prompt's logits at every position within 1e-4 x (1 + max |logit|)
// (f32; only the order of the o / down sums differs) and the same greedy continuation, for a GQA
// Llama at 2 ranks and at 4 (KV heads replicated), Qwen2 (q/k/v biases, tied embedding) and
// Mixtral (each expert split by width); every rank ends with the same logits bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/thread_pool.h"
#include "cpu_greedy_run.h"
#include "model/family.h"
#include "model/random_weights.h"
#include "model/tensor_parallel_source.h"
#include "runtime/cpu_layer_ops.h"
#include "runtime/tensor_parallel_comm.h"
#include "hf_source_model.h"
#include "tiny_hf_configs.h"

namespace pagoda {
namespace {

using test::load_hf_model;

// The prompt's logits [T, V] and `steps` greedy tokens, the ranks stepping together on threads.
test::GreedyRun tensor_parallel_run(const ModelConfig& c, const std::shared_ptr<const WeightSource>& full, int size,
                                    const std::vector<int32_t>& prompt, int steps) {
  auto plan = plan_tensor_parallel(c, size);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  struct Rank {
    ModelConfig config;
    std::unique_ptr<WeightSource> source;
    std::unique_ptr<Model> model;
    std::unique_ptr<KvCacheStorage> kv;
    ForwardWorkspace ws;
    Tensor logits;
    TensorParallelRank tp;
  };
  auto comms = make_thread_comms(size);
  const int64_t bs = 16, nblocks = (static_cast<int64_t>(prompt.size()) + steps + bs - 1) / bs + 1;
  std::vector<Rank> ranks(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    Rank& k = ranks[static_cast<size_t>(r)];
    k.config = *rank_model_config(c, *plan, r);
    k.source = std::move(tensor_parallel_weight_source(full, *plan, r)).value();
    k.model = load_hf_model(k.config, *k.source);
    k.kv = std::make_unique<KvCacheStorage>(k.config, nblocks + 3, bs, DType::kF32);
    k.tp = {comms[static_cast<size_t>(r)].get(), plan->ranks[static_cast<size_t>(r)].vocab_begin, c.vocab_size};
  }
  std::vector<int32_t> table;
  for (int64_t b = 0; b < nblocks; ++b) table.push_back(static_cast<int32_t>(nblocks + 2 - b));
  auto step = [&](const ForwardBatch& batch) {
    std::vector<std::thread> threads;
    for (Rank& k : ranks)
      threads.emplace_back([&k, &batch] {
        ThreadPool pool(1);
        cpu_forward(*k.model, batch, *k.kv, k.ws, k.logits, pool, {}, {}, nullptr, &k.tp);
      });
    for (auto& t : threads) t.join();
    for (const Rank& k : ranks) {
      EXPECT_EQ(k.logits.shape(), ranks[0].logits.shape());
      EXPECT_EQ(std::memcmp(k.logits.data(), ranks[0].logits.data(), static_cast<size_t>(k.logits.nbytes())), 0)
          << "every rank gathers the same logits";
    }
    return std::vector<float>(ranks[0].logits.data_as<float>(), ranks[0].logits.data_as<float>() + ranks[0].logits.numel());
  };
  test::GreedyRun run;
  ForwardBatch batch;
  batch.add_sequence(prompt, static_cast<int32_t>(prompt.size()), table, bs, true, /*want_all_logits=*/true);
  run.logits = step(batch);
  const int64_t V = c.vocab_size;
  auto argmax = [V](const float* row) { return static_cast<int32_t>(std::max_element(row, row + V) - row); };
  int32_t next = argmax(run.logits.data() + (prompt.size() - 1) * V);
  int32_t ctx = static_cast<int32_t>(prompt.size());
  for (int s = 0; s < steps; ++s) {
    run.greedy.push_back(next);
    if (s + 1 == steps) break;
    batch.clear();
    batch.add_sequence({next}, ++ctx, table, bs);
    next = argmax(step(batch).data());
  }
  return run;
}

void expect_tensor_parallel_equals_whole(const nlohmann::json& j, int size) {
  auto c = model_config_from_hf_json(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto made = make_random_weight_source(*c, "cfg", DType::kBF16, /*seed=*/11, 2);
  ASSERT_TRUE(made.ok());
  const std::shared_ptr<const WeightSource> full = std::move(made).value();
  const std::vector<int32_t> prompt = {1, 7, 42, 300, 5, 511, 2, 99, 256, 17};
  ThreadPool pool(2);
  const auto whole_model = load_hf_model(*c, *full);
  const test::GreedyRun whole = test::cpu_greedy_run(*c, *whole_model, prompt, 6, pool);
  const test::GreedyRun tp = tensor_parallel_run(*c, full, size, prompt, 6);
  ASSERT_EQ(tp.logits.size(), whole.logits.size());
  float max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < whole.logits.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(whole.logits[i]));
    max_diff = std::max(max_diff, std::abs(tp.logits[i] - whole.logits[i]));
  }
  EXPECT_LE(max_diff, 1e-4f * (1 + max_abs)) << c->arch_name << " at " << size << " ranks";
  EXPECT_EQ(tp.greedy, whole.greedy) << c->arch_name << " at " << size << " ranks";
  std::cout << "[tp-cpu] " << c->arch_name << " ranks " << size << ": max |logit diff| " << max_diff << " of max |logit| "
            << max_abs << ", greedy " << tp.greedy.size() << " tokens equal\n";
}

TEST(TensorParallelForward, LlamaAtTwoAndFourRanksEqualsTheWholeModel) {
  expect_tensor_parallel_equals_whole(test::tiny_llama_config(), 2);
  expect_tensor_parallel_equals_whole(test::tiny_llama_config(), 4);
}

TEST(TensorParallelForward, Qwen2WithBiasesAndTiedEmbeddingEqualsTheWholeModel) {
  expect_tensor_parallel_equals_whole(test::tiny_qwen2_config(), 2);
}

TEST(TensorParallelForward, MixtralExpertsSplitByWidthEqualTheWholeModel) {
  expect_tensor_parallel_equals_whole(test::tiny_mixtral_config(), 2);
}

TEST(TensorParallelForward, ThreadCommsSumInRankOrderAndGatherColumns) {
  auto comms = make_thread_comms(3);
  std::vector<std::vector<float>> data = {{1, 2}, {10, 20}, {100, 200}};
  std::vector<std::vector<float>> gathered(3, std::vector<float>(2 * 6));
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      comms[static_cast<size_t>(r)]->all_reduce_sum(data[static_cast<size_t>(r)].data(), 2);
      const float part[4] = {float(r), float(r) + 0.5f, float(10 + r), float(10 + r) + 0.5f};  // [2 rows, 2 cols]
      comms[static_cast<size_t>(r)]->all_gather_columns(part, 2, 2, 2 * r, gathered[static_cast<size_t>(r)].data(), 6);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(data[static_cast<size_t>(r)], (std::vector<float>{111, 222}));
    EXPECT_EQ(gathered[static_cast<size_t>(r)],
              (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f, 10, 10.5f, 11, 11.5f, 12, 12.5f}));
  }
}

}  // namespace
}  // namespace pagoda
