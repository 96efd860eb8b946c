// An EAGLE-3 draft head (speculative decoding), loaded from the layout the public releases use:
// a directory with config.json (LlamaForCausalLMEagle3, num_hidden_layers 1, draft_vocab_size,
// optional eagle_config.eagle_aux_hidden_state_layer_ids) and safetensors (model.safetensors or
// shards) holding
//   fc.weight                                    [D, 3 Dt]  fuses the target's three hidden states
//   midlayer.input_layernorm.weight              [D]        RMSNorm of the token embedding
//   midlayer.hidden_norm.weight                  [D]        RMSNorm of the hidden state
//   midlayer.self_attn.{q,k,v}_proj.weight       [Q|KV|KV, 2D] over concat(normed emb, normed hidden)
//   midlayer.self_attn.o_proj.weight             [D, Q]
//   midlayer.post_attention_layernorm.weight     [D]
//   midlayer.mlp.{gate,up}_proj.weight [F, D], midlayer.mlp.down_proj.weight [D, F]
//   norm.weight [D], lm_head.weight [draft_vocab, D]
//   d2t [draft_vocab] i64 (target id = draft id + d2t[draft id]; absent: draft vocab = vocab)
//   t2d [vocab] bool (optional; checked against d2t)
// ("layers.0." is accepted for "midlayer.", as vLLM maps it). The token embedding is the
// target's (`embed_tokens.weight` in the head, when present, takes precedence). Dt = the target's
// hidden size, D = the head's (equal: the head reads the target's embedding rows).
//
// Forward of one row (token x at position p with hidden h: fc of the target's states, or the
// head's own output of the previous draft step):
//   a = concat(rms(emb[x]) * w_in, rms(h) * w_hidden);  r = h + o(attn(rope(qkv(a)), p))
//   g = r + down(silu(gate(n)) * up(n)),  n = rms(r) * w_post
//   logits = lm_head(rms(g) * w_norm);    g is the hidden fed to the next draft step
// (norm_before_residual: true in config.json makes r start from rms(h) * w_hidden instead.)
//
// Captured target layers: the residual stream after target layer a (its output), for each a of
// `capture_after`, concatenated in that order into fc's input. config.json's
// eagle_aux_hidden_state_layer_ids name layer outputs (SGLang's and SpecForge's reading); the
// default without them is the input of layers 2, L/2 and L - 3, i.e. the output of layers 1,
// L/2 - 1 and L - 4.
// Thread-safety: immutable after load.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "model/model_config.h"
#include "ops/linear.h"
#include "ops/rope.h"

namespace pagoda {

struct Eagle3Head {
  ModelConfig config;            // the decoder layer's shape (num_layers 1): KV cache and RoPE
  int64_t draft_vocab = 0;
  int64_t target_hidden = 0;     // Dt, the width of each captured target state
  std::vector<int64_t> capture_after;  // target layers (outputs) fc reads, in its column order
  bool norm_before_residual = false;
  Tensor embedding;              // [vocab, D] any weight dtype
  std::shared_ptr<const LinearWeight> fc, qkv, o, gate_up, down, lm_head;
  Tensor input_norm, hidden_norm, post_norm, final_norm;  // [D] f32
  std::vector<int32_t> draft_to_target;  // [draft_vocab]
  RopeTable rope;
  int64_t weight_bytes = 0;      // bytes of the head's own matrices (its cost per draft)
  std::string path;
};

// Loads the head in `dir` for a target of config `target` whose token embedding is
// `target_embedding` ([vocab, D]). Errors name the file, tensor or key and what is wrong: a
// missing tensor, a shape that does not fit the config, a vocabulary or hidden size that does
// not match the target, d2t ids outside the vocabulary, layers the target does not have.
Result<std::unique_ptr<Eagle3Head>> load_eagle3_head(const std::string& dir, const ModelConfig& target,
                                                     const Tensor& target_embedding, int64_t max_positions);

}  // namespace pagoda
