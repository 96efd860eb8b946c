// Integer views of the low-bit weight formats, shared by the scalar references (quant/) and the
// CPU repacker (backend/cpu/pack.cc): one decoder per format, so the oracle and the packed kernels
// read the same codes.
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace pagoda::quant {

// One 256-element super-block as integers: x[e] = (d * sc[e / 16]) * q[e] - dmin * m[e / 16]
// (float arithmetic in that order: the dequantizers produce exactly these values).
//   q2_k:   q in [0, 3],   sc, m in [0, 15]
//   q3_k:   q in [-4, 3],  sc in [-32, 31], m = 0, dmin = 0
//   iq4_xs: q in the IQ4_NL levels [-127, 113], sc in [-32, 31] (equal for the two halves of a
//           32-element sub-block), m = 0, dmin = 0
//   tq1_0, tq2_0: q in [-1, 1], sc = 1, m = 0, dmin = 0
struct SuperBlockCodes {
  float d = 0, dmin = 0;
  int8_t q[256];
  int8_t sc[16];
  int8_t m[16];
};

// Whether decode_superblock takes t.
bool has_superblock_codes(DType t);
// block: one GGUF block of t (has_superblock_codes(t)).
void decode_superblock(DType t, const void* block, SuperBlockCodes* out);

// One IQ4_NL block: q[32] levels (kIq4nlValues), *d_bits the fp16 scale bits.
void decode_iq4_nl(const void* block, int8_t* q, uint16_t* d_bits);

}  // namespace pagoda::quant
