// The one place the process environment is read (tests and fuzzers keep their own test paths).
// The PAGODA_* tuning variables are read once, on the first call, and parsed into a
// TuningConfig; flags are applied over them afterwards, so a flag wins over the environment.
//
//   PAGODA_ROW_ATTENTION=auto|simt|mma  -> TuningConfig::row_attention
//   PAGODA_PREFILL_ATTENTION=auto|mma   -> prefill_attention
//   PAGODA_SIMT_HEADS=0|1|2|4           -> simt_heads
//   PAGODA_GEMV_MAX_ROWS=0..4           -> gemv_max_rows
//   PAGODA_QUANT_WEIGHTS=native|dequantize -> quant_weights
//   PAGODA_QUANT_GEMV_MAX_ROWS=0..8     -> quant_gemv_max_rows
//   PAGODA_QUANT_MMA_MAX_ROWS=0..64     -> quant_mma_max_rows
//   PAGODA_CUDA_PROFILE=0|1             -> cuda_profile (any value but "0" turns it on)
//   PAGODA_BLOCK_TRACE=FILE             -> block_trace
//   PAGODA_GRAPH_CAPTURE=lazy|start     -> graph_capture
//   PAGODA_SPARSITY=auto|2:4|off        -> sparsity
//   PAGODA_SPARSE_MIN_ROWS=1..9         -> sparse_min_rows
//
// Variables that earlier builds read (comparison variants and knock-outs, docs/decisions.md) are
// reported on stderr once as no longer read. Thread-safe.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "common/status.h"
#include "common/tuning_config.h"

namespace pagoda {

// A variable's value; nullopt when it is unset or empty.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

// Sets the fields of `t` whose variable `lookup` gives; an invalid-argument status names a
// variable that does not parse or is out of range (`t` is then unchanged).
Status apply_tuning_vars(TuningConfig& t, const EnvLookup& lookup);
// apply_tuning_vars over the process environment as it was at the first call.
Status apply_tuning_env(TuningConfig& t);

// The engine plan cache directory (common/plan_file.h) when no flag names one: PAGODA_PLAN_CACHE,
// else "off" (the cache is opt-in: docs/startup.md).
std::string default_plan_cache_dir();

// Tensor parallelism (engine/tensor_parallel_group.h): PAGODA_BINARY, the pagoda binary whose
// `tp-worker` subcommand runs the other ranks when this process is not it (the Python package);
// PAGODA_TP_COMM=staged, CUDA ranks through host memory on one GPU (tests). nullopt: unset.
std::optional<std::string> tensor_parallel_binary_env();
bool tensor_parallel_staged_env();

}  // namespace pagoda
