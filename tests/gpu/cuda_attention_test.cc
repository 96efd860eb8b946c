// The attention path's CUDA kernels against plain references: RoPE + paged KV write, split-KV
// (decode) attention and tensor-core prefill attention against a dense reference built by
// gathering the blocks (random block tables, many lengths, GQA/MQA, windows, every KV dtype), and
// the decode attention with the RoPE + KV write fused in against the separate kernels. Every case
// skips with a message when no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "backend/reference/reference_ops.h"
#include "cuda_fixtures.h"
#include "gpu_test_util.h"

namespace pagoda {
namespace {

#if !PAGODA_HAVE_CUDA
TEST(CudaAttention, Skipped) { PAGODA_REQUIRE_GPU(); }
#else

using test::AttnCase;
using test::download_as;
using test::kv_index;
using test::nmse;
using test::PagedFixture;
using test::random_floats;
using test::RopeFixture;
using test::round_to;
using test::RowBatch;
using test::to_device;
using test::to_host;
using test::upload_as;

TEST(CudaAttention, RopeKvWriteMatchesReference) {
  PAGODA_REQUIRE_GPU();
  struct Case {
    RopeLayout layout;
    bool bias, qk_norm;
    DType kv;
    int64_t dh;
  };
  const Case cases[] = {{RopeLayout::kInterleaved, false, false, DType::kF32, 64},
                        {RopeLayout::kHalfSplit, true, false, DType::kBF16, 64},
                        {RopeLayout::kHalfSplit, false, true, DType::kF16, 128},
                        {RopeLayout::kInterleaved, true, true, DType::kF32, 16},
                        {RopeLayout::kHalfSplit, true, true, DType::kF8E4M3, 128},
                        {RopeLayout::kInterleaved, false, false, DType::kF8E4M3, 64}};
  for (const Case& cs : cases) {
    const int64_t H = 8, KVH = 2, D = cs.dh, bs = 16, blocks = 8, T = 6;
    const std::vector<int32_t> pos = {0, 1, 2, 77, 78, 300};
    const std::vector<int32_t> slots = {5, 6, 7, 40, -1, 127};
    const RopeFixture rf(H, KVH, D, cs.layout, true, 512, pos, slots, 11);
    const int64_t W = (H + 2 * KVH) * D;
    const std::vector<float>&qkv = rf.qkv, &bias = rf.bias, &qn = rf.qn, &kn = rf.kn;
    const RopeTable& rope = *rf.rope;
    const int64_t cache_elems = blocks * KVH * bs * D;
    const int64_t eb = row_bytes(cs.kv, 1);
    cuda::DeviceBuffer kc(cache_elems * eb), vc(cache_elems * eb), q_out(T * H * D * 4);
    CUDA_CHECK(cudaMemset(kc.get(), 0, kc.bytes()));
    CUDA_CHECK(cudaMemset(vc.get(), 0, vc.bytes()));
    const cuda::RopeKvParams p =
        rf.params(cs.bias, cs.qk_norm, q_out.as<float>(), {kc.get(), vc.get(), cs.kv, blocks, bs, KVH, D});
    cuda::rope_kv_write(p, nullptr);
    auto q_got = to_host<float>(q_out, T * H * D);
    auto k_got = download_as(kc, cache_elems, cs.kv), v_got = download_as(vc, cache_elems, cs.kv);
    // Reference: bias, per-head norm (double), rotation (double angles).
    std::vector<float> q_ref(T * H * D);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t hh = 0; hh < H + 2 * KVH; ++hh) {
        std::vector<float> x(qkv.begin() + t * W + hh * D, qkv.begin() + t * W + hh * D + D);
        if (cs.bias)
          for (int64_t d = 0; d < D; ++d) x[d] += bias[hh * D + d];
        const bool is_q = hh < H, is_k = !is_q && hh < H + KVH;
        if (cs.qk_norm && (is_q || is_k)) reference::rms_norm(x.data(), is_q ? qn.data() : kn.data(), 1, D, 1e-6, x.data());
        if (is_q || is_k) reference::rope_head(x.data(), D, pos[t], rope.inv_freq(), cs.layout);
        if (is_q) {
          std::copy(x.begin(), x.end(), q_ref.begin() + (t * H + hh) * D);
        } else if (slots[t] >= 0) {
          const int64_t h = is_k ? hh - H : hh - H - KVH;
          const auto& got = is_k ? k_got : v_got;
          // E4M3 keeps 3 mantissa bits: half an ulp is 1/16 of the value (2^-10 below 2^-6).
          const double tol = cs.kv == DType::kF32 ? 3e-5 : cs.kv == DType::kBF16 ? 2e-2 : cs.kv == DType::kF8E4M3 ? 7e-2 : 3e-3;
          for (int64_t d = 0; d < D; ++d)
            ASSERT_NEAR(got[kv_index(slots[t], h, d, KVH, bs, D)], x[d], tol * std::max(1.0f, std::abs(x[d])))
                << (is_k ? "K" : "V") << " token " << t << " head " << h << " dim " << d;
        }
      }
    }
    EXPECT_LT(nmse(q_got, q_ref), 1e-9) << "layout " << rope_layout_name(cs.layout) << " D " << D;
    // Slot -1 wrote nothing: its position's rows are still zero everywhere they are not another token's slot.
  }
}

TEST(CudaAttention, SplitKvRowAttentionMatchesDenseReference) {
  PAGODA_REQUIRE_GPU();
  const AttnCase cases[] = {
      {8, 2, 64, 16, DType::kBF16, 0, DType::kF32},   {32, 8, 128, 16, DType::kF16, 0, DType::kF32},
      {9, 3, 64, 16, DType::kF32, 0, DType::kF32},    {4, 1, 8, 16, DType::kF32, 0, DType::kF32},
      {8, 4, 16, 16, DType::kF32, 0, DType::kF32},    {4, 2, 96, 24, DType::kF32, 0, DType::kF32},
      {14, 2, 64, 16, DType::kBF16, 0, DType::kBF16}, {8, 2, 64, 16, DType::kF32, 37, DType::kF32},
      {4, 4, 256, 16, DType::kBF16, 0, DType::kF32},  {16, 8, 128, 32, DType::kBF16, 0, DType::kBF16},
      {8, 2, 32, 8, DType::kF16, 0, DType::kF32},
      // Block sizes that do not divide a 64-key tile (8, 48, 1), GQA 8 at head_dim 64 and 128, a
      // window with GQA; GQA 7 (Qwen2.5) and 16 (two tensor-core head chunks).
      {16, 2, 128, 8, DType::kF16, 0, DType::kF32},   {16, 2, 64, 48, DType::kBF16, 0, DType::kF32},
      {8, 8, 128, 48, DType::kF16, 0, DType::kBF16},  {8, 2, 64, 1, DType::kBF16, 0, DType::kF32},
      {32, 8, 128, 16, DType::kBF16, 300, DType::kF32},
      {28, 4, 128, 16, DType::kBF16, 0, DType::kBF16}, {16, 1, 64, 16, DType::kF16, 0, DType::kF32},
      // FP8 E4M3 caches: tensor cores at block sizes a multiple of 16 (head_dim 64 and 128, a
      // window, GQA 7 with a window at head_dim 64), the SIMT kernel only at block size 8.
      {32, 8, 128, 16, DType::kF8E4M3, 0, DType::kF32}, {16, 2, 64, 32, DType::kF8E4M3, 0, DType::kBF16},
      {32, 8, 128, 16, DType::kF8E4M3, 300, DType::kF32}, {8, 2, 128, 8, DType::kF8E4M3, 0, DType::kF32},
      {28, 4, 64, 16, DType::kF8E4M3, 37, DType::kF32},
      // Gemma 2's score soft-cap (0.25 after the 1/sqrt(d) scale: it bends most scores): the tiny
      // model's head_dim 32 with a window, the 2B / 9B models' 256 (SIMT), the 27B's 128 (tensor
      // cores, a window, an FP8 cache).
      {8, 4, 32, 16, DType::kF32, 16, DType::kF32, 0.25f},   {8, 4, 256, 16, DType::kBF16, 0, DType::kF32, 0.25f},
      {32, 16, 128, 16, DType::kBF16, 300, DType::kF32, 0.25f}, {16, 8, 128, 16, DType::kF16, 0, DType::kBF16, 0.25f},
      {16, 8, 128, 16, DType::kF8E4M3, 37, DType::kF32, 0.25f},
  };
  std::mt19937 rng(99);
  for (const AttnCase& cs : cases) {
    const int64_t num_blocks = 600;
    PagedFixture fx(cs, num_blocks, rng());
    // (2, 9000): more than kRowMaxSplits * kRowSplitKeys keys, so splits longer than 256 keys even
    // when a row may take 32.
    const std::vector<std::pair<int32_t, int32_t>> shapes = {{1, 1},    {1, 17},   {5, 5},    {33, 33}, {7, 100},
                                                             {1, 1000}, {3, 700},  {1, 2500}, {2, 9000}};
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const int64_t stride = 9100 / cs.block_size + 2;
    std::vector<int32_t> tables(shapes.size() * stride, 0);
    std::vector<std::vector<int32_t>> seq_tables;
    std::vector<int32_t> row_tok, row_seq, row_ctx;
    int32_t T = 0;
    size_t next = 0;
    for (size_t s = 0; s < shapes.size(); ++s) {
      const auto [nq, ctx] = shapes[s];
      std::vector<int32_t> table;
      for (int64_t b = 0; b < (ctx + cs.block_size - 1) / cs.block_size; ++b) table.push_back(perm[(next++) % num_blocks]);
      std::copy(table.begin(), table.end(), tables.begin() + s * stride);
      seq_tables.push_back(table);
      for (int32_t i = 0; i < nq; ++i) {
        row_tok.push_back(T + i);
        row_seq.push_back(static_cast<int32_t>(s));
        row_ctx.push_back(ctx - nq + i + 1);
      }
      T += nq;
    }
    // One padding row (context 0) at the end: must come out as zeros.
    row_tok.push_back(T);
    row_seq.push_back(0);
    row_ctx.push_back(0);
    const int64_t width = cs.heads * cs.head_dim;
    auto q = random_floats((T + 1) * width, rng(), -1, 1);
    auto dq = to_device(q);
    const RowBatch rb(row_tok, row_seq, row_ctx, tables, stride, cs);
    cuda::DeviceBuffer out((T + 1) * width * 4);
    cuda::RowAttentionParams p = rb.params(cs, dq.as<float>(), out.get(), fx.layer());
    // 16-bit caches, and FP8 ones at block sizes a multiple of 16, at head_dim 64 / 128 have a
    // tensor-core kernel (Q and P rounded to the 16-bit type, f16 for FP8: the prefill kernel's
    // bounds); everything runs the f32 SIMT kernel too.
    const bool has_mma = cs.kv != DType::kF32 && (cs.head_dim == 64 || cs.head_dim == 128) &&
                         (cs.kv != DType::kF8E4M3 || cs.block_size % 16 == 0);
    // The tensor-core kernel with a row's splits bounded by 32 (one per 256 keys), 3 and 1
    // (row_attention_splits picks the bound by the launch's size).
    for (const auto& [mma, splits] : {std::pair{true, 32}, std::pair{true, 3}, std::pair{true, 1}, std::pair{false, 0}}) {
      if (mma && !has_mma) continue;
      p.tensor_cores = mma;
      p.target_splits = splits;
      p.num_sms = 132;
      p.max_keys = 0;
      CUDA_CHECK(cudaMemset(out.get(), 0xff, out.bytes()));  // poison: every element must be written
      cuda::row_attention(p, nullptr);
      auto got = download_as(out, (T + 1) * width, cs.out);
      int32_t tb = 0;
      for (size_t s = 0; s < shapes.size(); ++s) {
        const auto [nq, ctx] = shapes[s];
        auto ref = fx.dense(q.data() + tb * width, nq, ctx, seq_tables[s], p.scale, cs.window, cs.softcap);
        const double e = nmse(got.data() + tb * width, ref.data(), nq * width);
        if (cs.softcap > 0 && ctx > 16) {
          // The check can fail: the uncapped attention is far outside the bound.
          auto plain = fx.dense(q.data() + tb * width, nq, ctx, seq_tables[s], p.scale, cs.window);
          EXPECT_GT(nmse(plain.data(), ref.data(), nq * width), 1e-3) << "soft-cap too weak to test, seq " << ctx;
        }
        const double out_bound = cs.out == DType::kF32 ? 1e-10 : 1e-5;
        const double mma_bound = cs.kv == DType::kBF16 ? 1e-4 : 2e-5;
        EXPECT_LT(e, mma ? out_bound + mma_bound : out_bound)
            << "heads " << cs.heads << "/" << cs.kv_heads << " d " << cs.head_dim << " bs " << cs.block_size << " kv "
            << dtype_name(cs.kv) << " window " << cs.window << " softcap " << cs.softcap << " seq (" << nq << ", " << ctx
            << ") tensor cores " << mma
            << " splits <= " << splits;
        tb += nq;
      }
      for (int64_t i = 0; i < width; ++i) ASSERT_EQ(got[T * width + i], 0.0f) << "padding row not zero";
      // The SIMT kernel with 1, 2 or 4 query heads a block (16-bit caches at head_dim 64 / 128; the
      // others ignore it) gives the same bits: a head's arithmetic does not depend on its block's
      // other heads.
      if (!mma)
        for (int hpb : {1, 2, 4}) {
          p.simt_heads_per_block = hpb;
          CUDA_CHECK(cudaMemset(out.get(), 0xff, out.bytes()));
          cuda::row_attention(p, nullptr);
          auto heads = download_as(out, (T + 1) * width, cs.out);
          p.simt_heads_per_block = 0;
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(std::memcmp(&got[i], &heads[i], sizeof(float)), 0)
                << "heads-per-block-dependent result at " << i << " heads a block " << hpb << " kv " << dtype_name(cs.kv);
        }
      // A smaller grid (blocks loop over more splits) and the largest one (a block a split) give
      // the same bits: a row's arithmetic does not depend on the grid.
      for (int sms : {1, 1 << 20}) {
        p.num_sms = sms;
        p.max_keys = 9000;
        CUDA_CHECK(cudaMemset(out.get(), 0xff, out.bytes()));
        cuda::row_attention(p, nullptr);
        auto again = download_as(out, (T + 1) * width, cs.out);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(std::memcmp(&got[i], &again[i], sizeof(float)), 0)
              << "grid-dependent result at " << i << " tensor cores " << mma << " splits <= " << splits << " sms " << sms;
      }
    }
  }
}

// Decode steps fuse the RoPE + KV write into the SIMT split-KV kernel (row_attention with
// p.rope set): the same output bits and the same cache bits as rope_kv_write followed by the
// unfused kernel, for both rotation layouts, bias, q/k norms, a window, every cache dtype, and
// contexts from 1 key to several splits. The early L2 warming and the first keys copied before the
// wait (fresh_keys) change no bits either.
TEST(CudaAttention, FusedRopeDecodeAttentionMatchesUnfused) {
  PAGODA_REQUIRE_GPU();
  struct Case {
    AttnCase a;
    RopeLayout layout;
    bool bias, qk_norm, tensor_cores;
  };
  const Case cases[] = {
      {{32, 8, 128, 16, DType::kF16, 0, DType::kBF16}, RopeLayout::kHalfSplit, false, false, true},
      {{14, 2, 64, 16, DType::kBF16, 0, DType::kBF16}, RopeLayout::kInterleaved, true, false, true},
      {{16, 8, 128, 32, DType::kBF16, 37, DType::kF32}, RopeLayout::kHalfSplit, false, true, false},
      {{8, 2, 64, 8, DType::kF32, 0, DType::kF32}, RopeLayout::kHalfSplit, true, true, false},
      {{16, 2, 128, 1, DType::kBF16, 0, DType::kBF16}, RopeLayout::kInterleaved, false, false, false},
      {{32, 8, 128, 16, DType::kF8E4M3, 0, DType::kBF16}, RopeLayout::kHalfSplit, true, true, true},
      {{8, 2, 64, 8, DType::kF8E4M3, 20, DType::kF32}, RopeLayout::kInterleaved, false, false, false},
  };
  std::mt19937 rng(7);
  for (const Case& cs : cases) {
    const AttnCase& a = cs.a;
    const std::vector<int32_t> ctxs = {1, 17, 100, 257, 700, 1000};  // one row each, then a padding row
    const int64_t H = a.heads, KVH = a.kv_heads, D = a.head_dim, bs = a.block_size;
    int64_t num_blocks = 0;  // no page shared between rows: a row's new key is no other row's old one
    for (int32_t c : ctxs) num_blocks += (c + bs - 1) / bs;
    const int64_t T = static_cast<int64_t>(ctxs.size()) + 1;
    const uint64_t seed = rng();
    PagedFixture ref_fx(a, num_blocks, seed), fused_fx(a, num_blocks, seed);
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const int64_t stride = 1024 / bs + 1;
    std::vector<int32_t> tables(T * stride, 0), row_tok, row_seq, row_ctx, pos, slots;
    size_t next = 0;
    for (int64_t r = 0; r < T; ++r) {
      const int32_t ctx = r + 1 < T ? ctxs[r] : 0;
      for (int64_t b = 0; b < (ctx + bs - 1) / bs; ++b) tables[r * stride + b] = perm[next++];
      row_tok.push_back(static_cast<int32_t>(r));
      row_seq.push_back(static_cast<int32_t>(r));
      row_ctx.push_back(ctx);
      pos.push_back(ctx > 0 ? ctx - 1 : 0);
      slots.push_back(ctx > 0 ? static_cast<int32_t>(tables[r * stride + (ctx - 1) / bs] * bs + (ctx - 1) % bs) : -1);
    }
    const RopeFixture rf(H, KVH, D, cs.layout, false, 1024, pos, slots, rng());
    const RowBatch rb(row_tok, row_seq, row_ctx, tables, stride, a);
    cuda::DeviceBuffer q_out(T * H * D * 4), out_ref(T * H * D * 4), out_fused(T * H * D * 4);
    cuda::RopeKvParams rp = rf.params(cs.bias, cs.qk_norm, q_out.as<float>(), ref_fx.layer());
    auto params = [&](PagedFixture& fx, cuda::DeviceBuffer& out) {
      cuda::RowAttentionParams p = rb.params(a, q_out.as<float>(), out.get(), fx.layer());
      p.max_keys = 1000;  // T <= kRowShortRows: a short launch, the SIMT kernel even with tensor cores asked for
      p.tensor_cores = cs.tensor_cores;
      return p;
    };
    const std::string what = "heads " + std::to_string(H) + "/" + std::to_string(KVH) + " d " + std::to_string(D) +
                             " kv " + std::string(dtype_name(a.kv)) + " layout " + std::string(rope_layout_name(cs.layout));
    // Reference: the separate kernels.
    cuda::rope_kv_write(rp, nullptr);
    cuda::RowAttentionParams pr = params(ref_fx, out_ref);
    CUDA_CHECK(cudaMemset(out_ref.get(), 0xff, out_ref.bytes()));
    cuda::row_attention(pr, nullptr);
    const size_t out_bytes = static_cast<size_t>(T * H * D) * (a.out == DType::kF32 ? 4 : 2);
    auto ref_bits = to_host<uint8_t>(out_ref, out_bytes);
    // The same with the early L2 warming of the older keys.
    pr.fresh_keys = 1;
    CUDA_CHECK(cudaMemset(out_ref.get(), 0xff, out_ref.bytes()));
    cuda::row_attention(pr, nullptr);
    EXPECT_EQ(to_host<uint8_t>(out_ref, out_bytes), ref_bits) << what << ": warming the L2 changed the output";
    // Fused.
    cuda::RowAttentionParams pf = params(fused_fx, out_fused);
    pf.q = nullptr;
    pf.fresh_keys = 1;
    pf.rope = rp;
    pf.rope.cache = fused_fx.layer();
    pf.rope.q_out = nullptr;
    ASSERT_TRUE(cuda::row_attention_fuses_rope(pf)) << what;
    CUDA_CHECK(cudaMemset(out_fused.get(), 0xff, out_fused.bytes()));
    cuda::row_attention(pf, nullptr);
    auto fused_bits = to_host<uint8_t>(out_fused, out_bytes);
    size_t diff = 0;
    for (size_t i = 0; i < out_bytes; ++i) diff += fused_bits[i] != ref_bits[i];
    EXPECT_EQ(diff, 0u) << what << ": fused output bytes differ";
    const int64_t cache_bytes = num_blocks * KVH * bs * D * row_bytes(a.kv, 1);
    EXPECT_EQ(to_host<uint8_t>(fused_fx.dk, cache_bytes), to_host<uint8_t>(ref_fx.dk, cache_bytes)) << what << ": K cache";
    EXPECT_EQ(to_host<uint8_t>(fused_fx.dv, cache_bytes), to_host<uint8_t>(ref_fx.dv, cache_bytes)) << what << ": V cache";
    // A one-SM grid: each block loops over several splits (and rewrites the same new key / value).
    pf.num_sms = 1;
    CUDA_CHECK(cudaMemset(out_fused.get(), 0xff, out_fused.bytes()));
    cuda::row_attention(pf, nullptr);
    EXPECT_EQ(to_host<uint8_t>(out_fused, out_bytes), ref_bits) << what << ": fused output on a one-SM grid";
    EXPECT_EQ(to_host<uint8_t>(fused_fx.dk, cache_bytes), to_host<uint8_t>(ref_fx.dk, cache_bytes)) << what << ": K cache, one SM";
    // Blocks of 1, 2 or 4 query heads (16-bit caches; the others ignore it): more or fewer blocks
    // rotate and write the new key, the same bits.
    pf.num_sms = 132;
    for (int hpb : {1, 2, 4}) {
      pf.simt_heads_per_block = hpb;
      CUDA_CHECK(cudaMemset(out_fused.get(), 0xff, out_fused.bytes()));
      cuda::row_attention(pf, nullptr);
      EXPECT_EQ(to_host<uint8_t>(out_fused, out_bytes), ref_bits) << what << ": fused output, heads a block " << hpb;
      EXPECT_EQ(to_host<uint8_t>(fused_fx.dv, cache_bytes), to_host<uint8_t>(ref_fx.dv, cache_bytes)) << what << ": V cache, heads a block " << hpb;
    }
    // Early and late reads (RowAttentionParams::early_reads: the RoPE inputs and the first keys
    // before or after the wait) at one and two heads a block, each from the original cache, in
    // which the new key's slot holds an older value: the same bits, and the new key written.
    auto restore_cache = [&] {
      for (auto [dev, host] : {std::pair{&fused_fx.dk, &fused_fx.k}, std::pair{&fused_fx.dv, &fused_fx.v}}) {
        const cuda::DeviceBuffer original = upload_as(*host, a.kv);
        CUDA_CHECK(cudaMemcpy(dev->get(), original.get(), original.bytes(), cudaMemcpyDeviceToDevice));
      }
    };
    for (bool early : {true, false}) {
      pf.early_reads = early;
      for (int hpb : {1, 2}) {
        pf.simt_heads_per_block = hpb;
        restore_cache();
        CUDA_CHECK(cudaMemset(out_fused.get(), 0xff, out_fused.bytes()));
        cuda::row_attention(pf, nullptr);
        EXPECT_EQ(to_host<uint8_t>(out_fused, out_bytes), ref_bits)
            << what << ": fused, " << (early ? "early" : "late") << " reads, heads a block " << hpb;
        EXPECT_EQ(to_host<uint8_t>(fused_fx.dk, cache_bytes), to_host<uint8_t>(ref_fx.dk, cache_bytes))
            << what << ": K cache, " << (early ? "early" : "late") << " reads, heads a block " << hpb;
      }
    }
    pf.early_reads = true;
    pf.simt_heads_per_block = 0;
    // And against the dense reference (the rotated q of the reference run, the updated cache).
    auto q_host = to_host<float>(q_out, T * H * D);
    PagedFixture& fx = ref_fx;
    fx.k = download_as(fx.dk, fx.k.size(), a.kv);
    fx.v = download_as(fx.dv, fx.v.size(), a.kv);
    auto got = download_as(out_fused, T * H * D, a.out);
    for (int64_t r = 0; r + 1 < T; ++r) {
      std::vector<int32_t> table(tables.begin() + r * stride, tables.begin() + (r + 1) * stride);
      auto dense = fx.dense(q_host.data() + r * H * D, 1, ctxs[r], table, pr.scale, a.window);
      EXPECT_LT(nmse(got.data() + r * H * D, dense.data(), H * D), a.out == DType::kF32 ? 1e-10 : 1e-5)
          << what << " ctx " << ctxs[r];
    }
    for (int64_t i = 0; i < H * D; ++i) ASSERT_EQ(got[(T - 1) * H * D + i], 0.0f) << "padding row not zero";
  }
}

TEST(CudaAttention, TensorCorePrefillAttentionMatchesDenseReference) {
  PAGODA_REQUIRE_GPU();
  std::mt19937 rng(7);
  int dev = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  const bool sm90 = major == 9 && minor == 0;
  int wgmma_cases = 0;
  for (int tile : {64, 128})
  for (int64_t D : {64, 128})
    for (DType kv : {DType::kBF16, DType::kF16, DType::kF8E4M3})
      for (auto [H, KVH] : {std::pair<int64_t, int64_t>{8, 2}, {14, 2}})
        for (int64_t window : {int64_t{0}, int64_t{50}})
        for (float softcap : {0.0f, 0.25f}) {
          const AttnCase cs{H, KVH, D, 16, kv, window, D == 64 ? DType::kBF16 : DType::kF32, softcap};
          ASSERT_TRUE(cuda::prefill_attention_supported(D, kv));
          const int64_t num_blocks = 200;
          PagedFixture fx(cs, num_blocks, rng());
          // (num_queries, context): full prompts, chunked prefill (queries after cached keys), ragged
          // tiles; with 128-query tiles also one of several key tiles (the wgmma kernel's are 128).
          std::vector<std::pair<int32_t, int32_t>> shapes = {{64, 64}, {100, 100}, {37, 300}, {1, 10}, {130, 200}, {65, 65}};
          if (tile == 128) shapes.push_back({150, 450});
          std::vector<int32_t> perm(num_blocks);
          std::iota(perm.begin(), perm.end(), 0);
          std::shuffle(perm.begin(), perm.end(), rng);
          const int64_t stride = 30;
          std::vector<int32_t> tables(shapes.size() * stride, 0);
          std::vector<std::vector<int32_t>> seq_tables;
          std::vector<cuda::PrefillSeq> seqs;
          std::vector<cuda::PrefillItem> items;
          int32_t T = 0;
          size_t next = 0;
          for (size_t s = 0; s < shapes.size(); ++s) {
            const auto [nq, ctx] = shapes[s];
            std::vector<int32_t> table;
            for (int64_t b = 0; b < (ctx + 15) / 16; ++b) table.push_back(perm[(next++) % num_blocks]);
            std::copy(table.begin(), table.end(), tables.begin() + s * stride);
            seq_tables.push_back(table);
            seqs.push_back({T, nq, ctx, static_cast<int32_t>(s)});
            for (int32_t q0 = 0; q0 < nq; q0 += tile) items.push_back({static_cast<int32_t>(s), q0});
            T += nq;
          }
          const int64_t width = H * D;
          auto q = random_floats(T * width, rng(), -1, 1);
          auto dq = to_device(q), dt = to_device(tables), dseqs = to_device(seqs), ditems = to_device(items);
          cuda::DeviceBuffer out(T * width * 4);
          cuda::PrefillAttentionParams p;
          p.q = dq.as<float>();
          p.q_stride = width;
          p.out = out.get();
          p.out_dtype = cs.out;
          p.out_stride = width;
          p.seqs = dseqs.as<cuda::PrefillSeq>();
          p.items = ditems.as<cuda::PrefillItem>();
          p.num_items = static_cast<int64_t>(items.size());
          p.block_tables = dt.as<int32_t>();
          p.bt_stride = stride;
          p.cache = fx.layer();
          p.num_heads = H;
          p.scale = static_cast<float>(1.0 / std::sqrt(double(D)));
          p.window = window;
          p.softcap = softcap;
          p.tile_q = tile;
          std::vector<std::vector<float>> refs;
          int32_t tb = 0;
          for (size_t s = 0; s < shapes.size(); ++s) {
            const auto [nq, ctx] = shapes[s];
            refs.push_back(fx.dense(q.data() + tb * width, nq, ctx, seq_tables[s], p.scale, window, softcap));
            tb += nq;
          }
          // The wgmma kernel applies exactly where its contract says, on a compute capability 9.0
          // device.
          p.kernel = cuda::PrefillKernel::kWgmma;
          const bool wgmma = tile == 128 && D == 128 && kv != DType::kF8E4M3 && sm90;
          ASSERT_EQ(cuda::prefill_attention_wgmma_supported(p), wgmma);
          std::vector<cuda::PrefillKernel> kernels = {cuda::PrefillKernel::kMmaSync};
          if (wgmma) kernels.push_back(cuda::PrefillKernel::kWgmma);
          for (cuda::PrefillKernel kernel : kernels) {
            wgmma_cases += kernel != cuda::PrefillKernel::kMmaSync;
            p.kernel = kernel;
            CUDA_CHECK(cudaMemset(out.get(), 0xff, out.bytes()));
            cuda::prefill_attention(p, nullptr);
            auto got = download_as(out, T * width, cs.out);
            tb = 0;
            for (size_t s = 0; s < shapes.size(); ++s) {
              const auto [nq, ctx] = shapes[s];
              // Q and P are rounded to the cache's 16-bit type for the tensor cores (f16 for an FP8
              // cache, whose values the reference reads as stored).
              const double bound = kv == DType::kBF16 ? 1e-4 : 2e-5;
              EXPECT_LT(nmse(got.data() + tb * width, refs[s].data(), nq * width), bound)
                  << (kernel == cuda::PrefillKernel::kMmaSync ? "mma.sync" : "wgmma") << " tile " << tile << " D " << D
                  << " kv " << dtype_name(kv) << " heads " << H << "/" << KVH << " window " << window << " softcap "
                  << softcap << " seq (" << nq << ", " << ctx << ")";
              tb += nq;
            }
          }
        }
  if (sm90) {
    EXPECT_EQ(wgmma_cases, 16) << "the wgmma kernel ran in every case it applies to";
  }
}

#endif  // PAGODA_HAVE_CUDA

}  // namespace
}  // namespace pagoda
