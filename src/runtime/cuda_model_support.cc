// Which models the CUDA executor runs, decided from the configuration alone (the CLI's
// `--device auto` asks before loading; make_cuda_executor refuses the rest at load).
#include "model/family.h"
#include "runtime/cuda_executor.h"

namespace pagoda {

Status cuda_supports_model(const ModelConfig& c) {
  // backend/cuda/cuda_step_ops.cc implements the Llama and Gemma families' layer ops; its
  // attention kernels have no score soft-capping (Gemma 2), and the Gemma post-norms take their
  // input in the qkv buffer (q + 2 kv columns).
  const std::string_view family = family_of(c).name;
  if (family != "llama" && family != "gemma")
    return unimplemented("the CUDA backend does not run the {} family ({}) yet; use the CPU (--device cpu)", family,
                         c.arch_name);
  if (c.attn_logit_softcap > 0)
    return unimplemented("the CUDA backend has no attention soft-capping ({}: attn_logit_softcapping {}) yet; use the "
                         "CPU (--device cpu)", c.arch_name, c.attn_logit_softcap);
  if (family == "gemma" && c.q_size() + 2 * c.kv_size() < c.hidden_size)
    return unimplemented("the CUDA Gemma path needs q + 2 kv ({}) >= hidden ({}); use the CPU (--device cpu)",
                         c.q_size() + 2 * c.kv_size(), c.hidden_size);
  return {};
}

}  // namespace pagoda
