#include "runtime/draft_head_device_memory.h"

#include <algorithm>

namespace pagoda {
namespace {

int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

}  // namespace

DraftHeadDeviceMemory draft_head_device_memory(const DraftHead& h, DType act, bool shares_target_embedding,
                                               int64_t max_pass_rows, int64_t max_logits_rows) {
  const ModelConfig& c = h.config;
  const int64_t ae = row_bytes(act, 1);  // a plain dtype: bytes an element
  const bool eagle = h.kind == DraftHeadKind::kEagle3;
  DraftHeadDeviceMemory m;
  for (const auto* parts : {&h.matrices.fc, &h.matrices.input_proj, &h.matrices.qkv, &h.matrices.o, &h.matrices.gate_up,
                            &h.matrices.down, &h.matrices.lm_head})
    for (const Tensor& p : *parts) m.weights += p.dim(0) * p.dim(1) * ae;
  for (const Tensor* v : {&h.input_norm, &h.hidden_norm, &h.layer_norm, &h.post_norm, &h.final_norm, &h.target_norm, &h.qkv_bias})
    if (v->defined()) m.weights += v->numel() * 4;
  if (!shares_target_embedding && h.embedding.defined()) m.weights += h.embedding.dim(0) * h.embedding.dim(1) * ae;
  m.weights += 2 * h.rope.max_positions() * (h.rope.rope_dim() / 2) * 4;  // cos and sin, f32
  m.kv_bytes_per_token = 2 * c.num_kv_heads * c.head_dim * ae;

  // The runner's buffers of a pass (CudaExecutor::DraftRunner::ensure): rows in steps of 16 (at
  // least 16), logits rows in steps of 8 (at least 8).
  const int64_t D = c.hidden_size, Q = c.q_size(), Nqkv = Q + 2 * c.kv_size(), F = c.intermediate_size;
  int64_t W = D;  // a captured row's floats
  if (eagle && !h.matrices.fc.empty()) W = h.matrices.fc.front().dim(1);
  const int64_t row = 6 * 4                          // ids, positions, slots, row token / sequence / context
                      + std::max(W, D) * 4           // captured rows or hidden inputs, f32
                      + (eagle ? W * ae : 0)         // captured rows in the compute dtype
                      + 2 * D * 4                    // hidden and embedding rows, f32
                      + 2 * D * ae + 2 * D * ae      // normed embedding and hidden rows; their concatenation
                      + D * 4 + D * ae               // residual, normed residual
                      + Nqkv * 4 + Q * 4 + Q * ae    // q/k/v, rotated q, attention output
                      + 2 * F * ae + F * ae;         // gate/up, SwiGLU
  const int64_t logits_row = D * 4 + D * ae + h.draft_vocab * 4;  // final hidden (f32, act), logits
  if (max_pass_rows > 0) m.pass_buffers += round_up(std::max<int64_t>(max_pass_rows, 16), 16) * row;
  if (max_logits_rows > 0) m.pass_buffers += round_up(std::max<int64_t>(max_logits_rows, 8), 8) * logits_row;
  return m;
}

}  // namespace pagoda
