// libFuzzer target: a Hugging Face config.json -> ModelConfig (model/model_config.h).
// Any bytes: either a clear error or a config that passes validate() and whose derived sizes
// (q/kv sizes, KV bytes per token, RoPE table of the context) are positive and do not overflow.
// Findings are crashes (e.g. SIGFPE on a zero divisor), sanitizer reports and failed checks.
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/model_config.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto config = pagoda::model_config_from_hf_json(j);
  if (!config.ok()) {
    check(!config.status().message().empty());
    return 0;
  }
  const pagoda::ModelConfig& c = *config;
  check(c.validate().ok());
  check(c.num_heads % c.num_kv_heads == 0);
  check(c.q_size() > 0 && c.kv_size() > 0 && c.rope_dim > 0 && c.rope_dim <= c.head_dim);
  check(c.kv_bytes_per_token(pagoda::DType::kF32) > 0);
  // A RoPE table for the whole context fits in int64 bytes.
  check(c.max_position_embeddings <= std::numeric_limits<int64_t>::max() / (c.rope_dim * 8));
  (void)c.summary();
  (void)c.to_json().dump();
  return 0;
}
