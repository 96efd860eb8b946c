// Declared tensor tables: what a model family expects to find in a checkpoint, under which name
// in each format, with which shape. Loading validates the checkpoint against this table first,
// so a missing tensor or a wrong shape is a clear error before any compute is set up.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "model/model_config.h"

namespace pagoda {

enum class WeightNaming { kGguf, kHuggingFace };

struct TensorDecl {
  std::string gguf_name;        // "blk.3.attn_q.weight"
  std::string hf_name;          // "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;   // outermost first, as torch: linear weights are [out, in]
  bool required = true;
  bool linear = false;          // used as a matmul weight (any weight dtype); else converted to f32
  int64_t layer = -1;           // -1 for global tensors
  // > 0: the stacked matrices of this many experts, shape [E, N, K]. GGUF holds them as one 3-d
  // tensor (ffn_*_exps); a Hugging Face checkpoint holds one [N, K] tensor per expert, named by
  // hf_name with "{}" replaced by the expert index (expert_tensor_name).
  int64_t experts = 0;
};

// Finds a tensor by its name in the checkpoint's own naming: the tensor, kNotFound if absent, or
// another error explaining why it is unusable (e.g. an unsupported dtype).
using TensorLookup = std::function<Result<const Tensor*>(const std::string& name)>;

inline const std::string& decl_name(const TensorDecl& d, WeightNaming naming) {
  return naming == WeightNaming::kGguf ? d.gguf_name : d.hf_name;
}

// The checkpoint's name of expert `e`'s matrix of a stacked declaration (HF: one tensor per expert).
std::string expert_tensor_name(const TensorDecl& d, int64_t e);

// The global tensors every decoder family declares first: the token embedding, the final norm and
// the output projection (optional when the config ties it to the embedding).
inline void declare_embedding_and_output(std::vector<TensorDecl>& t, const ModelConfig& c) {
  const int64_t D = c.hidden_size, V = c.vocab_size;
  t.push_back({"token_embd.weight", "model.embed_tokens.weight", {V, D}, true, false});
  t.push_back({"output_norm.weight", "model.norm.weight", {D}, true, false});
  t.push_back({"output.weight", "lm_head.weight", {V, D}, !c.tie_word_embeddings, true});
}

// Checks presence, shape and dtype of every declared tensor (for a stacked expert declaration in
// HF naming: each expert's tensor, all of one dtype). Errors name the tensor, the expected and the
// found shape/dtype.
Status validate_tensor_table(const std::vector<TensorDecl>& table, WeightNaming naming, const TensorLookup& lookup);

}  // namespace pagoda
