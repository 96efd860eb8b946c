// The CUDA kernels against plain references (the GPU column of the op tier): RMSNorm, embedding,
// SwiGLU, RoPE + paged KV write, split-KV attention and tensor-core prefill attention against a
// dense reference built by gathering the blocks (random block tables, many lengths, GQA/MQA,
// windows, every KV dtype), GEMV, cuBLASLt, the batch-invariant GEMM, and the sampler against
// the CPU sampler. Every case skips with a message when no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>

#include "backend/reference/reference_ops.h"
#include "common/half.h"
#include "gpu_test_util.h"
#include "ops/rope.h"
#include "runtime/model_runner.h"
#include "runtime/sampler.h"
#include "test_util.h"

#if PAGODA_HAVE_CUDA
#include "backend/cuda/blas.h"
#include "backend/cuda/kernels.h"
#endif

namespace pagoda {
namespace {

#if !PAGODA_HAVE_CUDA
TEST(CudaOps, Skipped) { PAGODA_REQUIRE_GPU(); }
#else

using test::nmse;
using test::random_floats;
using test::to_device;
using test::to_host;

// Host values rounded through a 16-bit (or f32) type, and their raw bits.
std::vector<uint16_t> to_bits(const std::vector<float>& v, DType t) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = t == DType::kBF16 ? f32_to_bf16(v[i]) : f32_to_fp16(v[i]);
  return b;
}
std::vector<float> round_to(const std::vector<float>& v, DType t) {
  if (t == DType::kF32) return v;
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    r[i] = t == DType::kBF16 ? bf16_to_f32(f32_to_bf16(v[i])) : fp16_to_f32(f32_to_fp16(v[i]));
  return r;
}
// Device buffer of v stored as t (f32, f16 or bf16).
cuda::DeviceBuffer upload_as(const std::vector<float>& v, DType t) {
  if (t == DType::kF32) return to_device(v);
  return to_device(to_bits(v, t));
}
std::vector<float> download_as(const cuda::DeviceBuffer& b, size_t n, DType t) {
  if (t == DType::kF32) return to_host<float>(b, n);
  auto bits = to_host<uint16_t>(b, n);
  std::vector<float> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = t == DType::kBF16 ? bf16_to_f32(bits[i]) : fp16_to_f32(bits[i]);
  return r;
}

TEST(CudaOps, RmsNormEmbeddingSwiGlu) {
  PAGODA_REQUIRE_GPU();
  for (int64_t D : {70, 72, 4096}) {  // 70: the scalar kernel; D % 4 == 0: the float4 one
    const int64_t T = 5;
    auto x = random_floats(T * D, 1, -3, 3), w = random_floats(D, 2, 0.5f, 1.5f);
    std::vector<float> ref(T * D);
    reference::rms_norm(x.data(), w.data(), T, D, 1e-5, ref.data());
    const std::vector<int32_t> rows = {3, 0, 4};
    auto dx = to_device(x), dw = to_device(w), drows = to_device(rows);
    for (DType out : {DType::kF32, DType::kBF16}) {
      cuda::DeviceBuffer dy(T * D * 4);
      cuda::rms_norm(dx.as<float>(), nullptr, T, D, dw.as<float>(), 1e-5f, dy.get(), out, nullptr);
      auto y = download_as(dy, T * D, out);
      EXPECT_LT(nmse(y, ref), out == DType::kF32 ? 1e-12 : 1e-5) << "D " << D;
      cuda::rms_norm(dx.as<float>(), drows.as<int32_t>(), 3, D, dw.as<float>(), 1e-5f, dy.get(), out, nullptr);
      y = download_as(dy, 3 * D, out);
      for (int i = 0; i < 3; ++i)
        EXPECT_LT(nmse(y.data() + i * D, ref.data() + rows[i] * D, D), out == DType::kF32 ? 1e-12 : 1e-5) << "gathered row " << i;
    }
  }
  // Embedding: exact for every table dtype.
  const int64_t V = 50, D = 72;
  auto table = random_floats(V * D, 3);
  const std::vector<int32_t> ids = {7, 0, 49, 7, 13};
  auto dids = to_device(ids);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    auto rt = round_to(table, t);
    auto dt = upload_as(table, t);
    cuda::DeviceBuffer out(ids.size() * D * 4);
    cuda::embedding(dt.get(), t, dids.as<int32_t>(), static_cast<int64_t>(ids.size()), D, out.as<float>(), nullptr);
    auto got = to_host<float>(out, ids.size() * D);
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t d = 0; d < D; ++d) ASSERT_EQ(got[i * D + d], rt[ids[i] * D + d]) << dtype_name(t);
  }
  // SwiGLU over [T, 2F]: F = 96 takes the 8-wide bf16 kernel, F = 100 the scalar one.
  for (int64_t F : {100, 96}) {
  const int64_t T = 3;
  auto gu = random_floats(T * 2 * F, 4, -4, 4);
  for (DType t : {DType::kF32, DType::kBF16}) {
    auto r = round_to(gu, t);
    std::vector<float> ref(T * F);
    for (int64_t i = 0; i < T; ++i) reference::swiglu(r.data() + i * 2 * F, r.data() + i * 2 * F + F, F, ref.data() + i * F);
    auto dgu = upload_as(gu, t);
    cuda::DeviceBuffer out(T * F * 4);
    cuda::swiglu(dgu.get(), T, F, out.get(), t, nullptr);
    EXPECT_LT(nmse(download_as(out, T * F, t), ref), t == DType::kF32 ? 1e-12 : 1e-5) << dtype_name(t) << " F " << F;
  }
  }
}

// Element (slot, kv head, dim) of a cache in the GPU layout [blocks, kvh, bs, dh].
int64_t kv_index(int64_t slot, int64_t h, int64_t d, int64_t kvh, int64_t bs, int64_t dh) {
  return ((slot / bs * kvh + h) * bs + slot % bs) * dh + d;
}

// rope_kv_write's operands on the device: random fused QKV rows of T tokens (seed, seed + 1, ...
// for rows, bias, q norm, k norm), the cos / sin table of a one-layer config, positions and slots.
struct RopeFixture {
  int64_t H, KVH, D, T;
  ModelConfig cfg;
  std::unique_ptr<RopeTable> rope;
  std::vector<float> qkv, bias, qn, kn;
  cuda::DeviceBuffer d_qkv, d_bias, d_qn, d_kn, d_cos, d_sin, d_pos, d_slots;
  RopeFixture(int64_t heads, int64_t kv_heads, int64_t head_dim, RopeLayout layout, bool llama3_scaling,
              int64_t max_pos, const std::vector<int32_t>& pos, const std::vector<int32_t>& slots, uint64_t seed)
      : H(heads), KVH(kv_heads), D(head_dim), T(static_cast<int64_t>(pos.size())) {
    cfg.vocab_size = 10;
    cfg.hidden_size = H * D;
    cfg.intermediate_size = 4;
    cfg.num_layers = 1;
    cfg.num_heads = H;
    cfg.num_kv_heads = KVH;
    cfg.head_dim = D;
    cfg.rope_dim = D;
    cfg.max_position_embeddings = max_pos;
    cfg.rope_layout = layout;
    cfg.rope_theta = 500000;
    if (llama3_scaling) {
      cfg.rope_scaling.kind = RopeScaling::Kind::kLlama3;
      cfg.rope_scaling.factor = 8;
      cfg.rope_scaling.original_max_position = 64;
    }
    rope = std::make_unique<RopeTable>(cfg, max_pos);
    const int64_t W = (H + 2 * KVH) * D, half = D / 2;
    qkv = random_floats(T * W, seed, -2, 2);
    bias = random_floats(W, seed + 1, -0.5f, 0.5f);
    qn = random_floats(D, seed + 2, 0.5f, 1.5f);
    kn = random_floats(D, seed + 3, 0.5f, 1.5f);
    d_qkv = to_device(qkv), d_bias = to_device(bias), d_qn = to_device(qn), d_kn = to_device(kn);
    d_cos = to_device(std::vector<float>(rope->cos(0), rope->cos(0) + max_pos * half));
    d_sin = to_device(std::vector<float>(rope->sin(0), rope->sin(0) + max_pos * half));
    d_pos = to_device(pos), d_slots = to_device(slots);
  }
  cuda::RopeKvParams params(bool with_bias, bool qk_norm, float* q_out, cuda::KvCacheLayer cache) const {
    cuda::RopeKvParams p;
    p.qkv = d_qkv.as<float>();
    p.num_tokens = T;
    p.num_heads = H;
    p.head_dim = D;
    p.rope_dim = D;
    p.bias = with_bias ? d_bias.as<float>() : nullptr;
    p.q_norm = qk_norm ? d_qn.as<float>() : nullptr;
    p.k_norm = qk_norm ? d_kn.as<float>() : nullptr;
    p.norm_eps = 1e-6f;
    p.cos = d_cos.as<float>();
    p.sin = d_sin.as<float>();
    p.interleaved = cfg.rope_layout == RopeLayout::kInterleaved;
    p.positions = d_pos.as<int32_t>();
    p.slots = d_slots.as<int32_t>();
    p.q_out = q_out;
    p.cache = cache;
    return p;
  }
};

TEST(CudaOps, RopeKvWriteMatchesReference) {
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
                        {RopeLayout::kInterleaved, true, true, DType::kF32, 16}};
  for (const Case& cs : cases) {
    const int64_t H = 8, KVH = 2, D = cs.dh, bs = 16, blocks = 8, T = 6;
    const std::vector<int32_t> pos = {0, 1, 2, 77, 78, 300};
    const std::vector<int32_t> slots = {5, 6, 7, 40, -1, 127};
    const RopeFixture rf(H, KVH, D, cs.layout, true, 512, pos, slots, 11);
    const int64_t W = (H + 2 * KVH) * D;
    const std::vector<float>&qkv = rf.qkv, &bias = rf.bias, &qn = rf.qn, &kn = rf.kn;
    const RopeTable& rope = *rf.rope;
    const int64_t cache_elems = blocks * KVH * bs * D;
    const int64_t eb = cs.kv == DType::kF32 ? 4 : 2;
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
          const double tol = cs.kv == DType::kF32 ? 3e-5 : (cs.kv == DType::kBF16 ? 2e-2 : 3e-3);
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

struct AttnCase {
  int64_t heads, kv_heads, head_dim, block_size;
  DType kv;
  int64_t window;
  DType out;
};

// A paged cache (GPU layout) filled with random values, its rounded host copy, random tables.
struct PagedFixture {
  int64_t H, KVH, D, bs, blocks;
  DType kv;
  std::vector<float> k, v;  // host copy (values as stored)
  cuda::DeviceBuffer dk, dv;
  PagedFixture(const AttnCase& c, int64_t num_blocks, uint64_t seed)
      : H(c.heads), KVH(c.kv_heads), D(c.head_dim), bs(c.block_size), blocks(num_blocks), kv(c.kv) {
    const int64_t n = blocks * KVH * bs * D;
    k = round_to(random_floats(n, seed, -2, 2), kv);
    v = round_to(random_floats(n, seed + 1, -2, 2), kv);
    dk = upload_as(k, kv);
    dv = upload_as(v, kv);
  }
  cuda::KvCacheLayer layer() { return {dk.get(), dv.get(), kv, blocks, bs, KVH, D}; }
  // Dense causal attention of one sequence in double: q [nq, H, D] -> out [nq, H, D].
  std::vector<float> dense(const float* q, int64_t nq, int64_t ctx, const std::vector<int32_t>& table, double scale,
                           int64_t window) const {
    std::vector<float> out(nq * H * D);
    const int64_t G = H / KVH;
    for (int64_t t = 0; t < nq; ++t) {
      const int64_t pos = ctx - nq + t;
      const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kh = h / G;
        std::vector<double> s(pos + 1);
        double mx = -1e300;
        for (int64_t j = lo; j <= pos; ++j) {
          const int64_t slot = int64_t{table[j / bs]} * bs + j % bs;
          double acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += double(q[(t * H + h) * D + d]) * k[kv_index(slot, kh, d, KVH, bs, D)];
          s[j] = acc * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = lo; j <= pos; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = lo; j <= pos; ++j) {
            const int64_t slot = int64_t{table[j / bs]} * bs + j % bs;
            acc += s[j] * v[kv_index(slot, kh, d, KVH, bs, D)];
          }
          out[(t * H + h) * D + d] = static_cast<float>(acc / sum);
        }
      }
    }
    return out;
  }
};

// The rows of a split-KV launch on the device (token, sequence and context of each row, the block
// tables), its split workspace, and the launch's parameters over them for a case (q and out rows
// of heads * head_dim values).
struct RowBatch {
  int64_t rows, stride;
  cuda::DeviceBuffer tok, seq, ctx, tables, part_o, part_ml, counters;
  RowBatch(const std::vector<int32_t>& row_tok, const std::vector<int32_t>& row_seq, const std::vector<int32_t>& row_ctx,
           const std::vector<int32_t>& block_tables, int64_t bt_stride, const AttnCase& c)
      : rows(static_cast<int64_t>(row_tok.size())), stride(bt_stride), tok(to_device(row_tok)), seq(to_device(row_seq)),
        ctx(to_device(row_ctx)), tables(to_device(block_tables)),
        part_o(rows * c.heads * cuda::kRowMaxSplits * c.head_dim * 4),
        part_ml(rows * c.heads * cuda::kRowMaxSplits * 2 * 4), counters(rows * c.heads * 4) {
    CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  }
  cuda::RowAttentionParams params(const AttnCase& c, const float* q, void* out, cuda::KvCacheLayer cache) const {
    cuda::RowAttentionParams p;
    p.q = q;
    p.q_stride = c.heads * c.head_dim;
    p.out = out;
    p.out_dtype = c.out;
    p.out_stride = c.heads * c.head_dim;
    p.num_rows = rows;
    p.row_token = tok.as<int32_t>();
    p.row_seq = seq.as<int32_t>();
    p.row_ctx = ctx.as<int32_t>();
    p.block_tables = tables.as<int32_t>();
    p.bt_stride = stride;
    p.cache = cache;
    p.num_heads = c.heads;
    p.scale = static_cast<float>(1.0 / std::sqrt(double(c.head_dim)));
    p.window = c.window;
    p.part_o = part_o.as<float>();
    p.part_ml = part_ml.as<float>();
    p.counters = counters.as<int>();
    return p;
  }
};

TEST(CudaOps, SplitKvRowAttentionMatchesDenseReference) {
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
  };
  std::mt19937 rng(99);
  for (const AttnCase& cs : cases) {
    const int64_t num_blocks = 600;
    PagedFixture fx(cs, num_blocks, rng());
    // (2, 9000): more than kRowMaxSplits * kRowSplitKeys keys, so splits longer than 256 keys.
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
    // 16-bit caches at head_dim 64 / 128 have a tensor-core kernel (Q and P rounded to the cache
    // type: the prefill kernel's bounds); everything runs the f32 SIMT kernel too.
    const bool has_mma = cs.kv != DType::kF32 && (cs.head_dim == 64 || cs.head_dim == 128);
    for (bool mma : {true, false}) {
      if (mma && !has_mma) continue;
      p.tensor_cores = mma;
      p.num_sms = 132;
      p.max_keys = 0;
      CUDA_CHECK(cudaMemset(out.get(), 0xff, out.bytes()));  // poison: every element must be written
      cuda::row_attention(p, nullptr);
      auto got = download_as(out, (T + 1) * width, cs.out);
      int32_t tb = 0;
      for (size_t s = 0; s < shapes.size(); ++s) {
        const auto [nq, ctx] = shapes[s];
        auto ref = fx.dense(q.data() + tb * width, nq, ctx, seq_tables[s], p.scale, cs.window);
        const double e = nmse(got.data() + tb * width, ref.data(), nq * width);
        const double out_bound = cs.out == DType::kF32 ? 1e-10 : 1e-5;
        const double mma_bound = cs.kv == DType::kBF16 ? 1e-4 : 2e-5;
        EXPECT_LT(e, mma ? out_bound + mma_bound : out_bound)
            << "heads " << cs.heads << "/" << cs.kv_heads << " d " << cs.head_dim << " bs " << cs.block_size << " kv "
            << dtype_name(cs.kv) << " window " << cs.window << " seq (" << nq << ", " << ctx << ") tensor cores " << mma;
        tb += nq;
      }
      for (int64_t i = 0; i < width; ++i) ASSERT_EQ(got[T * width + i], 0.0f) << "padding row not zero";
      // A smaller grid (blocks loop over more splits) gives the same bits: a row's arithmetic does
      // not depend on the grid.
      p.num_sms = 1;
      p.max_keys = 9000;
      CUDA_CHECK(cudaMemset(out.get(), 0xff, out.bytes()));
      cuda::row_attention(p, nullptr);
      auto again = download_as(out, (T + 1) * width, cs.out);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(std::memcmp(&got[i], &again[i], sizeof(float)), 0) << "grid-dependent result at " << i << " tensor cores " << mma;
    }
  }
}

// Decode steps fuse the RoPE + KV write into the SIMT split-KV kernel (row_attention with
// p.rope set): the same output bits and the same cache bits as rope_kv_write followed by the
// unfused kernel, for both rotation layouts, bias, q/k norms, a window, every cache dtype, and
// contexts from 1 key to several splits. The early L2 warming (fresh_keys) changes no bits either.
TEST(CudaOps, FusedRopeDecodeAttentionMatchesUnfused) {
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
    const int64_t cache_bytes = num_blocks * KVH * bs * D * (a.kv == DType::kF32 ? 4 : 2);
    EXPECT_EQ(to_host<uint8_t>(fused_fx.dk, cache_bytes), to_host<uint8_t>(ref_fx.dk, cache_bytes)) << what << ": K cache";
    EXPECT_EQ(to_host<uint8_t>(fused_fx.dv, cache_bytes), to_host<uint8_t>(ref_fx.dv, cache_bytes)) << what << ": V cache";
    // A one-SM grid: each block loops over several splits (and rewrites the same new key / value).
    pf.num_sms = 1;
    CUDA_CHECK(cudaMemset(out_fused.get(), 0xff, out_fused.bytes()));
    cuda::row_attention(pf, nullptr);
    EXPECT_EQ(to_host<uint8_t>(out_fused, out_bytes), ref_bits) << what << ": fused output on a one-SM grid";
    EXPECT_EQ(to_host<uint8_t>(fused_fx.dk, cache_bytes), to_host<uint8_t>(ref_fx.dk, cache_bytes)) << what << ": K cache, one SM";
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

TEST(CudaOps, TensorCorePrefillAttentionMatchesDenseReference) {
  PAGODA_REQUIRE_GPU();
  std::mt19937 rng(7);
  for (int tile : {64, 128})
  for (int64_t D : {64, 128})
    for (DType kv : {DType::kBF16, DType::kF16})
      for (auto [H, KVH] : {std::pair<int64_t, int64_t>{8, 2}, {14, 2}})
        for (int64_t window : {int64_t{0}, int64_t{50}}) {
          const AttnCase cs{H, KVH, D, 16, kv, window, D == 64 ? DType::kBF16 : DType::kF32};
          ASSERT_TRUE(cuda::prefill_attention_supported(D, kv));
          const int64_t num_blocks = 200;
          PagedFixture fx(cs, num_blocks, rng());
          // (num_queries, context): full prompts, chunked prefill (queries after cached keys), ragged tiles.
          const std::vector<std::pair<int32_t, int32_t>> shapes = {{64, 64}, {100, 100}, {37, 300}, {1, 10}, {130, 200}, {65, 65}};
          std::vector<int32_t> perm(num_blocks);
          std::iota(perm.begin(), perm.end(), 0);
          std::shuffle(perm.begin(), perm.end(), rng);
          const int64_t stride = 20;
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
          CUDA_CHECK(cudaMemset(out.get(), 0xff, out.bytes()));
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
          p.tile_q = tile;
          cuda::prefill_attention(p, nullptr);
          auto got = download_as(out, T * width, cs.out);
          int32_t tb = 0;
          for (size_t s = 0; s < shapes.size(); ++s) {
            const auto [nq, ctx] = shapes[s];
            auto ref = fx.dense(q.data() + tb * width, nq, ctx, seq_tables[s], p.scale, window);
            // Q and P are rounded to the cache's 16-bit type for the tensor cores.
            const double bound = kv == DType::kBF16 ? 1e-4 : 2e-5;
            EXPECT_LT(nmse(got.data() + tb * width, ref.data(), nq * width), bound)
                << "tile " << tile << " D " << D << " kv " << dtype_name(kv) << " heads " << H << "/" << KVH << " window " << window << " seq ("
                << nq << ", " << ctx << ")";
            tb += nq;
          }
        }
}

// y[m, n] = sum_k x[m, k] w[n, k] in double.
std::vector<double> matmul_ref(const std::vector<float>& x, const std::vector<float>& w, int64_t M, int64_t N, int64_t K) {
  std::vector<double> y(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += double(x[m * K + k]) * w[n * K + k];
      y[m * N + n] = acc;
    }
  return y;
}
double nmse_d(const std::vector<float>& got, const std::vector<double>& ref) {
  std::vector<float> r(ref.begin(), ref.end());
  return nmse(got, r);
}

TEST(CudaOps, GemvAndMatmulsMatchReference) {
  PAGODA_REQUIRE_GPU();
  for (int64_t K : {256, 4104}) {
    const int64_t N = 300;
    auto w = round_to(random_floats(N * K, 21, -1, 1), DType::kBF16);
    auto dw = upload_as(w, DType::kBF16);
    for (int64_t M = 1; M <= cuda::kGemvMaxM; ++M) {
      auto x = round_to(random_floats(M * K, 22 + M, -1, 1), DType::kBF16);
      auto dx = upload_as(x, DType::kBF16);
      auto ref = matmul_ref(x, w, M, N, K);
      cuda::DeviceBuffer y(M * N * 4);
      cuda::gemv_bf16(dx.get(), dw.get(), M, N, K, y.get(), N, cuda::GemmOut::kStoreF32, nullptr);
      EXPECT_LT(nmse_d(to_host<float>(y, M * N), ref), 1e-10) << "M " << M << " K " << K;
      // Accumulate into a prefilled y.
      std::vector<float> base = random_floats(M * N, 5);
      auto dyb = to_device(base);
      cuda::gemv_bf16(dx.get(), dw.get(), M, N, K, dyb.get(), N, cuda::GemmOut::kAddF32, nullptr);
      auto acc_ref = ref;
      for (int64_t i = 0; i < M * N; ++i) acc_ref[i] += base[i];
      EXPECT_LT(nmse_d(to_host<float>(dyb, M * N), acc_ref), 1e-10);
      cuda::gemv_bf16(dx.get(), dw.get(), M, N, K, y.get(), N, cuda::GemmOut::kStoreAct, nullptr);
      EXPECT_LT(nmse_d(download_as(y, M * N, DType::kBF16), ref), 1e-5);
      // Fused gate/up + SwiGLU: rows [0, N/2) gate, [N/2, N) up.
      const int64_t F = N / 2;
      cuda::gemv_bf16(dx.get(), dw.get(), M, N, K, y.get(), F, cuda::GemmOut::kSwiGlu, nullptr);
      std::vector<float> sw_ref(M * F);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t i = 0; i < F; ++i) {
          const float g = bf16_to_f32(f32_to_bf16(float(ref[m * N + i]))), u = bf16_to_f32(f32_to_bf16(float(ref[m * N + F + i])));
          sw_ref[m * F + i] = g / (1.0f + std::exp(-g)) * u;
        }
      EXPECT_LT(nmse(download_as(y, M * F, DType::kBF16), sw_ref), 1e-5);
      // RMSNorm fused into the prologue: x = bf16(rms_norm(residual[rows[m]]) * g).
      if (cuda::gemv_norm_supported(M, K)) {
        auto res = random_floats((M + 2) * K, 40 + M, -3, 3), g = random_floats(K, 41, 0.5f, 1.5f);
        std::vector<int32_t> rows;
        for (int64_t m = 0; m < M; ++m) rows.push_back(static_cast<int32_t>((m * 3 + 2) % (M + 2)));
        std::vector<float> xn(M * K);
        for (int64_t m = 0; m < M; ++m) reference::rms_norm(res.data() + rows[m] * K, g.data(), 1, K, 1e-5, xn.data() + m * K);
        xn = round_to(xn, DType::kBF16);
        auto nref = matmul_ref(xn, w, M, N, K);
        auto dres = to_device(res), dg = to_device(g), drows = to_device(rows);
        const cuda::GemvNorm nrm{dres.as<float>(), drows.as<int32_t>(), dg.as<float>(), 1e-5f};
        cuda::gemv_bf16(nullptr, dw.get(), M, N, K, y.get(), N, cuda::GemmOut::kStoreF32, nullptr, &nrm);
        EXPECT_LT(nmse_d(to_host<float>(y, M * N), nref), 1e-6) << "fused norm M " << M << " K " << K;
      }
    }
  }
  // cuBLASLt: bf16 -> f32 / bf16, f32 -> f32 (pure FP32), accumulate.
  cuda::BlasLt blas;
  const int64_t M = 37, N = 96, K = 136;
  for (DType in : {DType::kBF16, DType::kF32}) {
    auto x = round_to(random_floats(M * K, 31, -1, 1), in), w = round_to(random_floats(N * K, 32, -1, 1), in);
    auto dx = upload_as(x, in), dw = upload_as(w, in);
    auto ref = matmul_ref(x, w, M, N, K);
    cuda::DeviceBuffer y(M * N * 4);
    blas.matmul(dx.get(), dw.get(), in, M, N, K, y.get(), DType::kF32, false, nullptr);
    EXPECT_LT(nmse_d(to_host<float>(y, M * N), ref), 1e-10) << dtype_name(in);
    blas.matmul(dx.get(), dw.get(), in, M, N, K, y.get(), DType::kF32, true, nullptr);  // y = 2 x W^T
    auto twice = ref;
    for (auto& v : twice) v *= 2;
    EXPECT_LT(nmse_d(to_host<float>(y, M * N), twice), 1e-10) << dtype_name(in) << " accumulate";
    if (in == DType::kBF16) {
      blas.matmul(dx.get(), dw.get(), in, M, N, K, y.get(), DType::kBF16, false, nullptr);
      EXPECT_LT(nmse_d(download_as(y, M * N, DType::kBF16), ref), 1e-5);
    }
    // Batch-invariant SIMT GEMM: correct, and each row bit-identical whatever M is.
    cuda::gemm_simt(dx.get(), dw.get(), in, M, N, K, y.get(), N, cuda::GemmOut::kStoreF32, nullptr);
    auto full = to_host<float>(y, M * N);
    EXPECT_LT(nmse_d(full, ref), 1e-10);
    for (int64_t m0 : {int64_t{0}, int64_t{5}, int64_t{36}}) {
      for (int64_t mm : {int64_t{1}, int64_t{13}}) {
        if (m0 + mm > M) continue;
        const auto* xs = static_cast<const uint8_t*>(dx.get()) + m0 * K * (in == DType::kF32 ? 4 : 2);
        cuda::DeviceBuffer ys(mm * N * 4);
        cuda::gemm_simt(xs, dw.get(), in, mm, N, K, ys.get(), N, cuda::GemmOut::kStoreF32, nullptr);
        auto part = to_host<float>(ys, mm * N);
        ASSERT_EQ(0, std::memcmp(part.data(), full.data() + m0 * N, mm * N * 4)) << "rows " << m0 << "+" << mm;
      }
    }
  }
}

// Candidate set of the CPU sampler's rules (descending p, ties to the lower id) for checks.
std::vector<int32_t> cpu_candidates(const std::vector<float>& logits, const SamplingParams& p, std::vector<double>* probs) {
  const int32_t V = static_cast<int32_t>(logits.size());
  std::vector<float> w(V);
  float mx = -INFINITY;
  for (int32_t i = 0; i < V; ++i) mx = std::max(mx, w[i] = logits[i] / p.temperature);
  for (auto& v : w) v = std::exp(v - mx);
  std::vector<int32_t> idx;
  for (int32_t i = 0; i < V; ++i)
    if (p.min_p <= 0 || w[i] >= p.min_p) idx.push_back(i);
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < idx.size()) idx.resize(p.top_k);
  double kept = 0;
  for (int32_t i : idx) kept += w[i];
  if (p.top_p < 1) {
    double cum = 0;
    size_t cut = 0;
    for (; cut < idx.size(); ++cut) {
      cum += w[idx[cut]];
      if (cum >= p.top_p * kept) break;
    }
    idx.resize(std::min(cut + 1, idx.size()));
  }
  if (probs) {
    probs->assign(V, 0.0);
    double s = 0;
    for (int32_t i : idx) s += w[i];
    for (int32_t i : idx) (*probs)[i] = w[i] / s;
  }
  return idx;
}

TEST(CudaOps, SamplerMatchesCpuSemantics) {
  PAGODA_REQUIRE_GPU();
  const int64_t V = 1000;
  std::mt19937 rng(5);
  // Rows: random logits with a few exact ties at the top.
  const int rows = 6;
  std::vector<float> logits(rows * V);
  for (int r = 0; r < rows; ++r) {
    auto row = random_floats(V, 100 + r, -4, 4);
    row[17] = row[400] = 5.0f;  // tie at the top: the lower id wins
    std::copy(row.begin(), row.end(), logits.begin() + r * V);
  }
  struct Spec {
    SamplingParams p;
    std::vector<int32_t> prompt, output, blocked;
    uint64_t seed;
  };
  std::vector<Spec> specs(rows);
  specs[0].p.temperature = 0;                                    // greedy (tie -> 17)
  specs[1].p.temperature = 0.7f;                                 // plain temperature: same token as the CPU
  specs[1].p.logprobs = 5;
  specs[2].p.temperature = 0;                                    // penalties change the argmax
  specs[2].p.repetition_penalty = 1.5f;
  specs[2].p.presence_penalty = 0.5f;
  specs[2].p.frequency_penalty = 0.3f;
  specs[2].prompt = {17, 5, 6};
  specs[2].output = {400, 400, 9};
  specs[3].p.temperature = 1.3f;                                 // all filters
  specs[3].p.top_k = 50;
  specs[3].p.top_p = 0.8f;
  specs[3].p.min_p = 0.02f;
  specs[4].p.temperature = 0;                                    // min_tokens mask
  specs[4].blocked = {17, 400};
  specs[4].p.logprobs = 3;
  specs[5].p.temperature = 0.9f;
  specs[5].p.top_p = 0.5f;
  for (int r = 0; r < rows; ++r) specs[r].seed = 1000 + r;

  auto run_gpu = [&](const std::vector<double>& uniforms) {
    std::vector<cuda::SampleRowParams> prm(rows);
    std::vector<cuda::PenaltyEntry> pens;
    std::vector<int32_t> blocked;
    for (int r = 0; r < rows; ++r) {
      const Spec& s = specs[r];
      cuda::SampleRowParams& q = prm[r];
      q = {};
      q.logits_row = r;
      q.top_k = s.p.top_k;
      q.temperature = s.p.temperature;
      q.top_p = s.p.top_p;
      q.min_p = s.p.min_p;
      q.repetition_penalty = s.p.repetition_penalty;
      q.presence_penalty = s.p.presence_penalty;
      q.frequency_penalty = s.p.frequency_penalty;
      q.logprobs = s.p.logprobs;
      q.uniform = uniforms[r];
      q.pen_begin = static_cast<int32_t>(pens.size());
      std::vector<int32_t> all = s.prompt;
      all.insert(all.end(), s.output.begin(), s.output.end());
      std::sort(all.begin(), all.end());
      all.erase(std::unique(all.begin(), all.end()), all.end());
      for (int32_t t : all) pens.push_back({t, static_cast<int32_t>(std::count(s.output.begin(), s.output.end(), t))});
      q.pen_count = static_cast<int32_t>(pens.size()) - q.pen_begin;
      q.block_begin = static_cast<int32_t>(blocked.size());
      blocked.insert(blocked.end(), s.blocked.begin(), s.blocked.end());
      q.block_count = static_cast<int32_t>(s.blocked.size());
    }
    if (pens.empty()) pens.push_back({0, 0});
    if (blocked.empty()) blocked.push_back(0);
    auto dl = to_device(logits), dp = to_device(prm), dpen = to_device(pens), dbl = to_device(blocked);
    cuda::DeviceBuffer work(rows * V * 4), mask(rows * V), out(rows * sizeof(cuda::SampleOutput));
    cuda::sample_rows(dl.as<float>(), V, dp.as<cuda::SampleRowParams>(), rows, dpen.as<cuda::PenaltyEntry>(),
                      dbl.as<int32_t>(), work.as<float>(), mask.as<uint8_t>(), out.as<cuda::SampleOutput>(), nullptr);
    return to_host<cuda::SampleOutput>(out, rows);
  };

  std::vector<double> u(rows);
  for (int r = 0; r < rows; ++r) u[r] = token_rng(specs[r].seed, 3).uniform();
  const auto got = run_gpu(u);
  const auto again = run_gpu(u);
  Sampler cpu;
  for (int r = 0; r < rows; ++r) {
    const Spec& s = specs[r];
    std::vector<float> row(logits.begin() + r * V, logits.begin() + (r + 1) * V);
    for (int32_t b : s.blocked) row[b] = -INFINITY;
    Rng rg = token_rng(s.seed, 3);
    const SampleResult want = cpu.sample(row, s.p, TokenHistory{s.prompt, s.output}, rg);
    EXPECT_EQ(got[r].token, again[r].token) << "row " << r << ": not deterministic";
    if (s.p.greedy() || (s.p.top_k <= 0 && s.p.top_p >= 1 && s.p.min_p <= 0)) {
      EXPECT_EQ(got[r].token, want.token) << "row " << r;  // same walk order as the CPU: same token
    } else {
      auto cands = cpu_candidates(row, s.p, nullptr);
      EXPECT_NE(std::find(cands.begin(), cands.end(), got[r].token), cands.end()) << "row " << r << " outside the candidates";
    }
    if (s.p.logprobs >= 0) {
      EXPECT_NEAR(got[r].logprob, want.logprob, 1e-4) << "row " << r;
      for (int k = 0; k < s.p.logprobs; ++k) {
        EXPECT_EQ(got[r].top_ids[k], want.top[k].token) << "row " << r << " top " << k;
        EXPECT_NEAR(got[r].top_logprobs[k], want.top[k].logprob, 1e-4);
      }
    }
  }
  EXPECT_EQ(got[0].token, 17);
  EXPECT_NE(got[4].token, 17);
  EXPECT_NE(got[4].token, 400);
  // Distribution under all filters: stratified draws hit each candidate in proportion to its
  // probability (the walk maps u in [0, 1) onto the candidates' cumulative mass).
  const int draws = 600;
  std::vector<std::vector<int>> hist(rows, std::vector<int>(V, 0));
  for (int i = 0; i < draws; ++i) {
    const auto o = run_gpu(std::vector<double>(rows, (i + 0.5) / draws));
    for (int r = 0; r < rows; ++r) ++hist[r][o[r].token];
  }
  for (int r : {3, 5}) {
    std::vector<double> probs;
    std::vector<float> row(logits.begin() + r * V, logits.begin() + (r + 1) * V);
    cpu_candidates(row, specs[r].p, &probs);
    double worst = 0;
    for (int64_t t = 0; t < V; ++t) {
      worst = std::max(worst, std::abs(hist[r][t] - probs[t] * draws));
      if (probs[t] == 0) {
        EXPECT_EQ(hist[r][t], 0) << "row " << r << " token " << t << " is not a candidate";
      }
    }
    EXPECT_LE(worst, 2.0) << "row " << r;
  }
}

#endif  // PAGODA_HAVE_CUDA

}  // namespace
}  // namespace pagoda
