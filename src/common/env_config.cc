#include "common/env_config.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace pagoda {
namespace {

// Switches of the CUDA backend that were removed, and where docs/decisions.md says why.
constexpr const char* kRetired[][2] = {
    {"PAGODA_UNFUSED_ROPE", "#d3"},  {"PAGODA_ATTN_EARLY", "#d4"},   {"PAGODA_GEMV_PAIR", "#d6"},
    {"PAGODA_GREEDY_SPLIT", "#d11"}, {"PAGODA_LAYER_KERNEL", "#d8"}, {"PAGODA_LAYER_DEPTH", "#d8"},
    {"PAGODA_LAYER_COPY", "#d8"},    {"PAGODA_CUDA_KNOCKOUT", "#d12"},
};

std::optional<std::string> getenv_value(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// The tuning variables as the process had them at the first call: those apply_tuning_vars asks
// for (every one, as nothing is set in the lookup it gets here), so the two cannot disagree.
const std::map<std::string, std::string>& snapshot() {
  static const std::map<std::string, std::string> s = [] {
    std::map<std::string, std::string> m;
    TuningConfig unused;
    const Status asked = apply_tuning_vars(unused, [&m](const char* name) -> std::optional<std::string> {
      if (auto v = getenv_value(name)) m[name] = *v;
      return std::nullopt;
    });
    (void)asked;  // nothing set: nothing to reject
    for (const auto& [name, anchor] : kRetired)
      if (getenv_value(name))
        std::fprintf(stderr, "pagoda: %s is no longer read (removed; docs/decisions.md%s)\n", name, anchor);
    return m;
  }();
  return s;
}

Status parse_int(const char* name, const std::string& v, int& out) {
  int x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size()) return invalid_argument("{}='{}': not an integer", name, v);
  out = x;
  return {};
}

}  // namespace

Status apply_tuning_vars(TuningConfig& t, const EnvLookup& lookup) {
  TuningConfig n = t;
  // Each variable is checked as it is applied, so an error names it.
  auto checked = [&n](const char* name, const std::string& v) -> Status {
    if (Status s = n.validate(); !s.ok()) return invalid_argument("{}='{}': {}", name, v, s.message());
    return {};
  };
  if (auto v = lookup("PAGODA_ROW_ATTENTION")) {
    n.row_attention = *v;
    PAGODA_RETURN_IF_ERROR(checked("PAGODA_ROW_ATTENTION", *v));
  }
  if (auto v = lookup("PAGODA_PREFILL_ATTENTION")) {
    n.prefill_attention = *v;
    PAGODA_RETURN_IF_ERROR(checked("PAGODA_PREFILL_ATTENTION", *v));
  }
  if (auto v = lookup("PAGODA_SIMT_HEADS")) {
    PAGODA_RETURN_IF_ERROR(parse_int("PAGODA_SIMT_HEADS", *v, n.simt_heads));
    PAGODA_RETURN_IF_ERROR(checked("PAGODA_SIMT_HEADS", *v));
  }
  if (auto v = lookup("PAGODA_GEMV_MAX_ROWS")) {
    PAGODA_RETURN_IF_ERROR(parse_int("PAGODA_GEMV_MAX_ROWS", *v, n.gemv_max_rows));
    PAGODA_RETURN_IF_ERROR(checked("PAGODA_GEMV_MAX_ROWS", *v));
  }
  if (auto v = lookup("PAGODA_QUANT_WEIGHTS")) {
    n.quant_weights = *v;
    PAGODA_RETURN_IF_ERROR(checked("PAGODA_QUANT_WEIGHTS", *v));
  }
  if (auto v = lookup("PAGODA_QUANT_GEMV_MAX_ROWS")) {
    PAGODA_RETURN_IF_ERROR(parse_int("PAGODA_QUANT_GEMV_MAX_ROWS", *v, n.quant_gemv_max_rows));
    PAGODA_RETURN_IF_ERROR(checked("PAGODA_QUANT_GEMV_MAX_ROWS", *v));
  }
  if (auto v = lookup("PAGODA_QUANT_MMA_MAX_ROWS")) {
    PAGODA_RETURN_IF_ERROR(parse_int("PAGODA_QUANT_MMA_MAX_ROWS", *v, n.quant_mma_max_rows));
    PAGODA_RETURN_IF_ERROR(checked("PAGODA_QUANT_MMA_MAX_ROWS", *v));
  }
  if (auto v = lookup("PAGODA_SPARSITY")) {
    n.sparsity = *v;
    PAGODA_RETURN_IF_ERROR(checked("PAGODA_SPARSITY", *v));
  }
  if (auto v = lookup("PAGODA_SPARSE_MIN_ROWS")) {
    PAGODA_RETURN_IF_ERROR(parse_int("PAGODA_SPARSE_MIN_ROWS", *v, n.sparse_min_rows));
    PAGODA_RETURN_IF_ERROR(checked("PAGODA_SPARSE_MIN_ROWS", *v));
  }
  if (auto v = lookup("PAGODA_CUDA_PROFILE")) n.cuda_profile = *v != "0";
  if (auto v = lookup("PAGODA_BLOCK_TRACE")) n.block_trace = *v;
  if (auto v = lookup("PAGODA_GRAPH_CAPTURE")) {
    n.graph_capture = *v;
    PAGODA_RETURN_IF_ERROR(checked("PAGODA_GRAPH_CAPTURE", *v));
  }
  PAGODA_RETURN_IF_ERROR(n.validate());
  t = n;
  return {};
}

std::string default_plan_cache_dir() {
  if (auto v = getenv_value("PAGODA_PLAN_CACHE")) return *v;
  return "off";
}

std::optional<std::string> tensor_parallel_binary_env() { return getenv_value("PAGODA_BINARY"); }
bool tensor_parallel_staged_env() { return getenv_value("PAGODA_TP_COMM") == std::optional<std::string>("staged"); }

Status apply_tuning_env(TuningConfig& t) {
  const auto& env = snapshot();
  return apply_tuning_vars(t, [&env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

}  // namespace pagoda
