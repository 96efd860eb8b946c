// Fused QKV post-processing: bias add (Qwen2), per-head RMSNorm (Qwen3 q_norm / k_norm), rotary
// position embedding (interleaved or half-split pairs, cos/sin from the model's RopeTable, so
// llama3 scaling and rope_freqs are already in the table), and the paged KV write.
//
// Head dims 64 / 128 fully rotated (rope_kv_vec4_kernel): one block per token, four values a
// thread (rope_chunk4, which the decode attention uses too when it fuses this step in).
// Otherwise one warp per (token, head) over the q, k and v heads of the fused projection output;
// a head's values pass through a per-warp shared-memory row so a lane can read its rotation
// partner. All arithmetic in f32 as the CPU op (ops/rope.cc); K and V are rounded once, at the
// cache store.
#include <algorithm>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/rope_chunk.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxHeadDim = 256;

__global__ __launch_bounds__(kWarps * 32) void rope_kv_kernel(RopeKvParams p) {
  __shared__ float rows[kWarps][kMaxHeadDim];
  pdl_trigger();
  pdl_wait();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int H = static_cast<int>(p.num_heads), KVH = static_cast<int>(p.cache.num_kv_heads);
  const int D = static_cast<int>(p.head_dim);
  const int hh = blockIdx.y * kWarps + warp;
  if (hh >= H + 2 * KVH) return;
  const int64_t t = blockIdx.x;
  float* xs = rows[warp];
  const int width = (H + 2 * KVH) * D;
  const float* src = p.qkv + t * width + static_cast<int64_t>(hh) * D;
  const bool is_q = hh < H, is_k = !is_q && hh < H + KVH;
  float ss = 0.0f;
  for (int d = lane; d < D; d += 32) {
    float v = src[d];
    if (p.bias) v += p.bias[hh * D + d];
    xs[d] = v;
    ss = fmaf(v, v, ss);
  }
  const float* nw = is_q ? p.q_norm : (is_k ? p.k_norm : nullptr);
  if (nw) {
    ss = warp_sum(ss);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + p.norm_eps);
    for (int d = lane; d < D; d += 32) xs[d] = xs[d] * inv * nw[d];
  }
  __syncwarp();
  const int pos = p.positions[t];
  const int half = static_cast<int>(p.rope_dim) / 2;
  const float* cs = p.cos + static_cast<int64_t>(pos) * half;
  const float* sn = p.sin + static_cast<int64_t>(pos) * half;
  int64_t cache_base = -1;
  if (!is_q) {
    const int slot = p.slots[t];
    if (slot < 0) return;
    const int bs = static_cast<int>(p.cache.block_size);
    const int kvh = is_k ? hh - H : hh - H - KVH;
    cache_base = ((static_cast<int64_t>(slot / bs) * KVH + kvh) * bs + slot % bs) * D;
  }
  for (int d = lane; d < D; d += 32) {
    float v = xs[d];
    if (hh < H + KVH && d < p.rope_dim) {
      if (p.interleaved) {
        const int i = d >> 1;
        v = (d & 1) ? xs[d - 1] * sn[i] + xs[d] * cs[i] : xs[d] * cs[i] - xs[d + 1] * sn[i];
      } else if (d < half) {
        v = xs[d] * cs[d] - xs[d + half] * sn[d];
      } else {
        v = xs[d - half] * sn[d - half] + xs[d] * cs[d - half];
      }
    }
    if (is_q) {
      p.q_out[t * H * D + static_cast<int64_t>(hh) * D + d] = v;
    } else {
      store_as(is_k ? p.cache.k : p.cache.v, p.cache.dtype, cache_base + d, v);
    }
  }
}

// The same for head_dim 64 / 128 with the whole head rotated (every Llama / Qwen / Mistral): one
// block per token, each thread four consecutive values of a head (16-byte loads and stores,
// rope_chunk4). The position and the cache slot are read before the row, so no load waits on
// another.
template <int D>
__global__ __launch_bounds__(256) void rope_kv_vec4_kernel(RopeKvParams p) {
  constexpr int CPH = D / 4;  // lanes a head
  pdl_trigger();
  pdl_wait();
  const int H = static_cast<int>(p.num_heads), KVH = static_cast<int>(p.cache.num_kv_heads);
  const int64_t t = blockIdx.x;
  const int pos = p.positions[t];
  const int slot = p.slots[t];
  const int chunks = (H + 2 * KVH) * CPH;
  const float4* src = reinterpret_cast<const float4*>(p.qkv) + t * chunks;
  const float* cs = p.cos + static_cast<int64_t>(pos) * (D / 2);
  const float* sn = p.sin + static_cast<int64_t>(pos) * (D / 2);
  const int bs = static_cast<int>(p.cache.block_size);
  const int64_t page = slot >= 0 ? slot / bs : 0, in_page = slot >= 0 ? slot % bs : 0;
  // Every lane of a warp runs every iteration (the shuffles need them); lanes past the row idle.
  for (int base = threadIdx.x - (threadIdx.x & 31); base < chunks; base += blockDim.x) {
    const int idx = base + (threadIdx.x & 31);
    const bool valid = idx < chunks;
    const int hh = idx / CPH, c = idx - hh * CPH;
    const float4 v = rope_chunk4<D>(p, src, hh, c, valid, cs, sn);
    if (!valid) continue;
    if (hh < H) {
      reinterpret_cast<float4*>(p.q_out + t * H * D)[idx] = v;
    } else if (slot >= 0) {
      const bool is_k = hh < H + KVH;
      const int kvh = is_k ? hh - H : hh - H - KVH;
      store4_as(is_k ? p.cache.k : p.cache.v, p.cache.dtype, ((page * KVH + kvh) * bs + in_page) * D + c * 4, v);
    }
  }
}

}  // namespace

void RopeKvParams::check() const {
  PAGODA_CUDA_REQUIRE(qkv && q_out && cos && sin && positions && slots && cache.k && cache.v, "rope_kv_write: missing input");
  PAGODA_CUDA_REQUIRE(head_dim > 0 && head_dim <= kMaxHeadDim, "rope_kv_write: head_dim must be in [1, 256]");
  PAGODA_CUDA_REQUIRE(rope_dim % 2 == 0 && rope_dim <= head_dim, "rope_kv_write: rope_dim must be even and <= head_dim");
  PAGODA_CUDA_REQUIRE(cache.head_dim == head_dim && num_heads % cache.num_kv_heads == 0, "rope_kv_write: head shapes");
  PAGODA_CUDA_REQUIRE(kv_cache_dtype_supported(cache.dtype), "rope_kv_write: cache dtype must be f32, f16, bf16 or f8_e4m3");
}

void rope_kv_write(const RopeKvParams& p, cudaStream_t s) {
  p.check();
  if (p.num_tokens <= 0) return;
  if (rope_vec4_supported(p) && aligned16(p.q_out)) {
    const int64_t chunks = (p.num_heads + 2 * p.cache.num_kv_heads) * p.head_dim / 4;
    const int threads = static_cast<int>(std::min<int64_t>(256, ceil_div(chunks, 32) * 32));
    if (p.head_dim == 128) launch_pdl(rope_kv_vec4_kernel<128>, dim3(p.num_tokens), dim3(threads), 0, s, p);
    else launch_pdl(rope_kv_vec4_kernel<64>, dim3(p.num_tokens), dim3(threads), 0, s, p);
    CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t heads = p.num_heads + 2 * p.cache.num_kv_heads;
  dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(ceil_div(heads, kWarps)));
  launch_pdl(rope_kv_kernel, grid, dim3(kWarps * 32), 0, s, p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
