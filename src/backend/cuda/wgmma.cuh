// Hopper warpgroup MMA (wgmma, sm_90a only) primitives used by the prefill attention kernel:
// shared-memory matrix descriptors for the 128-byte swizzled layout, the m64n128k16 MMA with f32
// accumulators (A from shared memory or from registers, B from shared memory), and the fences
// and waits around it.
//
// 128-byte swizzle (the layout every descriptor here describes): a tile of R rows x 64 16-bit
// elements is R rows of 128 bytes, row r at r * 128, its 16-byte chunk c stored at chunk
// c ^ (r & 7); wider rows are several such column blocks one after another. The tile's base is
// 1024-byte aligned. swizzled_offset() gives the byte offset of (row, chunk) in such a tile.
//
// Accumulators (m64nN, f32): warp w of the warpgroup owns rows 16w .. 16w + 15 and holds them
// exactly as mma.sync m16n8k16 holds its C fragment, N / 8 of them: d[j][0..1] row g, columns
// 8j + 2t, +1; d[j][2..3] row g + 8 (g = lane / 4, t = lane % 4). An A fragment in registers is
// mma.sync's A fragment of the warp's 16 rows.
#pragma once

#include <cstdint>

#include "backend/cuda/mma_utils.cuh"

namespace pagoda::cuda {

// Byte offset of 16-byte chunk `chunk` (of a row of 8 * col_blocks chunks) of `row` in a
// 128-byte-swizzled tile of `rows` rows.
__device__ __forceinline__ uint32_t swizzled_offset(int row, int chunk, int rows) {
  return static_cast<uint32_t>((chunk >> 3) * rows * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

// Descriptor of a 128-byte-swizzled operand at shared address `addr` (inside a 1024-aligned
// tile): lbo / sbo in bytes (K-major: sbo = 1024, the next 8 rows; lbo unused. MN-major: lbo =
// the next 64 elements of M / N, sbo = 1024, the next 8 rows of K).
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>((lbo & 0x3FFFFu) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFFu) >> 4) << 32) | (1ull << 62);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PAGODA_HAVE_WGMMA 1

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Generic-proxy writes to shared memory (stores, cp.async) made visible to wgmma's reads; each
// writing thread runs it before the barrier that publishes the tile.
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Pins accumulator registers at this point of the program (no read or write of them moves across
// it), as the wgmma in flight owns them until wgmma_wait.
template <int NT>
__device__ __forceinline__ void wgmma_fence_operand(float (&d)[NT][4]) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

#define PAGODA_WGMMA_D4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define PAGODA_WGMMA_D64                                                                                           \
  PAGODA_WGMMA_D4(0), PAGODA_WGMMA_D4(1), PAGODA_WGMMA_D4(2), PAGODA_WGMMA_D4(3), PAGODA_WGMMA_D4(4),              \
      PAGODA_WGMMA_D4(5), PAGODA_WGMMA_D4(6), PAGODA_WGMMA_D4(7), PAGODA_WGMMA_D4(8), PAGODA_WGMMA_D4(9),          \
      PAGODA_WGMMA_D4(10), PAGODA_WGMMA_D4(11), PAGODA_WGMMA_D4(12), PAGODA_WGMMA_D4(13), PAGODA_WGMMA_D4(14),     \
      PAGODA_WGMMA_D4(15)
#define PAGODA_WGMMA_ACC                                                                                    \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27," \
  "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,"    \
  "%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"

// d (64 x 128, f32) = A (64 x 16, K-major in shared memory) * B (16 x 128, K-major in shared
// memory) + (accumulate ? d : 0).
#define PAGODA_WGMMA_SS(TY)                                                                                    \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                    \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " PAGODA_WGMMA_ACC                   \
               ", %64, %65, p, 1, 1, 0, 0;\n}\n"                                                               \
               : PAGODA_WGMMA_D64                                                                              \
               : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)))
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[16][4], uint64_t desc_a, uint64_t desc_b, bool accumulate,
                                                    bf16) {
  PAGODA_WGMMA_SS("bf16");
}
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[16][4], uint64_t desc_a, uint64_t desc_b, bool accumulate,
                                                    f16) {
  PAGODA_WGMMA_SS("f16");
}

// d (64 x 128, f32) += A (64 x 16, registers) * B (16 x 128, N-major in shared memory: rows of
// K are the 128-byte rows, so B is read transposed).
#define PAGODA_WGMMA_RS_TRANS_B(TY)                                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                  \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " PAGODA_WGMMA_ACC                 \
               ", {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"                                                  \
               : PAGODA_WGMMA_D64                                                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
__device__ __forceinline__ void wgmma_m64n128k16_rs_tb(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc_b, bf16) {
  PAGODA_WGMMA_RS_TRANS_B("bf16");
}
__device__ __forceinline__ void wgmma_m64n128k16_rs_tb(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc_b, f16) {
  PAGODA_WGMMA_RS_TRANS_B("f16");
}
#undef PAGODA_WGMMA_SS
#undef PAGODA_WGMMA_RS_TRANS_B
#undef PAGODA_WGMMA_ACC
#undef PAGODA_WGMMA_D64
#undef PAGODA_WGMMA_D4

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace pagoda::cuda
