// Float-weight (f32, f16, bf16) linear kernels for AVX-512 F, used by the avx512 and the VNNI
// levels alike (the float code does not change with VNNI).
//
// Register tile: V <= 3 row groups (16 rows each: one zmm of weights per k) x T <= 8 tokens (one
// broadcast each per k) = up to 24 zmm accumulators. Per k that is 3 weight loads + 8 broadcasts
// for 24 FMAs. On Ice Lake a 512-bit load or broadcast issues only about once per cycle next to
// 512-bit arithmetic (measured: docs/performance.md), so a tile needs >= 2 FMAs per load to stay
// FMA-bound; the previous 2-group x 8-token tile had 10 loads (plus 2 widenings) for 16 FMAs.
//
// GEMM (fgemm_packed, more than kGemvMaxTokens tokens): x is first transposed into token tiles
// (pack_x, layout in kernels.h: a tile's 8 broadcasts per k are one 32-byte run). K is cut into
// kKc blocks; per block each 48-row panel of weights is widened to f32 once into an L1-resident
// buffer (48 x 128 f32 = 24 KB) and reused by every token tile, so the f16/bf16 -> f32
// conversion (2 uops on the FMA ports per vector) is paid once per panel and K block, not once
// per token tile. Accumulators go to y at the end of a K block and come back at the start of the
// next. Panels are grouped so that the y block of a group of panels (kYBlockBytes) and the x slice
// of one token chunk and K block (kXSliceBytes) stay in L2.
// GEMV (fgemm, few tokens): the same tile reads the packed weights directly (widening in
// registers), whole K at once, with software prefetch (the weight stream is the cost).
//
// Batch invariance: every output y[t][n] is one FMA chain over k = 0, 1, ..., K - 1 starting from
// +0 (acc = fma(w[n][k], x[t][k], acc)) whatever the tile shape, K blocking, token count or thread
// split (stores and reloads between K blocks are exact). So a token's row is bit-identical for any
// M and any position in the batch, and the GEMV and GEMM schedules agree bit for bit.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "backend/cpu/kernels.h"

namespace pagoda::cpu::avx512 {
namespace {

constexpr int kV = 3;                          // row groups per panel
constexpr int kT = static_cast<int>(kXTile);   // tokens per tile
constexpr int64_t kKc = kXKBlock;              // K block of the GEMM schedule
constexpr int64_t kYBlockBytes = 512 * 1024;   // partial sums of one token chunk x group of panels
constexpr int64_t kXSliceBytes = 256 * 1024;   // packed x bytes of one token chunk x K block
constexpr int64_t kPrefetchBytes = 4096;

template <DType T>
inline __m512 load16(const void* p, int64_t e) {
  if constexpr (T == DType::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(p) + 16 * e);
  } else if constexpr (T == DType::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + 16 * e)));
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + 16 * e));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

inline __mmask16 row_mask(int64_t rows) {
  return rows >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << rows) - 1);
}

// Weight sources of the tile. GroupsW: V packed groups read directly (the GEMV schedule), each
// [K][16] of T, widened in registers, with software prefetch. PanelW: a widened f32 panel of the
// GEMM schedule, [kc][V][16] (the V vectors of one k are adjacent: separate per-group arrays would
// put the 3 loads of one k 8 KB apart, in the same L1 set, and measured ~25 % slower).
template <DType T, int V>
struct GroupsW {
  const void* g[V];
  static constexpr bool kPrefetch = true;
  __m512 load(int v, int64_t k) const { return load16<T>(g[v], k); }
  void prefetch(int64_t k) const {
    constexpr int64_t kEs = T == DType::kF32 ? 4 : 2;
    if (kEs == 4 || (k & 1) == 0)  // one prefetch per 64-byte line of each group
      for (int v = 0; v < V; ++v) _mm_prefetch(static_cast<const char*>(g[v]) + 16 * kEs * k + kPrefetchBytes, _MM_HINT_T0);
  }
};
template <int V>
struct PanelW {
  const float* p;
  static constexpr bool kPrefetch = false;
  __m512 load(int v, int64_t k) const { return _mm512_load_ps(p + (k * V + v) * 16); }
  void prefetch(int64_t) const {}
};

// The tile: out[t][16 v + r] = in[t][16 v + r] (or +0) + sum over k < kc of W_v[k][r] * x_t[k]
// for v < V, t < T.
//   w:   weights (GroupsW or PanelW)
//   x:   token t, element k at x[k * xs + t * ts] (packed tile: xs = 8, ts = 1; rows: xs = 1, ts = ldx)
//   in:  accumulators to continue (null: start from +0), row t at in + t * ldi
//   out: row t at out + t * ldo; rows[v] valid rows of group v (stores masked past N)
template <int V, int T, class W>
inline void tile(const W& w, const float* x, int64_t xs, int64_t ts, int64_t kc, const float* in, int64_t ldi,
                 float* out, int64_t ldo, const int64_t* rows, const float* xnext = nullptr) {
  __m512 acc[V][T];
  if (in == nullptr) {
    for (int v = 0; v < V; ++v)
      for (int t = 0; t < T; ++t) acc[v][t] = _mm512_setzero_ps();
  } else {
    for (int v = 0; v < V; ++v)
      for (int t = 0; t < T; ++t) acc[v][t] = _mm512_loadu_ps(in + t * ldi + 16 * v);
  }
  for (int64_t k = 0; k < kc; ++k) {
    if constexpr (W::kPrefetch) w.prefetch(k);
    // the next token tile's x block (packed GEMM x): one line per 2 k, ahead of its use
    if (xnext != nullptr && (k & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(xnext + k * kT), _MM_HINT_T0);
    __m512 wv[V];
    for (int v = 0; v < V; ++v) wv[v] = w.load(v, k);
    for (int t = 0; t < T; ++t) {
      const __m512 xb = _mm512_set1_ps(x[k * xs + t * ts]);
      for (int v = 0; v < V; ++v) acc[v][t] = _mm512_fmadd_ps(wv[v], xb, acc[v][t]);
    }
  }
  for (int v = 0; v < V; ++v) {
    const __mmask16 mk = row_mask(rows[v]);
    for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(out + t * ldo + 16 * v, mk, acc[v][t]);
  }
}

// Runtime token count -> template instance.
template <int V, class W>
inline void tile_t(int mt, const W& w, const float* x, int64_t xs, int64_t ts, int64_t kc, const float* in,
                   int64_t ldi, float* out, int64_t ldo, const int64_t* rows, const float* xnext = nullptr) {
  switch (mt) {
    case 1: tile<V, 1>(w, x, xs, ts, kc, in, ldi, out, ldo, rows, xnext); break;
    case 2: tile<V, 2>(w, x, xs, ts, kc, in, ldi, out, ldo, rows, xnext); break;
    case 3: tile<V, 3>(w, x, xs, ts, kc, in, ldi, out, ldo, rows, xnext); break;
    case 4: tile<V, 4>(w, x, xs, ts, kc, in, ldi, out, ldo, rows, xnext); break;
    case 5: tile<V, 5>(w, x, xs, ts, kc, in, ldi, out, ldo, rows, xnext); break;
    case 6: tile<V, 6>(w, x, xs, ts, kc, in, ldi, out, ldo, rows, xnext); break;
    case 7: tile<V, 7>(w, x, xs, ts, kc, in, ldi, out, ldo, rows, xnext); break;
    default: tile<V, 8>(w, x, xs, ts, kc, in, ldi, out, ldo, rows, xnext); break;
  }
}

template <DType T>
constexpr int64_t elem_bytes() {
  return T == DType::kF32 ? 4 : 2;
}

template <DType T, int V>
inline void gemv_groups(const uint8_t* packed, int64_t gbytes, int64_t g, int mt, const float* x, int64_t ldx,
                        int64_t k, float* y, int64_t ldy, const int64_t* rows) {
  GroupsW<T, V> w;
  for (int v = 0; v < V; ++v) w.g[v] = packed + (g + v) * gbytes;
  tile_t<V>(mt, w, x, 1, ldx, k, nullptr, 0, y, ldy, rows);
}

template <DType T>
void fgemv_t(const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const float* x, int64_t ldx, int64_t m0,
             int64_t m1, float* y, int64_t ldy, int64_t n_total) {
  const int64_t gbytes = 16 * k * elem_bytes<T>();
  for (int64_t m = m0; m < m1; m += kT) {
    const int mt = static_cast<int>(m1 - m < kT ? m1 - m : kT);
    for (int64_t g = g0; g < g1; g += kV) {
      const int nv = static_cast<int>(g1 - g < kV ? g1 - g : kV);
      int64_t rows[kV];
      for (int v = 0; v < nv; ++v) rows[v] = n_total - 16 * (g + v);
      const float* xt = x + m * ldx;
      float* yt = y + m * ldy + 16 * g;
      switch (nv) {
        case 1: gemv_groups<T, 1>(packed, gbytes, g, mt, xt, ldx, k, yt, ldy, rows); break;
        case 2: gemv_groups<T, 2>(packed, gbytes, g, mt, xt, ldx, k, yt, ldy, rows); break;
        default: gemv_groups<T, 3>(packed, gbytes, g, mt, xt, ldx, k, yt, ldy, rows); break;
      }
    }
  }
}

// One K block of one panel for every token tile of [mb, me): continue from / store to the compact
// partial sums (cpanel), or into y on the last K block. xb: the packed x of this K block, tile 0.
template <int V>
inline void gemm_panel(const float* panel, const float* xb, int64_t kc, int64_t mb, int64_t me, float* cpanel,
                       bool first, bool last, float* y, int64_t ldy, const int64_t* rows) {
  const PanelW<V> w{panel};
  for (int64_t t0 = mb; t0 < me; t0 += kT) {
    const int mt = static_cast<int>(me - t0 < kT ? me - t0 : kT);
    const float* xt = xb + (t0 / kT) * kKc * kT;
    const float* xn = t0 + kT < me ? xt + kKc * kT : nullptr;
    float* ct = cpanel + ((t0 - mb) / kT) * kT * V * 16;
    const float* in = first ? nullptr : ct;
    if (last) {
      tile_t<V>(mt, w, xt, kT, 1, kc, in, V * 16, y + t0 * ldy, ldy, rows, xn);
    } else {
      tile_t<V>(mt, w, xt, kT, 1, kc, in, V * 16, ct, V * 16, rows, xn);
    }
  }
}

template <DType T>
void fgemm_packed_t(const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const float* xp, int64_t m_total,
                    int64_t m0, int64_t m1, float* y, int64_t ldy, int64_t n_total) {
  const int64_t tiles_total = (m_total + kT - 1) / kT;
  const int64_t gbytes = 16 * k * elem_bytes<T>();
  alignas(64) static thread_local float panel[kV * kKc * 16];
  // Partial sums between K blocks live in a compact per-thread buffer (token tile, panel) ->
  // [8][48] f32, not in y: y's rows are N floats apart, so a tile's 8 rows would fall into the
  // same L1 sets and 4 KB pages (measured 1.2-1.3x slower on the Llama-1B shapes).
  alignas(64) static thread_local float cbuf[kYBlockBytes / 4 + kT * kV * 16];
  const int64_t kc_max = k < kKc ? k : kKc;
  int64_t mc = kXSliceBytes / (kc_max * 4);
  mc = mc < kT ? kT : mc / kT * kT;
  if (mc * kV * 16 * 4 > kYBlockBytes) mc = kYBlockBytes / (kV * 16 * 4) / kT * kT;
  for (int64_t mb = m0; mb < m1; mb += mc) {
    const int64_t me = mb + mc < m1 ? mb + mc : m1;
    const int64_t ntiles = (me - mb + kT - 1) / kT;
    int64_t pg = kYBlockBytes / (ntiles * kT * 16 * 4);  // groups per panel block
    pg = pg < kV ? kV : pg / kV * kV;
    for (int64_t pb = g0; pb < g1; pb += pg) {
      const int64_t pe = pb + pg < g1 ? pb + pg : g1;
      for (int64_t kb = 0; kb < k; kb += kKc) {
        const int64_t kc = k - kb < kKc ? k - kb : kKc;
        const bool last = kb + kc == k;
        const float* xb = xp + (kb / kKc) * tiles_total * kKc * kT;
        for (int64_t g = pb; g < pe; g += kV) {
          const int nv = static_cast<int>(pe - g < kV ? pe - g : kV);
          int64_t rows[kV];
          for (int v = 0; v < nv; ++v) {
            const uint8_t* gp = packed + (g + v) * gbytes;
            for (int64_t e = 0; e < kc; ++e) _mm512_store_ps(panel + (e * nv + v) * 16, load16<T>(gp, kb + e));
            rows[v] = last ? n_total - 16 * (g + v) : 16;
          }
          float* cpanel = cbuf + ((g - pb) / kV) * ntiles * kT * kV * 16;
          float* yg = y + 16 * g;
          switch (nv) {
            case 1: gemm_panel<1>(panel, xb, kc, mb, me, cpanel, kb == 0, last, yg, ldy, rows); break;
            case 2: gemm_panel<2>(panel, xb, kc, mb, me, cpanel, kb == 0, last, yg, ldy, rows); break;
            default: gemm_panel<3>(panel, xb, kc, mb, me, cpanel, kb == 0, last, yg, ldy, rows); break;
          }
        }
      }
    }
  }
}

}  // namespace

void fgemm_512(DType t, const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const float* x, int64_t ldx,
               int64_t m0, int64_t m1, float* y, int64_t ldy, int64_t n_total) {
  switch (t) {
    case DType::kF32: fgemv_t<DType::kF32>(packed, k, g0, g1, x, ldx, m0, m1, y, ldy, n_total); break;
    case DType::kF16: fgemv_t<DType::kF16>(packed, k, g0, g1, x, ldx, m0, m1, y, ldy, n_total); break;
    case DType::kBF16: fgemv_t<DType::kBF16>(packed, k, g0, g1, x, ldx, m0, m1, y, ldy, n_total); break;
    default: __builtin_trap();
  }
}

void fgemm_packed_512(DType t, const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const float* xp,
                      int64_t m_total, int64_t m0, int64_t m1, float* y, int64_t ldy, int64_t n_total) {
  switch (t) {
    case DType::kF32: fgemm_packed_t<DType::kF32>(packed, k, g0, g1, xp, m_total, m0, m1, y, ldy, n_total); break;
    case DType::kF16: fgemm_packed_t<DType::kF16>(packed, k, g0, g1, xp, m_total, m0, m1, y, ldy, n_total); break;
    case DType::kBF16: fgemm_packed_t<DType::kBF16>(packed, k, g0, g1, xp, m_total, m0, m1, y, ldy, n_total); break;
    default: __builtin_trap();
  }
}

// Rows [m0, m1) of x (m0 a multiple of 8) -> the packed layout of kernels.h. Full tiles transpose
// 8 x 8 blocks in registers; a partial last tile or K block is copied element by element (unused
// lanes are never read).
void pack_x_512(const float* x, int64_t ldx, int64_t m0, int64_t m1, int64_t m_total, int64_t k, float* xp) {
  const int64_t tiles_total = (m_total + kT - 1) / kT;
  for (int64_t t0 = m0; t0 < m1; t0 += kT) {
    const int64_t mt = m1 - t0 < kT ? m1 - t0 : kT;
    for (int64_t kb = 0; kb < k; kb += kKc) {
      const int64_t kc = k - kb < kKc ? k - kb : kKc;
      float* dst = xp + ((kb / kKc) * tiles_total + t0 / kT) * kKc * kT;
      const float* src = x + t0 * ldx + kb;
      int64_t e = 0;
      if (mt == kT) {
        for (; e + 8 <= kc; e += 8) {
          __m256 r[8];
          for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ldx + e);
          // 8 x 8 transpose: r[i][j] = x[t0 + i][kb + e + j] -> row j of the output
          const __m256 a0 = _mm256_unpacklo_ps(r[0], r[1]), a1 = _mm256_unpackhi_ps(r[0], r[1]);
          const __m256 a2 = _mm256_unpacklo_ps(r[2], r[3]), a3 = _mm256_unpackhi_ps(r[2], r[3]);
          const __m256 a4 = _mm256_unpacklo_ps(r[4], r[5]), a5 = _mm256_unpackhi_ps(r[4], r[5]);
          const __m256 a6 = _mm256_unpacklo_ps(r[6], r[7]), a7 = _mm256_unpackhi_ps(r[6], r[7]);
          const __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xEE);
          const __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xEE);
          const __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xEE);
          const __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xEE);
          float* d = dst + e * kT;
          _mm256_storeu_ps(d + 0 * kT, _mm256_permute2f128_ps(b0, b4, 0x20));
          _mm256_storeu_ps(d + 1 * kT, _mm256_permute2f128_ps(b1, b5, 0x20));
          _mm256_storeu_ps(d + 2 * kT, _mm256_permute2f128_ps(b2, b6, 0x20));
          _mm256_storeu_ps(d + 3 * kT, _mm256_permute2f128_ps(b3, b7, 0x20));
          _mm256_storeu_ps(d + 4 * kT, _mm256_permute2f128_ps(b0, b4, 0x31));
          _mm256_storeu_ps(d + 5 * kT, _mm256_permute2f128_ps(b1, b5, 0x31));
          _mm256_storeu_ps(d + 6 * kT, _mm256_permute2f128_ps(b2, b6, 0x31));
          _mm256_storeu_ps(d + 7 * kT, _mm256_permute2f128_ps(b3, b7, 0x31));
        }
      }
      for (; e < kc; ++e)
        for (int64_t i = 0; i < mt; ++i) dst[e * kT + i] = src[i * ldx + e];
    }
  }
}

}  // namespace pagoda::cpu::avx512
