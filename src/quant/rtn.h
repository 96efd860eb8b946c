// Round-to-nearest (RTN) weight quantizers: the rules the formats' own reference quantizers use
// when no calibration (GPTQ's Hessian correction, AWQ's activation-aware scales) picks the codes.
// On-line quantization at load (model/online_quantization.h) and `pagoda quantize` use them; the
// results map onto the engine's native rows through quant/grouped_int.h.
//
// Inputs are f32 rows W [n, k] (out, in) as torch lays out a linear weight. Every arithmetic step
// is done in f32 in the order numpy does it in tools/make_quantized_checkpoint.py, so the codes,
// zeros and scales are bit-identical to that tool's (rounding: to nearest, ties to even).
//
//   rtn_gptq        GPTQ's Quantizer (find_params + quantize) per (row, group): xmin = min(w, 0),
//                   xmax = max(w, 0); symmetric: xmax = max(|xmin|, xmax), xmin = -xmax where
//                   xmin < 0; a group of zeros takes xmin = -1, xmax = 1; scale = fp16((xmax - xmin)
//                   / (2^bits - 1)); zero = 2^(bits-1) (symmetric) or round(-xmin / scale);
//                   code = clamp(round(w / scale) + zero, 0, 2^bits - 1).
//                   |w - scale (code - zero)| <= scale / 2 for every w inside the clamped range.
//   rtn_awq         AutoAWQ's pseudo_quantize_tensor (4 bits, zero point): scale = fp16(max(max - min,
//                   1e-5) / 15), zero = clamp(-round(min / scale), 0, 15), code = clamp(round(w /
//                   scale) + zero, 0, 15).
//   rtn_ct          compressed-tensors' (llm-compressor's minmax observer, no calibration): signed codes
//                   q in [-2^(bits-1), 2^(bits-1) - 1]; symmetric scale = max(|min(w,0)|, max(w,0)) /
//                   ((2^bits - 1) / 2), asymmetric scale = (max(w,0) - min(w,0)) / (2^bits - 1) and
//                   zp = clamp(round(-2^(bits-1) - min / scale), ...); the scale rounded to the
//                   checkpoint's scale dtype (`scale_round`: fp16 or bf16); q = clamp(round(w / s) + zp).
//                   Returned in the unsigned domain (codes q + 2^(bits-1), zeros zp + 2^(bits-1)).
//   fp8_e4m3_per_row  scale[r] = max|W[r]| / 448 (f32); code = e4m3(W[r][c] / scale[r]) (round to
//                   nearest even, saturating); a row of zeros has scale 0 and codes 0.
//
// Group `group` columns (k for one group per row); k must be a multiple of it.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "common/half.h"
#include "quant/grouped_int.h"

namespace pagoda::quant {

GroupedIntWeight rtn_gptq(const float* w, int64_t n, int64_t k, int bits, int64_t group, bool symmetric);
GroupedIntWeight rtn_awq(const float* w, int64_t n, int64_t k, int64_t group);

enum class ScaleRounding { kFp16, kBf16 };
// Scales come back as fp16 bits in GroupedIntWeight::scales only for kFp16; `scales_f32` receives
// every scale as the f32 value of its rounding (bf16 values need not be fp16 values).
GroupedIntWeight rtn_ct(const float* w, int64_t n, int64_t k, int bits, int64_t group, bool symmetric,
                        ScaleRounding rounding, std::vector<float>* scales_f32);

struct Fp8Rows {
  std::vector<uint8_t> codes;  // [n * k] E4M3
  std::vector<float> scales;   // [n]
};
Fp8Rows fp8_e4m3_per_row(const float* w, int64_t n, int64_t k);

// The BF16 value the engine runs an FP8 weight element as: bf16(fp8 * scale), for checkpoints
// (loader/packed_int_checkpoint.cc) and on-line quantization alike (decisions.md#d56).
inline uint16_t fp8_e4m3_scaled_to_bf16(uint8_t code, float scale) { return f32_to_bf16(fp8_e4m3_to_f32(code) * scale); }

// fp8_e4m3_scaled_to_bf16 of every element with its row's scale. out: n * k uint16.
void fp8_rows_to_bf16(const Fp8Rows& f, int64_t n, int64_t k, uint16_t* out);

}  // namespace pagoda::quant
