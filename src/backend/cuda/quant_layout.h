// The device layout of a GGUF block-quantized weight row (quant_matmul.cu reads it; the uploader
// writes it). Per format:
//
//   planar (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q6_K): the codes of every block of the row first, then
//   each further field of every block as its own plane, so that a block's codes are one or two
//   aligned 16-byte loads (the file's 18-, 22- or 210-byte blocks are only 2-byte aligned). With
//   units = K / 32 and super-blocks sb = K / 256 a row is:
//     Q4_0  [units x 16 qs][units x 2 d]
//     Q4_1  [units x 16 qs][units x 4 (d, m)]
//     Q5_0  [units x 16 qs][units x 4 qh][units x 2 d]
//     Q5_1  [units x 16 qs][units x 4 qh][units x 4 (d, m)]
//     Q8_0  [units x 32 qs][units x 2 d]
//     Q6_K  [sb x 208 (ql 128, qh 64, scales 16)][sb x 2 d]
//   as in the file (Q4_K, Q5_K): their 144- and 176-byte super-blocks are 16-byte aligned already.
//
// Device rows are row_bytes(format, K) rounded up to 16 bytes (device_row_bytes), so every row
// starts 16-byte aligned; the padding is zero and never read.
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace pagoda::cuda {

bool planar_quant_layout(DType format);

// Bytes of one row of K inputs on the device: row_bytes(format, K) rounded up to a multiple of 16
// for a quantized format, row_bytes(format, K) for the others.
int64_t device_row_bytes(DType format, int64_t K);

// Rows [0, rows) of `in` (the file's blocks, row_bytes(format, K) a row) in the device layout into
// `out` (device_row_bytes(format, K) a row; not overlapping `in`).
void to_device_quant_layout(DType format, const uint8_t* in, uint8_t* out, int64_t rows, int64_t K);

}  // namespace pagoda::cuda
