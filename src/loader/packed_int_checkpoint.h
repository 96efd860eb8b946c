// The quantized linear weights of packed-integer (and FP8) Hugging Face checkpoints, decoded at load
// into the engine's native rows (Q4_0 / Q4_1 / Q8_0, exactly or to the fp16 rounding that
// quant/grouped_int.h states; FP8: BF16) under the weight's own name "<module>.weight", so that every
// consumer (the tensor tables, the CPU repacking, the CUDA upload, the memory planner's byte
// count) sees an ordinary quantized weight.
//
// Which checkpoints (config.json's quantization_config, or AutoGPTQ's quantize_config.json):
//   quant_method "gptq"   <m>.qweight I32 [K * bits / 32, N] (codes packed along K, the lowest bits
//                         first), <m>.qzeros I32 [G, N * bits / 32] (packed along N), <m>.scales
//                         F16 [G, N], <m>.g_idx I32 [K] (optional). bits 4 or 8; group_size
//                         32, 64, 128, ... or -1 (one group: per-channel). checkpoint_format
//                         "gptq" (v1: the stored zero is zero - 1) or "gptq_v2" (the zero itself).
//                         A g_idx that is not k / group_size (act-order, desc_act=True) is taken
//                         as GPTQ writes it (rank / group_size): the weight's columns are reordered
//                         so that each group is a run, and "<m>.input_order" I32 [K] says which
//                         input each column reads (y = W' x[order]); the executors gather the
//                         activations before the matmul. Other g_idx are refused.
//   quant_method "awq"    version "gemm": <m>.qweight I32 [K, N / 8] (codes packed along N in the
//                         nibble order 0 2 4 6 1 3 5 7), <m>.qzeros I32 [G, N / 8] (same order),
//                         <m>.scales F16 [G, N]. 4 bits, zero_point true.
//   quant_method          format "pack-quantized": <m>.weight_packed I32 [N, K * bits / 32]
//     "compressed-tensors" (codes + 2^(bits-1) packed along K), <m>.weight_scale [N, G] (F16, BF16
//                         or F32), <m>.weight_zero_point (asymmetric only; int8 codes packed along N
//                         as the weights are: I32 [ceil(N * bits / 32), G]), <m>.weight_shape I64
//                         [2] = [N, K]. num_bits 4 or 8, type int, strategy group or channel.
//                         actorder "group": <m>.weight_g_idx as GPTQ's g_idx.
//   FP8 E4M3              compressed-tensors format "float-quantized" (weights type float, 8 bits,
//                         strategy tensor / channel / block: <m>.weight F8_E4M3 [N, K] and
//                         <m>.weight_scale [], [1], [N, 1] or a block grid; <m>.input_scale is
//                         dropped: the CUDA backend quantizes activations per token at run time),
//                         or quant_method "fp8" (<m>.weight_scale_inv per weight_block_size block).
//                         One scale or one per row: F8E4M3Rows (the codes as they are, each row's
//                         scale as f32; the CUDA backend's FP8 W8A8 matmuls, the CPU's bf16 rows:
//                         model/model_loader.h). Block scales: BF16 = bf16(fp8 * scale), the product
//                         exact in f32, so |error| <= 2^-9 relative (a log line says so).
// Scales in BF16 or F32 are rounded to fp16 (exact for BF16 values in fp16's normal range).
// Anything else (another quant_method, bits, format or layout, a missing or misshapen tensor)
// is a load error naming the tensor and the file, never a silently different weight.
//
// Thread-safety: decode_packed_int_checkpoint is a pure function of the directory; it decodes the
// weights on several threads.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/dtype.h"
#include "common/status.h"
#include "common/tensor.h"

namespace pagoda {

class HfModelDir;

struct PackedIntCheckpoint {
  std::string method;                   // "gptq", "awq", "compressed-tensors", "fp8", ...
  // "<m>.weight" -> [N, K] native rows (owned host memory); "<m>.input_order" -> [K] I32 for an
  // act-order weight (column j reads input order[j]).
  std::map<std::string, Tensor> weights;
  std::set<std::string> consumed;       // the checkpoint's tensors they replace (qweight, scales, ...)
};

// nullopt when the directory has no quantization_config (and no quantize_config.json) and no
// packed tensors; an error for an unsupported or malformed quantized checkpoint.
Result<std::optional<PackedIntCheckpoint>> decode_packed_int_checkpoint(const HfModelDir& dir, int threads = 0);

// The native format the packed linears of a checkpoint with this config.json decode to (Q4_0:
// symmetric 4-bit, Q4_1: asymmetric 4-bit, AWQ; Q8_0: symmetric 8-bit; F8E4M3Rows: FP8 per tensor / channel; BF16: FP8 per block), for memory plans made from
// config.json alone; nullopt without quantization_config; an error for a config that would not load.
Result<std::optional<DType>> packed_int_linear_format(const nlohmann::json& config);

}  // namespace pagoda
