// One rank's checkpoint under tensor parallelism (model/tensor_parallel_source.h), on random
// weights of tiny configs (model/random_weights.h: every tensor distinct values):
//   1. every rank's declared tensor has its shard's shape, and each of its elements is the full
//      tensor's element at the place the plan's ranges say (checked by index, not by re-cutting),
//      for a dense GQA Llama at 2 ranks and at 4 (KV heads replicated), and Mixtral's experts;
//   2. each rank's model loads through the family loader from its config and its shards (the
//      shapes agree with the table the rank's config declares), for Llama, Qwen2 (q/k/v biases,
//      tied embedding) and Mixtral;
//   3. a cut along K copies whole quantization blocks and refuses a cut inside one; size 1 is the
//      checkpoint itself (views).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/half.h"
#include "model/family.h"
#include "model/random_weights.h"
#include "model/tensor_parallel_source.h"
#include "tiny_hf_configs.h"

namespace pagoda {
namespace {


ModelConfig parse(const nlohmann::json& j) {
  auto c = model_config_from_hf_json(j);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

std::shared_ptr<const WeightSource> random_checkpoint(const ModelConfig& c) {
  auto src = make_random_weight_source(c, "cfg", DType::kBF16, /*seed=*/7, 2);
  EXPECT_TRUE(src.ok()) << src.status().to_string();
  return std::move(src).value();
}

// The full index of position `i` of the cut dimension: the ranges laid end to end.
int64_t full_index(const std::vector<ShardRange>& ranges, int64_t i) {
  for (const ShardRange& r : ranges) {
    if (i < r.length) return r.offset + i;
    i -= r.length;
  }
  ADD_FAILURE() << "index past the ranges";
  return 0;
}

// Every element of `part` (bf16, 1-3 dims) against `full` through the ranges of dimension `dim`.
void expect_elements_from(const Tensor& full, const Tensor& part, int dim, const std::vector<ShardRange>& ranges,
                          const std::string& name) {
  ASSERT_EQ(part.ndim(), full.ndim()) << name;
  std::vector<int64_t> fs = full.shape(), ps = part.shape();
  while (fs.size() < 3) fs.insert(fs.begin(), 1), ps.insert(ps.begin(), 1);
  const int d3 = dim + (3 - full.ndim());
  const uint16_t* f = full.data_as<const uint16_t>();
  const uint16_t* p = part.data_as<const uint16_t>();
  int64_t mismatches = 0;
  for (int64_t a = 0; a < ps[0]; ++a)
    for (int64_t b = 0; b < ps[1]; ++b)
      for (int64_t c = 0; c < ps[2]; ++c) {
        int64_t idx[3] = {a, b, c};
        idx[d3] = full_index(ranges, idx[d3]);
        const uint16_t want = f[(idx[0] * fs[1] + idx[1]) * fs[2] + idx[2]];
        if (p[(a * ps[1] + b) * ps[2] + c] != want) ++mismatches;
      }
  EXPECT_EQ(mismatches, 0) << name;
}

void expect_ranks_hold_their_slices(const nlohmann::json& j, int size) {
  const ModelConfig c = parse(j);
  const auto full = random_checkpoint(c);
  auto plan = plan_tensor_parallel(c, size);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  for (int r = 0; r < size; ++r) {
    auto rank = tensor_parallel_weight_source(full, *plan, r);
    ASSERT_TRUE(rank.ok()) << rank.status().to_string();
    for (const TensorShard& s : plan->ranks[static_cast<size_t>(r)].tensors) {
      if (!s.decl.required || s.decl.hf_name.empty()) continue;
      const bool per_expert = s.decl.experts > 0;
      for (int64_t e = 0; e < (per_expert ? s.decl.experts : 1); ++e) {
        const std::string name = per_expert ? expert_tensor_name(s.decl, e) : s.decl.hf_name;
        const Tensor* want = full->find(name);
        const Tensor* got = (*rank)->find(name);
        ASSERT_NE(want, nullptr) << name;
        ASSERT_NE(got, nullptr) << name;
        std::vector<int64_t> shape = s.shape;
        if (per_expert) shape.erase(shape.begin());
        EXPECT_EQ(got->shape(), shape) << name << " rank " << r << " (" << shard_kind_name(s.kind) << ")";
        if (s.kind == ShardKind::kReplicated) {
          EXPECT_EQ(got->data(), want->data()) << name << ": a replicated tensor is the checkpoint's own";
          continue;
        }
        expect_elements_from(*want, *got, per_expert ? s.dim - 1 : s.dim, s.ranges, name + " rank " + std::to_string(r));
      }
    }
  }
}

TEST(TensorParallelSource, EveryShardHoldsItsSliceOfTheFullTensor) {
  expect_ranks_hold_their_slices(test::tiny_llama_config(), 2);
  expect_ranks_hold_their_slices(test::tiny_llama_config(), 4);  // 2 KV heads on 4 ranks: each held by two ranks
  expect_ranks_hold_their_slices(test::tiny_mixtral_config(), 2);
}

TEST(TensorParallelSource, EachRankLoadsThroughTheFamilyLoader) {
  for (const auto& j : {test::tiny_llama_config(), test::tiny_qwen2_config(), test::tiny_mixtral_config()}) {
    const ModelConfig c = parse(j);
    const auto full = random_checkpoint(c);
    auto plan = plan_tensor_parallel(c, 2);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    for (int r = 0; r < 2; ++r) {
      auto rc = rank_model_config(c, *plan, r);
      ASSERT_TRUE(rc.ok());
      EXPECT_EQ(rc->num_heads * 2, c.num_heads);
      EXPECT_EQ(rc->vocab_size, plan->ranks[r].vocab_end - plan->ranks[r].vocab_begin);
      auto rank = tensor_parallel_weight_source(full, *plan, r);
      ASSERT_TRUE(rank.ok()) << rank.status().to_string();
      const WeightSource& src = **rank;
      TensorLookup lookup = [&src](const std::string& name) { return src.get(name); };
      ModelLoadParams params;
      params.max_positions = 64;
      auto model = family_of(*rc).load(*rc, WeightNaming::kHuggingFace, lookup, params);
      ASSERT_TRUE(model.ok()) << c.arch_name << " rank " << r << ": " << model.status().to_string();
    }
  }
}

TEST(TensorParallelSource, ColumnCutsCopyWholeQuantBlocks) {
  // q8_0 rows of 64 values: two 34-byte blocks a row.
  const auto& tr = dtype_traits(DType::kQ8_0);
  ASSERT_EQ(tr.block_size, 32);
  Tensor t = Tensor::empty(DType::kQ8_0, {3, 64});
  auto* b = static_cast<uint8_t*>(t.data());
  for (int64_t i = 0; i < t.nbytes(); ++i) b[i] = static_cast<uint8_t>(i * 7 + 1);
  auto cut = cut_tensor(t, 1, {{32, 32}});
  ASSERT_TRUE(cut.ok()) << cut.status().to_string();
  EXPECT_EQ(cut->shape(), (std::vector<int64_t>{3, 32}));
  for (int64_t row = 0; row < 3; ++row)
    EXPECT_EQ(std::memcmp(cut->row_ptr(row), t.row_ptr(row) + tr.block_bytes, static_cast<size_t>(tr.block_bytes)), 0);
  auto inside = cut_tensor(t, 1, {{16, 32}});
  ASSERT_FALSE(inside.ok());
  EXPECT_NE(inside.status().message().find("block"), std::string::npos) << inside.status().message();
  EXPECT_FALSE(cut_tensor(t, 0, {{2, 2}}).ok()) << "a range past the dimension";
  EXPECT_FALSE(cut_tensor(t, 2, {{0, 1}}).ok()) << "no such dimension";
}

TEST(TensorParallelSource, SizeOneIsTheCheckpointItself) {
  const ModelConfig c = parse(test::tiny_llama_config());
  const auto full = random_checkpoint(c);
  auto plan = plan_tensor_parallel(c, 1);
  ASSERT_TRUE(plan.ok());
  auto rank = tensor_parallel_weight_source(full, *plan, 0);
  ASSERT_TRUE(rank.ok());
  EXPECT_EQ((*rank)->names(), full->names());
  for (const auto& n : full->names()) EXPECT_EQ((*rank)->find(n)->data(), full->find(n)->data()) << n;
  EXPECT_FALSE(tensor_parallel_weight_source(full, *plan, 1).ok()) << "rank 1 of size 1";
  EXPECT_FALSE((*rank)->get("model.layers.9.nothing").ok());
}

}  // namespace
}  // namespace pagoda
