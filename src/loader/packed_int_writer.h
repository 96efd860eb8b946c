// The writing side of loader/packed_int_checkpoint.h: one linear weight W [N, K] (f32 values)
// quantized by round to nearest (quant/rtn.h) and laid out as a quantized Hugging Face checkpoint
// stores it, byte for byte as tools/make_quantized_checkpoint.py writes it (which
// tools/cross_check_quantized_packers.py checks against GPTQModel, AutoAWQ and compressed-tensors):
//
//   kGptq   <m>.qweight I32 [K * b / 32, N] (codes packed along K, lowest bits first), <m>.qzeros I32
//           [G, ceil(N * b / 32)] (zeros packed along N; "gptq" (v1): each word minus 0x11111111 /
//           0x01010101, one 32-bit subtraction as GPTQModel's v2-to-v1 conversion; "gptq_v2": the
//           zeros), <m>.scales F16 [G, N], <m>.g_idx I32 [K] = k / group. bits 4 or 8, group
//           dividing K or -1 (per channel), sym or asym.
//   kAwq    <m>.qweight I32 [K, N / 8] (column 8c + [0 2 4 6 1 3 5 7][i] in nibble i of word c),
//           <m>.qzeros I32 [G, N / 8] (the same order), <m>.scales F16 [G, N]. 4 bits, zero point.
//   kCompressedTensors  pack-quantized: <m>.weight_packed I32 [N, K * b / 32] (q + 2^(b-1) packed
//           along K), <m>.weight_scale [N, G] (BF16 or F16), <m>.weight_zero_point I32
//           [ceil(N * b / 32), G] (asym: zp + 2^(b-1) packed along N), <m>.weight_shape I64 [2].
//   kFp8    compressed-tensors float-quantized, strategy channel: <m>.weight F8_E4M3 [N, K],
//           <m>.weight_scale F32 [N, 1]; activations dynamic per token (FP8_DYNAMIC: no
//           input_scale, nothing to calibrate).
//
// quantization_config() is the config.json entry the loaders (ours, transformers, vLLM) read.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "quant/rtn.h"

namespace pagoda {

struct PackedIntSpec {
  enum class Format { kGptq, kAwq, kCompressedTensors, kFp8 };
  Format format = Format::kGptq;
  int bits = 4;
  int64_t group = 128;   // -1: one group per output channel
  bool symmetric = true;
  bool gptq_v2 = false;  // kGptq: checkpoint_format "gptq_v2" (else "gptq", v1)
  quant::ScaleRounding ct_scale = quant::ScaleRounding::kBf16;  // kCompressedTensors: weight_scale dtype

  // An invalid-argument error for a combination the format does not have (AWQ other than 4-bit
  // asymmetric, bits other than 4 / 8, a group that is neither -1 nor a positive multiple of 32).
  Status validate() const;
  // "gptq w4 g128 sym (v1)", "compressed-tensors w8a16 channel sym bf16 scales", ...
  std::string to_string() const;
};

struct PackedTensor {
  std::string suffix;          // "qweight", "weight_scale", ...
  std::string dtype_name;      // safetensors dtype: "I32", "F16", "BF16", "F32", "I64", "F8_E4M3"
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // little-endian, row-major
};

// The tensors of one packed module from W [n, k] (row-major f32). An error when the group does
// not divide k (or, AWQ and GPTQ's qzeros aside, the packing needs a multiple: k * bits % 32).
Result<std::vector<PackedTensor>> pack_linear(const PackedIntSpec& spec, const float* w, int64_t n, int64_t k);

// The sizes pack_linear will produce for an [n, k] weight (same order and shapes, bytes empty).
Result<std::vector<PackedTensor>> packed_layout(const PackedIntSpec& spec, int64_t n, int64_t k);

// config.json's "quantization_config" for the format ("ignore": lm_head, as llm-compressor).
nlohmann::json quantization_config(const PackedIntSpec& spec);

}  // namespace pagoda
