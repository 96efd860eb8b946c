// Tuning knobs of the compute backends: one struct, part of the engine configuration
// (EngineConfig::tuning), filled from the command line over the environment (common/env_config.h)
// and printed at start-up. Every field's default is the product's path; the others are choices a
// measurement on another machine may want (docs/cuda.md, "Configuration"). Today all knobs are the
// CUDA backend's; the CPU backend ignores them.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace pagoda {

// The most rows a bf16 linear layer can give the CUDA GEMV (backend/cuda/kernels.h, kGemvMaxM).
inline constexpr int kTuningMaxGemvRows = 4;
// The most rows a quantized linear layer can give the CUDA int8 GEMV (kernels.h, kQuantGemvMaxM).
inline constexpr int kTuningMaxQuantGemvRows = 8;
// The most rows a quantized linear layer can give the CUDA tensor-core matmul (kQuantMmaMaxM).
inline constexpr int kTuningMaxQuantMmaRows = 64;
// The largest threshold of rows for the 2:4 sparse GEMM: our 2:4 GEMV takes at most 8 rows
// (backend/cuda/kernels.h, kGemv2of4MaxM).
inline constexpr int kTuningMaxSparseMinRows = 9;

struct TuningConfig {
  // Decode attention kernel of the CUDA backend: "auto" (tensor cores for 16-bit caches, the SIMT
  // kernel for short launches), "simt" (no tensor cores), "mma" (tensor cores for short launches
  // too). Env PAGODA_ROW_ATTENTION, flag --cuda-row-attention.
  std::string row_attention = "auto";
  // Prefill attention kernel of the CUDA backend: "auto" (the wgmma kernel where it applies:
  // compute capability 9.0, head dim 128, a 16-bit cache, query tiles of 128; the mma.sync kernel
  // elsewhere), "mma" (the mma.sync kernel everywhere). Env PAGODA_PREFILL_ATTENTION, flag
  // --cuda-prefill-attention.
  std::string prefill_attention = "auto";
  // Query heads a block of the SIMT decode attention takes: 0 its choice, else 1, 2 or 4. Env
  // PAGODA_SIMT_HEADS, flag --cuda-simt-heads.
  int simt_heads = 0;
  // Rows up to which bf16 linear layers use the GEMV instead of cuBLASLt, 0..kTuningMaxGemvRows
  // (docs/decisions.md#d5: on the H200 the GEMV wins at one row only). Env PAGODA_GEMV_MAX_ROWS,
  // flag --cuda-gemv-max-rows.
  int gemv_max_rows = 1;
  // Per-op GPU time: every step eager with CUDA events between ops, reported by `pagoda bench`.
  // Env PAGODA_CUDA_PROFILE=1, flag --cuda-profile.
  bool cuda_profile = false;
  // GGUF quantized weights on the GPU: "native" (the formats with kernels stay in their blocks:
  // backend/cuda/device_weight.h) or "dequantize" (bf16 at load, 3-4x the memory). Env
  // PAGODA_QUANT_WEIGHTS, flag --cuda-quant-weights.
  std::string quant_weights = "native";
  // Rows up to which native quantized layers use the int8 GEMV instead of dequantizing for
  // cuBLASLt, 0..kTuningMaxQuantGemvRows. Env PAGODA_QUANT_GEMV_MAX_ROWS, flag
  // --cuda-quant-gemv-max-rows.
  int quant_gemv_max_rows = kTuningMaxQuantGemvRows;
  // Rows up to which native quantized layers over bf16 activations use the tensor-core matmul
  // (weights dequantized in registers, no activation quantization), for the rows the int8 GEMV
  // does not take; 0..kTuningMaxQuantMmaRows, 0: off (the default until its GPU tests and
  // benchmark have run: docs/decisions.md D74). Env PAGODA_QUANT_MMA_MAX_ROWS, flag
  // --cuda-quant-mma-max-rows.
  int quant_mma_max_rows = 0;
  // File for the per-warp block trace of the last step (backend/cuda/block_trace.h; only builds
  // configured with -DPAGODA_CUDA_BLOCK_TRACE=ON record it); empty: off. Env PAGODA_BLOCK_TRACE,
  // flag --cuda-block-trace.
  std::string block_trace;
  // When the CUDA decode graphs are captured: "lazy" (each bucket at its first decode step, with
  // its warm-up and cuBLASLt autotuning; start-up and the first token do not wait) or "start"
  // (every bucket during start-up). Env PAGODA_GRAPH_CAPTURE, flag --cuda-graph-capture.
  std::string graph_capture = "lazy";
  // 2:4 structured sparsity on the CUDA backend (backend/cuda/sparse_2of4.h): "off" (dense; the
  // default: on an H100 the 2:4 path decodes a Llama-3-8B shape 1.25x faster at batch 1 but 0.37x
  // at batch 8, 0.43x at 64 and prefills at 0.74x, decisions.md D88), "auto" (the linears of a
  // checkpoint that declares 2:4 sparsity and holds the pattern run on our 2:4 GEMV and
  // cuSPARSELt's sparse tensor cores) or "2:4" (every decoder linear that holds the pattern,
  // declared or not). Env PAGODA_SPARSITY, flag --cuda-sparsity.
  std::string sparsity = "off";
  // Rows from which a 2:4 linear runs cuSPARSELt's sparse GEMM; fewer rows run our 2:4 GEMV,
  // 1..kTuningMaxSparseMinRows. Env PAGODA_SPARSE_MIN_ROWS, flag --cuda-sparse-min-rows.
  int sparse_min_rows = 2;

  // An invalid-argument status naming the first field out of range.
  Status validate() const;
  // One line: "row attention auto | prefill attention auto | simt heads 0 | gemv rows 1 | quant weights native (gemv rows 8, mma rows 0) |
  // sparsity off (from 2 rows) | profile off | block trace off | graph capture lazy".
  std::string to_string() const;
};

}  // namespace pagoda
