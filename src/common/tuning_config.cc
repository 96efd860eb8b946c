#include "common/tuning_config.h"

namespace pagoda {

Status TuningConfig::validate() const {
  if (row_attention != "auto" && row_attention != "simt" && row_attention != "mma")
    return invalid_argument("row attention must be auto, simt or mma, got '{}'", row_attention);
  if (prefill_attention != "auto" && prefill_attention != "mma")
    return invalid_argument("prefill attention must be auto or mma, got '{}'", prefill_attention);
  if (simt_heads != 0 && simt_heads != 1 && simt_heads != 2 && simt_heads != 4)
    return invalid_argument("SIMT attention heads a block must be 0 (auto), 1, 2 or 4, got {}", simt_heads);
  if (gemv_max_rows < 0 || gemv_max_rows > kTuningMaxGemvRows)
    return invalid_argument("GEMV rows must be in [0, {}], got {}", kTuningMaxGemvRows, gemv_max_rows);
  if (quant_weights != "native" && quant_weights != "dequantize")
    return invalid_argument("quantized weights must be native or dequantize, got '{}'", quant_weights);
  if (quant_gemv_max_rows < 0 || quant_gemv_max_rows > kTuningMaxQuantGemvRows)
    return invalid_argument("quantized GEMV rows must be in [0, {}], got {}", kTuningMaxQuantGemvRows, quant_gemv_max_rows);
  if (quant_mma_max_rows < 0 || quant_mma_max_rows > kTuningMaxQuantMmaRows)
    return invalid_argument("quantized tensor-core matmul rows must be in [0, {}], got {}", kTuningMaxQuantMmaRows,
                            quant_mma_max_rows);
  if (sparsity != "auto" && sparsity != "2:4" && sparsity != "off")
    return invalid_argument("sparsity must be auto, 2:4 or off, got '{}'", sparsity);
  if (sparse_min_rows < 1 || sparse_min_rows > kTuningMaxSparseMinRows)
    return invalid_argument("sparse GEMM rows must be in [1, {}], got {}", kTuningMaxSparseMinRows, sparse_min_rows);
  if (graph_capture != "lazy" && graph_capture != "start")
    return invalid_argument("graph capture must be lazy or start, got '{}'", graph_capture);
  return {};
}

std::string TuningConfig::to_string() const {
  return fmt::format("row attention {} | prefill attention {} | simt heads {} | gemv rows {} | quant weights {} (gemv rows {}, mma rows {}) | sparsity {} "
                     "(from {} rows) | profile {} | block trace {} | graph capture {}",
                     row_attention, prefill_attention, simt_heads == 0 ? std::string("auto") : std::to_string(simt_heads), gemv_max_rows,
                     quant_weights, quant_gemv_max_rows, quant_mma_max_rows, sparsity, sparse_min_rows, cuda_profile ? "on" : "off", block_trace.empty() ? std::string("off") : block_trace, graph_capture);
}

}  // namespace pagoda
