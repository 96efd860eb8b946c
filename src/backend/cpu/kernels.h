// Interface between the linear-layer dispatcher (backend/cpu/linear.cc) and the per-ISA kernel
// files (*_avx2.cc, *_avx512.cc, *_vnni.cc). Everything here is plain data and function pointers
// so the ISA files need no STL (see the ODR note in src/CMakeLists.txt).
//
// Packed weight layouts (built once by pack.cc, the same bytes for every SIMD level):
//
//  * "qint" family (q4_0, q4_1, q5_0, q5_1, q8_0; iq4_nl packed as q8_0, iq4_xs its own q8 row):
//    rows are grouped by kGroupRows = 16. For row group g and 32-element block b one record holds,
//    in order:
//      d[16]  fp16 block scales of the 16 rows (iq4_xs: f32, d * (ls - 32) of the sub-block, exact)
//      m[16]  fp16 block mins (q4_1, q5_1 only)
//      codes  unsigned codes: 4-bit formats 4 chunks of 64 bytes; in chunk c, bytes 4r..4r+3
//             hold row r's elements 4c..4c+3 in the low nibbles and 16+4c..16+4c+3 in the high
//             nibbles (exactly GGUF's qs[4c..4c+3]); q8_0 / iq4_xs 8 vectors of 64 bytes, vector v
//             bytes 4r..4r+3 = row r's elements 4v..4v+3 plus 128 (so they are unsigned; iq4_nl and
//             iq4_xs store their levels kIq4nlValues[nibble]).
//      qh[8]  (q5_0, q5_1) 64-bit masks, mask v bit 4r+i = 5th bit of row r's element 4v+i.
//    Value of row r, element e: d[r] * (code - offset) (+ m[r]); offset 8 (q4_0), 16 (q5_0),
//    128 (q8_0, iq4_xs), 0 (q4_1/q5_1). The layout turns a 64-byte load into one dword per row, so
//    the integer dot with a broadcast activation dword (vpdpbusd) accumulates 16 rows' dot products
//    in the 16 lanes: no horizontal sums anywhere.
//  * "qint k" family (q4_k, q5_k, q6_k, q3_k, q2_k, tq2_0; tq1_0 packed as tq2_0): per row group
//    and 256-element super-block, a header of f32 d[16] and (q4_k, q5_k, q2_k) f32 dmin[16] (the
//    rows' super-block scales, exact fp16 -> f32), then 8 records, one per 32-element sub-block j:
//      q4_k/q5_k: sc[16] u8, m[16] u8 (6-bit scale and min of sub-block j of each row), the
//                 4-bit code chunks as above, q5_k the 5th-bit masks as above.
//                 Value: d[r] * sc[r] * code - dmin[r] * m[r].
//      q6_k:      sc_lo[16] i8, sc_hi[16] i8 (the scales of elements 0..15 / 16..31), low-nibble
//                 chunks as above, then two sets of 8 64-bit masks (bit 4, bit 5 of the code).
//                 Value: d[r] * sc * (code - 32).
//      q2_k:      sm_lo[16], sm_hi[16] u8: scale | min << 4 (4 bits each) of elements 0..15 /
//                 16..31 of each row, then the 2-bit codes (0..3) in two vectors of 64 bytes: in
//                 vector q, byte 4r+i bits 2c..2c+1 hold row r's element 4(4q+c)+i (so the 64 bytes
//                 >> 2c & 3 are the code dword vector 4q+c, in the byte order of the chunks above).
//                 Value: d[r] * sc * code - dmin[r] * m.
//      q3_k:      sc_lo[16] i8, sc_hi[16] i8 (as q6_k; sc in -32..31), the 2-bit code vectors of
//                 q2_k (bits 0..1 of the code), then 8 64-bit masks (bit 2), code = q + 4 (0..7).
//                 Value: d[r] * sc * (code - 4).
//      tq2_0:     the 2-bit code vectors of q2_k alone (no sub-block scales), code = q + 1 (0..2).
//                 Value: d[r] * (code - 1) (tq1_0 and tq2_0 hold the same ternary values).
// Rows past N in the last group are zero.
#pragma once

#include <cstdint>

#include "common/cpu_features.h"
#include "common/dtype.h"

namespace pagoda::cpu {

constexpr int64_t kGroupRows = 16;
constexpr int64_t kQBlock = 32;

enum class PackKind { kNone, kQint, kQintK, kFloat };

// The layouts above as compile-time offsets, for the kernels (T: a qint / qint k format).
template <DType T>
struct QintLayout {
  static constexpr bool kMin = T == DType::kQ4_1 || T == DType::kQ5_1;   // m[16] after d[16]
  static constexpr bool kHigh = T == DType::kQ5_0 || T == DType::kQ5_1;  // qh masks after the codes
  static constexpr bool kF32Scale = T == DType::kIQ4_XS;                  // d[16] is f32
  static constexpr bool kQ8 = T == DType::kQ8_0 || kF32Scale;             // 8 code vectors, not 4
  static constexpr int64_t kCodesAt = (kMin || kF32Scale) ? 64 : 32;
  static constexpr int64_t kRecord = kCodesAt + (kQ8 ? 512 : 256) + (kHigh ? 64 : 0);
};
template <DType T>
struct QintKLayout {
  static constexpr bool kQ6 = T == DType::kQ6_K;
  static constexpr bool kQ2 = T == DType::kQ2_K;
  static constexpr bool kQ3 = T == DType::kQ3_K;
  static constexpr bool kTQ = T == DType::kTQ2_0;
  static constexpr bool k2Bit = kQ2 || kQ3 || kTQ;  // 2-bit code vectors (else 4-bit chunks)
  static constexpr bool kHigh = T == DType::kQ5_K;
  static constexpr int64_t kHeader = (kQ6 || kQ3 || kTQ) ? 64 : 128;
  static constexpr int64_t kCodesAt = kTQ ? 0 : 32;  // in a sub-block record
  static constexpr int64_t kMasksAt = 32 + 128;      // q3_k: the bit-2 masks
  static constexpr int64_t kRecord =
      kTQ ? 128 : kQ2 ? 32 + 128 : kQ3 ? 32 + 128 + 64 : 32 + 256 + (kQ6 ? 128 : (kHigh ? 64 : 0));
  static constexpr int64_t kSuper = kHeader + 8 * kRecord;
};

// The dtype whose packed layout and kernels serve weights of dtype t (t itself, or tq2_0 for tq1_0,
// q8_0 for iq4_nl). pack_weight reads t's blocks and writes this layout.
DType kernel_dtype(DType t);

// Bytes of one (group, block) record of a qint format.
int64_t qint_record_bytes(DType t);
// Bytes of one (group, super-block) of a qint k format (header + 8 records).
int64_t qint_k_superblock_bytes(DType t);
PackKind pack_kind(DType t);  // of t's kernel_dtype
// Packed size of a [n, k] weight; 0 for kNone.
int64_t packed_bytes(DType t, int64_t n, int64_t k);
// w: [n, k] rows in GGUF layout -> dst (packed_bytes(t, n, k) bytes).
void pack_weight(DType t, const void* w, int64_t n, int64_t k, void* dst);

// Activations quantized for the integer kernels, in tiles of `tile` tokens (the kernel table's
// act_tile: the token count of the kernels' register tile) so a kernel's per-token offsets are
// compile-time constants (no per-token address arithmetic in the inner loops): for token m and
// 32-block b, i = act_index(a, m, b) = ((m / tile) * nb + b) * tile + m % tile and
//   q[32 i .. 32 i + 31]   int8 codes (|q| <= 127) of the block
//   d[i]                   scale, s[i] = d * sum of the block's q
//   s16[2 i], s16[2 i + 1] d * sum of the first / second 16 q (the q6_k kernels' per-16 scales)
//   c[i]                   -offset * sum of the block's q, when c is not null: the weight format's
//                          code offset, folded into the integer dot as the accumulator's start
//   c16[2 i], c16[2 i + 1] -32 * sum of the first / second 16 q, when c16 is not null (q6_k)
struct ActQ8 {
  int8_t* q;
  float* d;
  float* s;
  float* s16;
  int32_t* c;
  int32_t* c16;
  int64_t nb;      // blocks per token row (K / 32)
  int64_t tile;    // tokens per tile
  int32_t offset;  // for c
};
inline int64_t act_index(const ActQ8& a, int64_t m, int64_t b) {
  return ((m / a.tile) * a.nb + b) * a.tile + m % a.tile;
}

struct KernelTable {
  IsaLevel isa;
  // x: [m, k] f32 (row stride ldx) -> a, rows [m0, m1). k a multiple of 32.
  void (*quantize_act)(const float* x, int64_t ldx, int64_t m0, int64_t m1, int64_t k, const ActQ8& a);
  // y[m * ldy + n] = sum_k W[n][k] x[m][k] for row groups [g0, g1) (rows >= n_total skipped) and
  // tokens [m0, m1). `packed` is the whole packed weight.
  void (*qgemm)(DType t, const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const ActQ8& a, int64_t m0,
                int64_t m1, float* y, int64_t ldy, int64_t n_total);
  void (*fgemm)(DType t, const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const float* x, int64_t ldx,
                int64_t m0, int64_t m1, float* y, int64_t ldy, int64_t n_total);
  bool qgemm_k;  // qgemm also takes the qint k family
  int64_t act_tile;  // ActQ8::tile the qgemm of this table reads; token splits are multiples of it
  // Integer code offset the qgemm of this table folds into its integer dots for weight dtype t
  // (ActQ8::offset and c; q6_k and q3_k: c16), 0 for none. Null: none for every dtype.
  int32_t (*act_offset)(DType t);
  // Optional GEMM form of fgemm for many tokens (null: fgemm serves every M). pack_x: x rows
  // [m0, m1) of m_total (m0 a multiple of kXTile) -> xp (packed_x_floats(m_total, k) floats, layout
  // below); fgemm_packed: as fgemm with x read from xp (m0 a multiple of kXTile). Same results as
  // fgemm, bit for bit.
  void (*pack_x)(const float* x, int64_t ldx, int64_t m0, int64_t m1, int64_t m_total, int64_t k, float* xp);
  void (*fgemm_packed)(DType t, const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const float* xp,
                       int64_t m_total, int64_t m0, int64_t m1, float* y, int64_t ldy, int64_t n_total);
};

// Packed f32 activations of the float GEMM: K is cut into blocks of kXKBlock elements (the
// kernels' K block), tokens into tiles of kXTile; block j of tile i is kXKBlock x kXTile floats at
// ((j * tiles + i) * kXKBlock) * kXTile, element e of token t at [e][t]. So the 8 broadcasts of one
// k are one 32-byte run and the tiles of one K block are contiguous (what the GEMM streams).
constexpr int64_t kXTile = 8;
constexpr int64_t kXKBlock = 128;
inline int64_t packed_x_floats(int64_t m, int64_t k) {
  return ((m + kXTile - 1) / kXTile) * ((k + kXKBlock - 1) / kXKBlock) * kXKBlock * kXTile;
}

// Per-ISA tables (null pointer members mean "not implemented at this level").
namespace avx2 { const KernelTable* kernel_table(); }
namespace avx512 {
const KernelTable* kernel_table();
// The float family at both AVX-512 levels (linear_float_avx512.cc); KernelTable::fgemm's contract.
void fgemm_512(DType t, const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const float* x, int64_t ldx,
               int64_t m0, int64_t m1, float* y, int64_t ldy, int64_t n_total);
void pack_x_512(const float* x, int64_t ldx, int64_t m0, int64_t m1, int64_t m_total, int64_t k, float* xp);
void fgemm_packed_512(DType t, const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const float* xp,
                      int64_t m_total, int64_t m0, int64_t m1, float* y, int64_t ldy, int64_t n_total);
}  // namespace avx512
namespace vnni { const KernelTable* kernel_table(); }

}  // namespace pagoda::cpu
