#include "backend/cuda/executor_switches.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/kernels.h"

namespace pagoda::cuda {

ExecutorSwitches ExecutorSwitches::from_env() {
  ExecutorSwitches s;
  if (const char* e = std::getenv("PAGODA_ROW_ATTENTION")) {
    s.simt_row_attention = std::string(e) == "simt";
    s.mma_short_rows = std::string(e) == "mma";
  }
  if (const char* e = std::getenv("PAGODA_SIMT_HEADS"); e && *e) s.simt_heads = std::atoi(e);
  if (const char* e = std::getenv("PAGODA_UNFUSED_ROPE"); e && *e && std::string(e) != "0") {
    s.unfused_rope = true;
    s.warm_keys = std::string(e) != "2";
  }
  if (const char* e = std::getenv("PAGODA_LAYER_KERNEL"); e && *e) s.layer_kernel = std::string(e) == "1";
  if (const char* e = std::getenv("PAGODA_LAYER_DEPTH"); e && *e) s.layer_depth = std::atoi(e);
  if (const char* e = std::getenv("PAGODA_LAYER_COPY"); e && *e) s.layer_cp_async = std::string(e) == "cp";
  if (const char* e = std::getenv("PAGODA_GREEDY_SPLIT"); e && *e) s.greedy_split = std::string(e) != "0";
  if (const char* e = std::getenv("PAGODA_GEMV_PAIR"); e && *e) s.gemv_pairs = std::string(e) != "0";
  if (const char* e = std::getenv("PAGODA_ATTN_EARLY"); e && *e) s.attn_early_reads = std::string(e) != "0";
  if (const char* e = std::getenv("PAGODA_GEMV_MAX_ROWS"); e && *e)
    s.gemv_max_rows = std::clamp<int64_t>(std::atoll(e), 0, kGemvMaxM);
  if (const char* e = std::getenv("PAGODA_CUDA_KNOCKOUT"); e && *e) {
    s.knockout = std::string(",") + e + ",";
    std::fprintf(stderr, "pagoda: PAGODA_CUDA_KNOCKOUT=%s: these ops are skipped, outputs are wrong (timing only)\n", e);
  }
  return s;
}

}  // namespace pagoda::cuda
