// Paged attention vs a dense reference built by gathering the blocks; RoPE + KV write vs the
// reference rotation; on random block tables, many lengths, GQA/MQA, every KV dtype and ISA level.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "backend/reference/reference_ops.h"
#include "common/half.h"
#include "ops/attention.h"
#include "ops/rope.h"
#include "runtime/kv_cache_storage.h"
#include "test_util.h"

namespace pagoda {
namespace {

using test::nmse;
using test::random_floats;

void fill_cache(KvCacheStorage& kv, uint64_t seed) {
  KvLayerView l = kv.layer(0);
  const int64_t n = l.num_blocks * l.block_elems();
  auto vals = random_floats(2 * n, seed, -2, 2);
  for (int64_t i = 0; i < n; ++i) {
    if (l.dtype == DType::kF32) {
      static_cast<float*>(l.k)[i] = vals[i];
      static_cast<float*>(l.v)[i] = vals[n + i];
    } else if (l.dtype == DType::kF16) {
      static_cast<uint16_t*>(l.k)[i] = f32_to_fp16(vals[i]);
      static_cast<uint16_t*>(l.v)[i] = f32_to_fp16(vals[n + i]);
    } else {
      static_cast<uint16_t*>(l.k)[i] = f32_to_bf16(vals[i]);
      static_cast<uint16_t*>(l.v)[i] = f32_to_bf16(vals[n + i]);
    }
  }
}

struct Case {
  int64_t heads, kv_heads, head_dim, block_size;
  DType kv_dtype;
  int64_t window;
  float softcap = 0.0f;
};

class AttentionByIsa : public ::testing::TestWithParam<IsaLevel> {};

TEST_P(AttentionByIsa, PagedMatchesDenseReference) {
  test::ScopedIsaCap cap(GetParam());
  const Case cases[] = {
      {9, 3, 64, 16, DType::kF32, 0},   {8, 4, 8, 16, DType::kF32, 0},    {32, 8, 128, 16, DType::kF16, 0},
      {4, 1, 64, 32, DType::kBF16, 0},  {6, 6, 64, 8, DType::kF32, 0},    {8, 2, 64, 16, DType::kF32, 37},
      {40, 2, 64, 16, DType::kF16, 0},  {4, 2, 96, 24, DType::kF32, 0},
      // Gemma: attention soft-cap (Gemma 2) with a window; head_dim 256 with one kv head (Gemma 3).
      {8, 2, 64, 16, DType::kF32, 37, 1.5f}, {4, 1, 256, 16, DType::kF16, 0, 2.0f}, {4, 1, 256, 16, DType::kF32, 512},
  };
  std::mt19937 rng(1234);
  for (const Case& cs : cases) {
    for (int pool_size : {1, 2}) {
      ThreadPool pool(pool_size);
      const ModelConfig cfg = test::attention_config(cs.heads, cs.kv_heads, cs.head_dim);
      const int64_t num_blocks = 200;
      KvCacheStorage kv(cfg, num_blocks, cs.block_size, cs.kv_dtype);
      fill_cache(kv, rng());
      // (num_queries, context_len): decode, short/long prefill, chunked prefill, long decode (split-KV).
      const std::vector<std::pair<int32_t, int32_t>> shapes = {{1, 1}, {1, 17}, {5, 5}, {33, 33}, {7, 100}, {1, 1000}, {3, 700}};
      std::vector<int32_t> perm(num_blocks);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<std::vector<int32_t>> tables;
      std::vector<AttentionSeq> seqs;
      int32_t rows = 0;
      size_t next_block = 0;
      for (auto [nq, ctx] : shapes) {
        const int64_t nb = (ctx + cs.block_size - 1) / cs.block_size;
        std::vector<int32_t> table;
        for (int64_t b = 0; b < nb; ++b) table.push_back(perm[(next_block++) % num_blocks]);  // may share blocks: fine for reads
        tables.push_back(table);
        seqs.push_back({rows, nq, ctx, {}});
        rows += nq;
      }
      for (size_t i = 0; i < seqs.size(); ++i) seqs[i].block_table = tables[i];
      const int64_t width = cs.heads * cs.head_dim;
      auto qv = random_floats(rows * width, rng(), -1, 1);
      Tensor q = Tensor::empty(DType::kF32, {rows, width}), out = Tensor::empty(DType::kF32, {rows, width});
      std::memcpy(q.data(), qv.data(), qv.size() * 4);
      PagedAttentionParams p;
      p.q = &q;
      p.out = &out;
      p.seqs = seqs;
      p.cache = kv.layer(0);
      p.num_heads = cs.heads;
      p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(cs.head_dim)));
      p.sliding_window = cs.window;
      p.softcap = cs.softcap;
      paged_attention(p, pool);
      for (size_t i = 0; i < seqs.size(); ++i) {
        const auto& s = seqs[i];
        std::vector<float> ref(s.num_queries * width);
        reference::dense_attention(qv.data() + s.query_begin * width, ref.data(), s.num_queries, s.context_len, s.block_table,
                                   kv.layer(0), cs.heads, p.scale, cs.window, cs.softcap);
        const double e = nmse(out.data_as<float>() + s.query_begin * width, ref.data(), s.num_queries * width);
        EXPECT_LT(e, 1e-10) << "heads " << cs.heads << "/" << cs.kv_heads << " d " << cs.head_dim << " bs " << cs.block_size
                            << " " << dtype_name(cs.kv_dtype) << " window " << cs.window << " softcap " << cs.softcap << " seq (" << s.num_queries << ", "
                            << s.context_len << ") threads " << pool_size;
      }
    }
  }
}

TEST_P(AttentionByIsa, RopeKvWriteMatchesReference) {
  test::ScopedIsaCap cap(GetParam());
  ThreadPool pool(2);
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
    for (DType dt : {DType::kF32, DType::kF16}) {
      ModelConfig cfg = test::attention_config(8, 2, 64);
      cfg.rope_layout = layout;
      cfg.rope_theta = 500000;
      cfg.rope_scaling.kind = RopeScaling::Kind::kLlama3;
      cfg.rope_scaling.factor = 8;
      cfg.rope_scaling.original_max_position = 64;
      RopeTable rope(cfg.rope_spec(), 512);
      KvCacheStorage kv(cfg, 8, 16, dt);
      const int64_t T = 6;
      std::vector<int32_t> positions = {0, 1, 2, 77, 78, 300};
      std::vector<int64_t> slots = {5, 6, 7, 40, -1, 127};
      auto qv = random_floats(T * 8 * 64, 11), kvv = random_floats(T * 2 * 64, 12), vv = random_floats(T * 2 * 64, 13);
      Tensor q = Tensor::empty(DType::kF32, {T, 8 * 64}), k = Tensor::empty(DType::kF32, {T, 2 * 64}),
             v = Tensor::empty(DType::kF32, {T, 2 * 64});
      std::memcpy(q.data(), qv.data(), qv.size() * 4);
      std::memcpy(k.data(), kvv.data(), kvv.size() * 4);
      std::memcpy(v.data(), vv.data(), vv.size() * 4);
      RopeKvWriteParams p;
      p.q = &q;
      p.k = &k;
      p.v = &v;
      p.positions = positions;
      p.slots = slots;
      p.rope = &rope;
      p.num_heads = 8;
      p.cache = kv.layer(0);
      rope_kv_write(p, pool);
      auto qref = qv, kref = kvv;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t h = 0; h < 8; ++h) reference::rope_head(qref.data() + (t * 8 + h) * 64, 64, positions[t], rope.inv_freq(), layout);
        for (int64_t h = 0; h < 2; ++h) reference::rope_head(kref.data() + (t * 2 + h) * 64, 64, positions[t], rope.inv_freq(), layout);
      }
      EXPECT_LT(nmse(q.data_as<float>(), qref.data(), T * 8 * 64), 1e-10);
      // The table rounds angles to f32 as transformers does; the reference rotates in double.
      const double tol = dt == DType::kF32 ? 2e-5 : 2e-3;
      for (int64_t t = 0; t < T; ++t) {
        if (slots[t] < 0) continue;
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t i = 0; i < 64; ++i) {
            ASSERT_NEAR(reference::kv_read_k(kv.layer(0), slots[t], h, i), kref[(t * 2 + h) * 64 + i], tol);
            ASSERT_NEAR(reference::kv_read_v(kv.layer(0), slots[t], h, i), vv[(t * 2 + h) * 64 + i], tol);
          }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsa, AttentionByIsa, ::testing::ValuesIn(test::supported_isa_levels()),
                         [](const auto& info) { std::string s = isa_level_name(info.param); for (auto& c : s) if (c == '-') c = '_'; return s; });

TEST(RopeTable, Llama3ScalingMatchesFormula) {
  ModelConfig cfg = test::attention_config(1, 1, 64);
  cfg.rope_theta = 500000;
  cfg.rope_scaling.kind = RopeScaling::Kind::kLlama3;
  cfg.rope_scaling.factor = 8;
  cfg.rope_scaling.low_freq_factor = 1;
  cfg.rope_scaling.high_freq_factor = 4;
  cfg.rope_scaling.original_max_position = 8192;
  RopeTable t(cfg.rope_spec(), 4);
  // Highest frequency (wavelength 2*pi < 8192/4): unchanged. Lowest (wavelength > 8192): / 8.
  const double f0 = 1.0, flast = 1.0 / std::pow(500000.0, 62.0 / 64.0);
  EXPECT_NEAR(t.inv_freq()[0], f0, 1e-7);
  EXPECT_NEAR(t.inv_freq()[31], flast / 8, flast * 1e-6);
  // cos/sin table entries agree with the frequencies.
  EXPECT_NEAR(t.cos(3)[5], std::cos(3 * t.inv_freq()[5]), 1e-6);
  EXPECT_NEAR(t.sin(3)[5], std::sin(3 * t.inv_freq()[5]), 1e-6);
}

}  // namespace
}  // namespace pagoda
