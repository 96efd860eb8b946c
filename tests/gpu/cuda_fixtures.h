// Device test data shared by the GPU tier's op tests and kernel benchmarks: host values rounded
// through a cache dtype and their device copies, the paged KV cache layout, a random paged cache
// with a dense reference attention, the rows of a split-KV launch, and rope_kv_write's operands.
// CUDA builds only.
#pragma once

#if PAGODA_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "backend/cuda/kernels.h"
#include "common/half.h"
#include "gpu_test_util.h"
#include "model/model_config.h"
#include "ops/rope.h"
#include "test_util.h"

namespace pagoda::test {

// Host values rounded through a 16-bit (or f32) type, and their raw bits.
inline std::vector<uint16_t> to_bits(const std::vector<float>& v, DType t) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = t == DType::kBF16 ? f32_to_bf16(v[i]) : f32_to_fp16(v[i]);
  return b;
}
// Values rounded through t (f32, f16, bf16 or f8_e4m3).
inline std::vector<float> round_to(const std::vector<float>& v, DType t) {
  if (t == DType::kF32) return v;
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    r[i] = t == DType::kBF16   ? bf16_to_f32(f32_to_bf16(v[i]))
           : t == DType::kF8E4M3 ? fp8_e4m3_to_f32(f32_to_fp8_e4m3(v[i]))
                                 : fp16_to_f32(f32_to_fp16(v[i]));
  return r;
}
// Device buffer of v stored as t (f32, f16, bf16 or f8_e4m3).
inline cuda::DeviceBuffer upload_as(const std::vector<float>& v, DType t) {
  if (t == DType::kF32) return to_device(v);
  if (t == DType::kF8E4M3) {
    std::vector<uint8_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_fp8_e4m3(v[i]);
    return to_device(b);
  }
  return to_device(to_bits(v, t));
}
inline std::vector<float> download_as(const cuda::DeviceBuffer& b, size_t n, DType t) {
  if (t == DType::kF32) return to_host<float>(b, n);
  std::vector<float> r(n);
  if (t == DType::kF8E4M3) {
    auto bytes = to_host<uint8_t>(b, n);
    for (size_t i = 0; i < n; ++i) r[i] = fp8_e4m3_to_f32(bytes[i]);
    return r;
  }
  auto bits = to_host<uint16_t>(b, n);
  for (size_t i = 0; i < n; ++i) r[i] = t == DType::kBF16 ? bf16_to_f32(bits[i]) : fp16_to_f32(bits[i]);
  return r;
}

// Element (slot, kv head, dim) of a cache in the GPU layout [blocks, kvh, bs, dh].
inline int64_t kv_index(int64_t slot, int64_t h, int64_t d, int64_t kvh, int64_t bs, int64_t dh) {
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
      : H(heads), KVH(kv_heads), D(head_dim), T(static_cast<int64_t>(pos.size())),
        cfg(attention_config(heads, kv_heads, head_dim, max_pos)) {
    cfg.rope_layout = layout;
    cfg.rope_theta = 500000;
    if (llama3_scaling) {
      cfg.rope_scaling.kind = RopeScaling::Kind::kLlama3;
      cfg.rope_scaling.factor = 8;
      cfg.rope_scaling.original_max_position = 64;
    }
    rope = std::make_unique<RopeTable>(cfg.rope_spec(), max_pos);
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

struct AttnCase {
  int64_t heads, kv_heads, head_dim, block_size;
  DType kv;
  int64_t window;
  DType out;
  float softcap = 0.0f;  // > 0: scores soft-capped (Gemma 2)
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
  // softcap > 0: scores = softcap * tanh(scores / softcap) after the scale (Gemma 2).
  std::vector<float> dense(const float* q, int64_t nq, int64_t ctx, const std::vector<int32_t>& table, double scale,
                           int64_t window, double softcap = 0) const {
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
          if (softcap > 0) s[j] = softcap * std::tanh(s[j] / softcap);
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
    p.softcap = c.softcap;
    p.part_o = part_o.as<float>();
    p.part_ml = part_ml.as<float>();
    p.counters = counters.as<int>();
    return p;
  }
};

}  // namespace pagoda::test
#endif  // PAGODA_HAVE_CUDA
