// Draft heads of speculative decoding that read the target's hidden states: an EAGLE-3 head
// (load_eagle3_head) or a MiMo multi-token-prediction module (load_mimo_mtp_head). One struct:
// both are one decoder layer over (a token's embedding, a hidden state), with the kind's input
// projection, norms and output head; runtime/draft_head_forward.h runs either.
//
// EAGLE-3 (kind kEagle3), loaded from the layout the public releases use:
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
// MiMo MTP (kind kMimoMtp; XiaomiMiMo/MiMo-7B-*, vLLM's and SGLang's mimo_mtp): the target's own
// checkpoint directory (config.json with num_nextn_predict_layers >= 1) holds, besides the target,
//   model.mtp_layers.0.token_layernorm.weight, .hidden_layernorm.weight, .final_layernorm.weight [D]
//   model.mtp_layers.0.input_proj.weight [D, 2D]
//   model.mtp_layers.0.{input_layernorm, post_attention_layernorm}.weight [D]
//   model.mtp_layers.0.self_attn.{q,k,v}_proj.{weight [Q|KV|KV, D], bias}, .o_proj.weight [D, Q]
//   model.mtp_layers.0.mlp.{gate,up}_proj.weight [F, D], .down_proj.weight [D, F]
// (layer 0 only is used). Forward of one row (token x at position p, hidden input h: the target's
// final normed hidden state at p, or the module's own previous output):
//   z = input_proj(concat(rms(h) * w_hidden, rms(e) * w_token)),  e = emb[x], 0 at position 0
//   r = z + o(attn(rope(qkv(rms(z) * w_in) + bias), p));  g = r + mlp(rms(r) * w_post)
//   out = rms(g) * w_final (the next step's hidden input);  logits = the target's output head(out)
// The target's state is captured after its last layer and normed here with its final norm.
//
// Captured target layers (EAGLE-3): the residual stream after target layer a (its output), for each a of
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

enum class DraftHeadKind { kEagle3, kMimoMtp };

struct DraftHead {
  DraftHeadKind kind = DraftHeadKind::kEagle3;
  ModelConfig config;            // the decoder layer's shape (num_layers 1): KV cache and RoPE
  int64_t draft_vocab = 0;
  int64_t target_hidden = 0;     // Dt, the width of each captured target state
  std::vector<int64_t> capture_after;  // target layers (outputs) the head reads, in fc's column order
  bool norm_before_residual = false;   // EAGLE-3 only
  Tensor embedding;              // [vocab, D] any weight dtype
  // fc: EAGLE-3's [D, 3 Dt]; input_proj: MTP's [D, 2D]; lm_head: EAGLE-3's own or the target's output.
  std::shared_ptr<const LinearWeight> fc, input_proj, qkv, o, gate_up, down, lm_head;
  // The same matrices as loaded (views of the mapped safetensors, any float dtype; a fused one as
  // its parts, stacked along N), for device runners: the prepared CPU weights may have released
  // their originals. lm_head: empty where the head reads the target's output head.
  struct Matrices {
    std::vector<Tensor> fc, input_proj, qkv, o, gate_up, down, lm_head;
  } matrices;
  // input_norm: of the embedding (EAGLE-3 input_layernorm, MTP token_layernorm); hidden_norm: of
  // the hidden input; layer_norm: MTP's decoder input_layernorm; target_norm: the target's final
  // norm (MTP); qkv_bias: [Q + 2 KV] (MTP, Qwen2) or undefined. All f32.
  Tensor input_norm, hidden_norm, layer_norm, post_norm, final_norm, target_norm, qkv_bias;
  double target_norm_eps = 1e-6;
  std::vector<int32_t> draft_to_target;  // [draft_vocab]
  RopeTable rope;
  int64_t weight_bytes = 0;      // bytes of the head's own matrices (its cost per draft)
  std::string path;
};

// Loads the head in `dir` for a target of config `target` whose token embedding is
// `target_embedding` ([vocab, D]). Errors name the file, tensor or key and what is wrong: a
// missing tensor, a shape that does not fit the config, a vocabulary or hidden size that does
// not match the target, d2t ids outside the vocabulary, layers the target does not have.
Result<std::unique_ptr<DraftHead>> load_eagle3_head(const std::string& dir, const ModelConfig& target,
                                                     const Tensor& target_embedding, int64_t max_positions);

// Loads the MiMo MTP module (layer 0 of model.mtp_layers) from the checkpoint directory `dir` of
// a target of config `target` (a Qwen2-style model: "mimo"), whose token embedding and output head
// (`target_output`, its CPU weight; null where a device holds it: lm_head stays null and the
// forward takes the device's output head, runtime/draft_head_forward.h) the module shares; the target's final norm is read from the
// same directory (model.norm.weight). Errors as load_eagle3_head's.
Result<std::unique_ptr<DraftHead>> load_mimo_mtp_head(const std::string& dir, const ModelConfig& target,
                                                      const Tensor& target_embedding,
                                                      std::shared_ptr<const LinearWeight> target_output,
                                                      int64_t max_positions);

}  // namespace pagoda
