// The per-thread step of the fused QKV post-processing at head_dim 64 / 128 with the whole head
// rotated, shared by the RoPE + KV write kernel (rope.cu) and the decode attention that fuses it
// (attention_decode.cu), so both produce the same bits. Included by .cu files only.
#pragma once

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"

namespace pagoda::cuda {

// The cos / sin values chunk c of a rotated head uses, from the position's rows `cs` / `sn`: the
// half-split layout pairs dims 4c .. 4c + 3 with the other half and takes four of each; the
// interleaved one rotates the pairs (4c, 4c + 1) and (4c + 2, 4c + 3) with the first two. The same
// for every q and k head of a token. EARLY: plain loads that may be issued before pdl_wait()
// (load_f32x4<true>), for a kernel that reads them before waiting for its predecessor.
struct RopeCs {
  float4 c, s;
};
template <int D, bool EARLY = false>
__device__ __forceinline__ RopeCs rope_cs(bool interleaved, int c, const float* cs, const float* sn) {
  const int d0 = c * 4, half = D / 2;
  RopeCs r;
  if (interleaved) {
    const float2 c2 = load_f32x2<EARLY>(reinterpret_cast<const float2*>(cs + d0 / 2));
    const float2 s2 = load_f32x2<EARLY>(reinterpret_cast<const float2*>(sn + d0 / 2));
    r.c = make_float4(c2.x, c2.y, 0.f, 0.f);
    r.s = make_float4(s2.x, s2.y, 0.f, 0.f);
    return r;
  }
  const int o = d0 < half ? d0 : d0 - half;
  r.c = load_f32x4<EARLY>(reinterpret_cast<const float4*>(cs + o));
  r.s = load_f32x4<EARLY>(reinterpret_cast<const float4*>(sn + o));
  return r;
}

// Four consecutive values, dims 4c .. 4c + 3, of head hh (q heads, then k heads, then v heads) of
// one token's fused projection row `src` (float4 chunks): bias, per-head RMSNorm (q / k), rotation
// with the chunk's cos / sin `r` (rope_cs; q and k heads). A head is CPH = D / 4
// consecutive lanes of one warp, so the norm is a CPH-lane shuffle reduction and the half-split
// rotation partner (d +- D / 2) is lane ^ (CPH / 2). Every lane of the warp calls this (the
// shuffles); lanes with valid = false read nothing and return garbage. All arithmetic in f32, as
// the CPU op (ops/rope.cc).
template <int D>
__device__ __forceinline__ float4 rope_chunk4(const RopeKvParams& p, const float4* src, int hh, int c, bool valid,
                                              const RopeCs& r) {
  constexpr int CPH = D / 4;
  const int H = static_cast<int>(p.num_heads), KVH = static_cast<int>(p.cache.num_kv_heads);
  const int idx = hh * CPH + c, d0 = c * 4, half = D / 2;
  float4 v = valid ? src[idx] : make_float4(0.f, 0.f, 0.f, 0.f);
  if (p.bias && valid) {
    const float4 b = reinterpret_cast<const float4*>(p.bias)[idx];
    v.x += b.x, v.y += b.y, v.z += b.z, v.w += b.w;
  }
  const bool is_q = hh < H, is_k = !is_q && hh < H + KVH;
  const float* nw = is_q ? p.q_norm : (is_k ? p.k_norm : nullptr);
  if (p.q_norm || p.k_norm) {  // uniform over the block: every lane takes part in the shuffles
    float ss = __fmaf_rn(v.w, v.w, __fmaf_rn(v.z, v.z, __fmaf_rn(v.y, v.y, __fmul_rn(v.x, v.x))));
#pragma unroll
    for (int o = 1; o < CPH; o <<= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (nw && valid) {
      const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + p.norm_eps);
      const float4 g = reinterpret_cast<const float4*>(nw)[c];
      v = make_float4(v.x * inv * g.x, v.y * inv * g.y, v.z * inv * g.z, v.w * inv * g.w);
    }
  }
  float4 pv;  // the rotation partners of the half-split layout
  pv.x = __shfl_xor_sync(0xffffffffu, v.x, CPH / 2);
  pv.y = __shfl_xor_sync(0xffffffffu, v.y, CPH / 2);
  pv.z = __shfl_xor_sync(0xffffffffu, v.z, CPH / 2);
  pv.w = __shfl_xor_sync(0xffffffffu, v.w, CPH / 2);
  if (!valid || hh >= H + KVH) return v;
  // a * c - b * s and b * s + a * c as explicit roundings (a multiply, then a fused multiply-add):
  // the compiler may not contract them differently in the two kernels that share this step.
  auto sub = [](float a, float c, float b, float sv) { return __fmaf_rn(a, c, -__fmul_rn(b, sv)); };
  auto add = [](float b, float sv, float a, float c) { return __fmaf_rn(b, sv, __fmul_rn(a, c)); };
  const float4 c4 = r.c, s4 = r.s;
  if (p.interleaved)
    return make_float4(sub(v.x, c4.x, v.y, s4.x), add(v.x, s4.x, v.y, c4.x), sub(v.z, c4.y, v.w, s4.y),
                       add(v.z, s4.y, v.w, c4.y));
  if (d0 < half)
    return make_float4(sub(v.x, c4.x, pv.x, s4.x), sub(v.y, c4.y, pv.y, s4.y), sub(v.z, c4.z, pv.z, s4.z),
                       sub(v.w, c4.w, pv.w, s4.w));
  return make_float4(add(pv.x, s4.x, v.x, c4.x), add(pv.y, s4.y, v.y, c4.y), add(pv.z, s4.z, v.z, c4.z),
                     add(pv.w, s4.w, v.w, c4.w));
}

// The same, reading the chunk's cos / sin from the position's rows `cs` / `sn` (only a valid q or
// k chunk reads them).
template <int D>
__device__ __forceinline__ float4 rope_chunk4(const RopeKvParams& p, const float4* src, int hh, int c, bool valid,
                                              const float* cs, const float* sn) {
  const bool rotated = valid && hh < static_cast<int>(p.num_heads + p.cache.num_kv_heads);
  const RopeCs r = rotated ? rope_cs<D>(p.interleaved, c, cs, sn) : RopeCs{};
  return rope_chunk4<D>(p, src, hh, c, valid, r);
}

// Whether the vectorised path applies: head_dim 64 / 128 rotated whole, 16-byte aligned inputs.
inline bool rope_vec4_supported(const RopeKvParams& p) {
  return (p.head_dim == 64 || p.head_dim == 128) && p.rope_dim == p.head_dim && aligned16(p.qkv) && aligned16(p.bias) &&
         aligned16(p.q_norm) && aligned16(p.k_norm) && aligned16(p.cos) && aligned16(p.sin) && aligned16(p.cache.k) &&
         aligned16(p.cache.v);
}

}  // namespace pagoda::cuda
