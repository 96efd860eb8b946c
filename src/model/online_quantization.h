// On-line quantization of a 16-bit (or f32) checkpoint at load: `--quantization int4|int8|fp8`.
// The decoder's linear weights are quantized by round to nearest (quant/rtn.h) into the same native
// rows the quantized-checkpoint loaders produce (loader/packed_int_checkpoint.h), so the CPU
// repacking, the CUDA upload and kernels, and the memory planner see an ordinary Q4_0 / Q8_0 / BF16
// weight:
//
//   int4  ggml's Q4_0 rule (llama.cpp's quantize_row_q4_0_ref; quant::quantize_row), groups of 32:
//         d = the block's signed extreme / -8, code = min(15, trunc(w / d + 8.5))  ->  Q4_0, the
//         bytes llama-quantize writes for that tensor. Not GPTQ's g128 rule (scale 2 max|w| / 15,
//         zero 8): a Q4_0 row stores one fp16 scale per 32 weights whatever the group, so group 32
//         costs no byte, and the ggml rule keeps each block's largest weight exact where GPTQ's
//         clips a positive extreme to 7 / 7.5 of it. SmolLM2-135M over the Vim manual, KL against
//         f16: 0.41 (GPTQ g128/64), 0.33 (GPTQ g32), 0.23 (this rule) (docs/quantization.md;
//         decisions.md#d70).
//   int8  GPTQ's symmetric RTN, one group per output channel (W8A16's per-channel scales), scale =
//         fp16(2 max|row| / 255), codes + 128 in [0, 255]  ->  Q8_0 (d = scale, q = code - 128), exact.
//   fp8   E4M3 weights with one f32 scale per output channel (max|row| / 448), as an FP8 W8A8
//         checkpoint's weights  ->  F8E4M3Rows, the FP8 loader's format (the CUDA backend's FP8
//         matmuls; the CPU backend's bf16(fp8 x scale) rows through fp8_rows_as_bf16).
//
// What is quantized: every declared tensor with `linear` set in a decoder layer (attention q/k/v/o,
// the MLP, MoE experts and shared experts), except the MoE routers (ffn_gate_inp, small and
// precision-critical); a linear whose input size is not a multiple of 32 stays as it is. The
// embedding, the output projection (lm_head), norms and biases stay as they are.
//
// Refused: a checkpoint that is already quantized (a quantization_config, or a quantized GGUF
// linear) and linears stored in another dtype than f32 / f16 / bf16, with an error naming the
// tensor; an unknown mode name.
//
// Thread-safety: pure functions; quantize_weight_source uses `threads` threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/dtype.h"
#include "common/status.h"
#include "loader/weight_source.h"
#include "model/model_config.h"
#include "model/tensor_table.h"

namespace pagoda {

enum class WeightQuantization { kNone, kInt4, kInt8, kFp8 };

// "none" | "int4" | "int8" | "fp8" (case-sensitive); an invalid-argument error lists them.
Result<WeightQuantization> parse_weight_quantization(std::string_view name);
std::string_view weight_quantization_name(WeightQuantization q);
// "int4, int8, fp8" (the modes other than none), for help texts.
inline constexpr std::string_view kWeightQuantizationModes = "int4, int8, fp8";

// A decoder linear that quantization applies to (on-line and `pagoda quantize`): `linear` set, in a
// layer, not a MoE router.
bool quantizable_linear(const TensorDecl& d);

// The native format a declared tensor becomes under `q` (Q4_0, Q8_0, F8E4M3Rows), or nullopt when it
// stays as it is (not a decoder linear, a router, an input size not a multiple of 32, kNone).
std::optional<DType> online_quantized_format(const TensorDecl& d, WeightQuantization q);
// The group size (columns per scale) an input size of `k` gets under `q` (0: not quantized).
int64_t online_quantization_group(int64_t k, WeightQuantization q);

// The weight bytes `source` has once quantized (its tensors' bytes, each quantized linear counted
// in its native format), without quantizing: for the memory check before the load. F8E4M3Rows
// tensors (the source's or the quantized ones) count as bf16 unless `fp8_rows` (the load keeps
// them: ModelLoadOptions). Errors as quantize_weight_source's for an already-quantized checkpoint.
Result<int64_t> online_quantized_bytes(const ModelConfig& config, const WeightSource& source, WeightQuantization q,
                                       bool fp8_rows = true);

// A source whose F8E4M3Rows tensors (FP8 checkpoints, --quantization fp8) are bf16(scale x e4m3)
// rows (owned host memory), for the CPU kernels; `source` itself when it has none.
Result<std::unique_ptr<WeightSource>> fp8_rows_as_bf16(std::unique_ptr<WeightSource> source, int threads);

// A source whose decoder linears are the quantized native rows (owned host memory; the others are
// `source`'s tensors, which it keeps alive). kNone returns `source` itself. threads <= 0: one per core.
Result<std::unique_ptr<WeightSource>> quantize_weight_source(std::unique_ptr<WeightSource> source,
                                                             const ModelConfig& config, WeightQuantization q,
                                                             int threads);

}  // namespace pagoda
