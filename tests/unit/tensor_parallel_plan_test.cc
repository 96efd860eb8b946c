// The tensor-parallel sharding plan (model/tensor_parallel_plan.h) on released models' shapes:
// heads and KV heads per rank (split and replicated), fused tensors, MoE experts, vocabulary
// padding, refusals, and that the shards of every weight tile it exactly at 1, 2, 4 and 8 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "model/tensor_parallel_plan.h"

namespace pagoda {
namespace {

ModelConfig dense(ArchFamily fam, int64_t V, int64_t D, int64_t F, int64_t L, int64_t H, int64_t KV, int64_t hd = 0) {
  ModelConfig c;
  c.family = fam;
  c.arch_name = arch_family_name(fam);
  c.vocab_size = V;
  c.hidden_size = D;
  c.intermediate_size = F;
  c.num_layers = L;
  c.num_heads = H;
  c.num_kv_heads = KV;
  c.head_dim = hd > 0 ? hd : D / H;
  c.rope_dim = c.head_dim;
  c.max_position_embeddings = 8192;
  return c;
}
ModelConfig llama3_8b() { return dense(ArchFamily::kLlama, 128256, 4096, 14336, 2, 32, 8); }
ModelConfig llama3_70b() { return dense(ArchFamily::kLlama, 128256, 8192, 28672, 2, 64, 8); }
ModelConfig qwen25_1_5b() {
  ModelConfig c = dense(ArchFamily::kQwen2, 151936, 1536, 8960, 2, 12, 2);
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  return c;
}
ModelConfig mixtral() {
  ModelConfig c = dense(ArchFamily::kMixtral, 32000, 4096, 14336, 2, 32, 8);
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.expert_intermediate_size = 14336;
  return c;
}
ModelConfig qwen3_moe() {  // Qwen3-30B-A3B
  ModelConfig c = dense(ArchFamily::kQwen3Moe, 151936, 2048, 6144, 2, 32, 4, 128);
  c.num_experts = 128;
  c.num_experts_per_tok = 8;
  c.expert_intermediate_size = 768;
  c.qk_norm = true;
  return c;
}
ModelConfig qwen2_moe() {  // Qwen1.5-MoE-A2.7B: a shared expert
  ModelConfig c = dense(ArchFamily::kQwen2Moe, 151936, 2048, 5632, 2, 16, 16);
  c.num_experts = 60;
  c.num_experts_per_tok = 4;
  c.expert_intermediate_size = 1408;
  c.shared_expert_intermediate_size = 5632;
  c.attention_bias = true;
  return c;
}
ModelConfig gemma2_9b() {
  ModelConfig c = dense(ArchFamily::kGemma2, 256000, 3584, 14336, 2, 16, 8, 256);
  c.tie_word_embeddings = true;
  c.sliding_window = 4096;
  c.sliding_layers = {true, false};
  return c;
}
ModelConfig phi3_mini() { return dense(ArchFamily::kPhi3, 32064, 3072, 8192, 2, 32, 32); }

const TensorShard& shard(const RankShards& r, const std::string& name) {
  for (const TensorShard& s : r.tensors)
    if (s.decl.gguf_name == name) return s;
  ADD_FAILURE() << name << " not in the plan";
  static TensorShard none;
  return none;
}

TensorParallelPlan plan_ok(const ModelConfig& c, int n, const ShardConstraints& k = {}) {
  auto p = plan_tensor_parallel(c, n, k);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? *p : TensorParallelPlan{};
}

TEST(TensorParallelPlan, Llama3_8bAtTwoRanks) {
  const auto p = plan_ok(llama3_8b(), 2);
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.kv_head_replicas, 1);
  const RankShards& r1 = p.ranks[1];
  EXPECT_EQ(r1.first_head, 16);
  EXPECT_EQ(r1.num_heads, 16);
  EXPECT_EQ(r1.first_kv_head, 4);
  EXPECT_EQ(r1.num_kv_heads, 4);
  const auto& q = shard(r1, "blk.1.attn_q.weight");
  EXPECT_EQ(q.kind, ShardKind::kColumnParallel);
  EXPECT_EQ(q.dim, 0);
  EXPECT_EQ(q.ranges[0].offset, 2048);
  EXPECT_EQ(q.shape, (std::vector<int64_t>{2048, 4096}));
  const auto& k = shard(r1, "blk.0.attn_k.weight");
  EXPECT_EQ(k.ranges[0].offset, 512);
  EXPECT_EQ(k.ranges[0].length, 512);
  const auto& o = shard(r1, "blk.0.attn_output.weight");
  EXPECT_EQ(o.kind, ShardKind::kRowParallel);
  EXPECT_EQ(o.dim, 1);
  EXPECT_EQ(o.shape, (std::vector<int64_t>{4096, 2048}));
  const auto& down = shard(r1, "blk.0.ffn_down.weight");
  EXPECT_EQ(down.ranges[0].offset, 7168);
  EXPECT_EQ(down.shape, (std::vector<int64_t>{4096, 7168}));
  EXPECT_EQ(shard(r1, "blk.0.attn_norm.weight").kind, ShardKind::kReplicated);
  // 128256 / 2 = 64128 = 1002 x 64: no padding needed.
  EXPECT_EQ(p.vocab_rows_per_rank, 64128);
  EXPECT_EQ(r1.vocab_begin, 64128);
  EXPECT_EQ(r1.vocab_end, 128256);
  EXPECT_EQ(shard(r1, "output.weight").kind, ShardKind::kVocabParallel);
}

TEST(TensorParallelPlan, Llama3_70bAtEightRanksOneKvHeadEach) {
  const auto p = plan_ok(llama3_70b(), 8);
  for (const RankShards& r : p.ranks) {
    EXPECT_EQ(r.num_heads, 8);
    EXPECT_EQ(r.num_kv_heads, 1);
    EXPECT_EQ(r.first_kv_head, r.rank);
    EXPECT_EQ(r.intermediate_size, 3584);
  }
  EXPECT_EQ(p.vocab_rows_per_rank, 16064);  // 16032 rounded up to 64
  EXPECT_EQ(p.ranks[7].vocab_end - p.ranks[7].vocab_begin, 128256 - 7 * 16064);
  EXPECT_EQ(shard(p.ranks[7], "token_embd.weight").padded_rows, 16064);
}

TEST(TensorParallelPlan, FewerKvHeadsThanRanksAreReplicated) {
  const auto p = plan_ok(qwen25_1_5b(), 4);  // 12 heads, 2 KV heads
  EXPECT_EQ(p.kv_head_replicas, 2);
  for (const RankShards& r : p.ranks) {
    EXPECT_EQ(r.num_heads, 3);
    EXPECT_EQ(r.num_kv_heads, 1);
    EXPECT_EQ(r.first_kv_head, r.rank / 2);
    // Every query head of the rank belongs to the rank's KV head's group (6 query heads per KV head).
    for (int64_t h = r.first_head; h < r.first_head + r.num_heads; ++h) EXPECT_EQ(h / 6, r.first_kv_head);
    const auto& kb = shard(r, "blk.0.attn_k.bias");
    EXPECT_EQ(kb.ranges[0].offset, r.first_kv_head * 128);
    EXPECT_EQ(kb.ranges[0].length, 128);
  }
  // Tied: no output.weight declared as required; the embedding is vocabulary-parallel.
  EXPECT_EQ(shard(p.ranks[0], "token_embd.weight").kind, ShardKind::kVocabParallel);
}

TEST(TensorParallelPlan, MoeExpertsSplitLikeADenseMlp) {
  const auto p = plan_ok(mixtral(), 4);
  const auto& gate = shard(p.ranks[2], "blk.0.ffn_gate_exps.weight");  // [E, Fe, D]
  EXPECT_EQ(gate.dim, 1);
  EXPECT_EQ(gate.shape, (std::vector<int64_t>{8, 3584, 4096}));
  EXPECT_EQ(gate.ranges[0].offset, 2 * 3584);
  const auto& down = shard(p.ranks[2], "blk.0.ffn_down_exps.weight");  // [E, D, Fe]
  EXPECT_EQ(down.kind, ShardKind::kRowParallel);
  EXPECT_EQ(down.dim, 2);
  EXPECT_EQ(down.shape, (std::vector<int64_t>{8, 4096, 3584}));
  EXPECT_EQ(shard(p.ranks[2], "blk.0.ffn_gate_inp.weight").kind, ShardKind::kReplicated);

  const auto q3 = plan_ok(qwen3_moe(), 4);  // 4 KV heads at 4 ranks: one each; per-head q/k norm replicated
  EXPECT_EQ(q3.ranks[3].first_kv_head, 3);
  EXPECT_EQ(shard(q3.ranks[0], "blk.0.attn_q_norm.weight").kind, ShardKind::kReplicated);
  EXPECT_EQ(q3.ranks[3].expert_intermediate_size, 192);

  const auto q2 = plan_ok(qwen2_moe(), 2);
  const auto& sh = shard(q2.ranks[1], "blk.0.ffn_down_shexp.weight");
  EXPECT_EQ(sh.ranges[0].offset, 2816);
  EXPECT_EQ(shard(q2.ranks[1], "blk.0.ffn_gate_inp_shexp.weight").kind, ShardKind::kReplicated);
}

TEST(TensorParallelPlan, GemmaHeadDimIsNotHiddenOverHeads) {
  const auto p = plan_ok(gemma2_9b(), 2);  // 16 x 256 = 4096 query rows, hidden 3584
  const auto& q = shard(p.ranks[1], "blk.0.attn_q.weight");
  EXPECT_EQ(q.shape, (std::vector<int64_t>{2048, 3584}));
  EXPECT_EQ(shard(p.ranks[1], "blk.0.attn_output.weight").shape, (std::vector<int64_t>{3584, 2048}));
  EXPECT_EQ(shard(p.ranks[1], "blk.0.post_ffw_norm.weight").kind, ShardKind::kReplicated);
}

TEST(TensorParallelPlan, FusedQkvAndGateUpTakeOneSliceOfEachPart) {
  const auto p = plan_ok(phi3_mini(), 2);  // qkv [3 x 3072, 3072], gate_up [2 x 8192, 3072]
  const auto& qkv = shard(p.ranks[1], "blk.0.attn_qkv.weight");
  ASSERT_EQ(qkv.ranges.size(), 3u);
  EXPECT_EQ(qkv.ranges[0].offset, 1536);
  EXPECT_EQ(qkv.ranges[1].offset, 3072 + 1536);
  EXPECT_EQ(qkv.ranges[2].offset, 6144 + 1536);
  EXPECT_EQ(qkv.shape[0], 3 * 1536);
  const auto& gu = shard(p.ranks[1], "blk.0.ffn_up.weight");
  ASSERT_EQ(gu.ranges.size(), 2u);
  EXPECT_EQ(gu.ranges[0].offset, 4096);
  EXPECT_EQ(gu.ranges[1].offset, 8192 + 4096);
  EXPECT_EQ(gu.shape, (std::vector<int64_t>{8192, 3072}));
}

TEST(TensorParallelPlan, RefusesWhatDoesNotDivide) {
  auto expect_refused = [](const ModelConfig& c, int n, const std::string& words, const ShardConstraints& k = {}) {
    auto p = plan_tensor_parallel(c, n, k);
    ASSERT_FALSE(p.ok()) << "size " << n;
    EXPECT_NE(p.status().to_string().find(words), std::string::npos) << p.status().to_string();
  };
  expect_refused(qwen25_1_5b(), 8, "query heads");     // 12 heads
  expect_refused(dense(ArchFamily::kLlama, 1000, 768, 3072, 1, 12, 12), 8, "query heads");
  expect_refused(dense(ArchFamily::kLlama, 1000, 768, 3072, 1, 12, 3), 2, "KV heads");  // 3 KV heads at 2
  expect_refused(dense(ArchFamily::kLlama, 1000, 1024, 3000, 1, 16, 8), 16, "intermediate");
  expect_refused(llama3_8b(), 0, "[1, 1024]");
  ModelConfig olmoe = mixtral();
  olmoe.family = ArchFamily::kOlmoe;
  olmoe.qk_norm_full = true;
  expect_refused(olmoe, 2, "cross-rank");
  // Quantization blocks: 14336 / 8 = 1792 = 7 x 256, a whole number of K-quant super-blocks;
  // 14336 / 4 = 3584 is not a multiple of 1024.
  EXPECT_TRUE(plan_tensor_parallel(llama3_8b(), 8, {.k_block = 256}).ok());
  expect_refused(llama3_8b(), 4, "quantization block", {.k_block = 1024});
  expect_refused(qwen25_1_5b(), 4, "row tile", {.k_block = 1, .n_tile = 256});  // 3 heads x 128 rows
  EXPECT_TRUE(plan_tensor_parallel(llama3_8b(), 1, {.k_block = 1 << 20}).ok());  // size 1 cuts nothing
}

// Every weight's shards cover it exactly once: along the split dimension the ranks' ranges,
// replicas of a replicated KV head counted once, are a partition of [0, full); a replicated
// tensor is whole on every rank.
TEST(TensorParallelPlan, ShardsTileEveryWeight) {
  const std::vector<std::pair<const char*, ModelConfig>> models = {
      {"llama3-8b", llama3_8b()}, {"llama3-70b", llama3_70b()}, {"qwen2.5", qwen25_1_5b()},
      {"mixtral", mixtral()},     {"qwen3-moe", qwen3_moe()},   {"qwen2-moe", qwen2_moe()},
      {"gemma2", gemma2_9b()},    {"phi3", phi3_mini()}};
  int checked = 0;
  for (const auto& [name, c] : models) {
    for (int n : {1, 2, 4, 8}) {
      auto p = plan_tensor_parallel(c, n);
      if (!p.ok()) {  // only heads that do not divide may refuse here
        EXPECT_NE(p.status().to_string().find("heads"), std::string::npos) << name << " " << p.status().to_string();
        continue;
      }
      SCOPED_TRACE(std::string(name) + " tp " + std::to_string(n));
      for (size_t t = 0; t < p->table.size(); ++t) {
        const TensorDecl& d = p->table[t];
        const TensorShard& s0 = p->ranks[0].tensors[t];
        if (s0.kind == ShardKind::kReplicated) {
          for (const RankShards& r : p->ranks) EXPECT_EQ(r.tensors[t].shape, d.shape) << d.gguf_name;
          continue;
        }
        const int64_t full = d.shape[static_cast<size_t>(s0.dim)];
        std::vector<int> cover(static_cast<size_t>(full), 0);
        std::map<int64_t, int> seen_offsets;  // a replicated KV slice is counted once
        for (const RankShards& r : p->ranks) {
          const TensorShard& s = r.tensors[t];
          ASSERT_EQ(s.dim, s0.dim);
          ASSERT_EQ(s.kind, s0.kind);
          int64_t len = 0;
          for (const ShardRange& g : s.ranges) {
            ASSERT_GE(g.offset, 0);
            ASSERT_LE(g.offset + g.length, full) << d.gguf_name;
            len += g.length;
            if (seen_offsets[g.offset]++ > 0 && p->kv_head_replicas > 1) continue;
            for (int64_t i = g.offset; i < g.offset + g.length; ++i) ++cover[static_cast<size_t>(i)];
          }
          for (size_t i = 0; i < s.shape.size(); ++i)
            EXPECT_EQ(s.shape[i], static_cast<int>(i) == s.dim ? len : d.shape[i]) << d.gguf_name;
          if (s.kind == ShardKind::kVocabParallel) {
            EXPECT_GE(s.padded_rows, len);
          }
        }
        for (int64_t i = 0; i < full; ++i)
          ASSERT_EQ(cover[static_cast<size_t>(i)], 1) << d.gguf_name << " element " << i << " of dim " << s0.dim;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 500);
}

TEST(TensorParallelPlan, ShardBytesSumToTheWeightAtSplitTensors) {
  const auto p = plan_ok(llama3_8b(), 4);
  const TensorDecl* down = nullptr;
  for (const TensorDecl& d : p.table)
    if (d.gguf_name == "blk.0.ffn_down.weight") down = &d;
  ASSERT_NE(down, nullptr);
  const int64_t full = 4096LL * 14336 * 2;
  int64_t sum = 0;
  for (const RankShards& r : p.ranks) sum += shard_bytes(shard(r, down->gguf_name), full);
  EXPECT_EQ(sum, full);
}

}  // namespace
}  // namespace pagoda
