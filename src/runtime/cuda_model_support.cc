// Which models the CUDA executor runs, decided from the configuration alone (the CLI's
// `--device auto` asks before loading; make_cuda_executor refuses the rest at load).
#include "model/family.h"
#include "runtime/cuda_executor.h"

namespace pagoda {

Status cuda_supports_model(const ModelConfig& c) {
  // backend/cuda/cuda_step_ops.cc implements the Llama, Phi-3 (the Llama layer ops over fused
  // checkpoint tensors, partial rotary and LongRoPE in the RoPE table) and Gemma families' layer ops
  // (Gemma 2's score soft-capping in the attention kernels); the Gemma post-norms take their input
  // in the qkv buffer (q + 2 kv columns).
  const std::string_view family = family_of(c).name;
  if (family != "llama" && family != "phi3" && family != "gemma")
    return unimplemented("the CUDA backend does not run the {} family ({}) yet; use the CPU (--device cpu)", family,
                         c.arch_name);
  if (family == "gemma" && c.q_size() + 2 * c.kv_size() < c.hidden_size)
    return unimplemented("the CUDA Gemma path needs q + 2 kv ({}) >= hidden ({}); use the CPU (--device cpu)",
                         c.q_size() + 2 * c.kv_size(), c.hidden_size);
  return {};
}

}  // namespace pagoda
