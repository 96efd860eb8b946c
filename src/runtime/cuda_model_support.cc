// Which models the CUDA executor runs, decided from the configuration alone (the CLI's
// `--device auto` asks before loading; make_cuda_executor refuses the rest at load).
#include "model/family.h"
#include "runtime/cuda_executor.h"

namespace pagoda {

Status cuda_supports_model(const ModelConfig& c) {
  // backend/cuda/cuda_step_ops.cc implements the Llama, Phi-3 (the Llama layer ops over fused
  // checkpoint tensors, partial rotary and LongRoPE in the RoPE table) and Gemma families' layer ops
  // (Gemma 2's score soft-capping in the attention kernels); the Gemma post-norms take their input
  // in the qkv buffer (q + 2 kv columns). The MoE family's experts run on the grouped kernels of
  // backend/cuda/moe.cu (kernels.h: at most 256 experts, top-k <= 16, rows of whole 16 bytes).
  const std::string_view family = family_of(c).name;
  if (family == "moe") {
    if (c.num_experts > 256 || c.num_experts_per_tok > 16)
      return unimplemented("the CUDA MoE kernels take at most 256 experts and top-{} <= 16 (this model: {} experts, top-{}); "
                           "use the CPU (--device cpu)", 16, c.num_experts, c.num_experts_per_tok);
    if (c.hidden_size % 8 != 0 || c.expert_intermediate_size % 8 != 0)
      return unimplemented("the CUDA MoE kernels need hidden ({}) and expert widths ({}) that are multiples of 8; use the "
                           "CPU (--device cpu)", c.hidden_size, c.expert_intermediate_size);
    return {};
  }
  if (family != "llama" && family != "phi3" && family != "gemma")
    return unimplemented("the CUDA backend does not run the {} family ({}) yet; use the CPU (--device cpu)", family,
                         c.arch_name);
  if (family == "gemma" && c.q_size() + 2 * c.kv_size() < c.hidden_size)
    return unimplemented("the CUDA Gemma path needs q + 2 kv ({}) >= hidden ({}); use the CPU (--device cpu)",
                         c.q_size() + 2 * c.kv_size(), c.hidden_size);
  return {};
}

}  // namespace pagoda
