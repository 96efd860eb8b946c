#include "model/draft_head.h"

#include <cstring>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "loader/hf_model_dir.h"
#include "ops/elementwise.h"

namespace pagoda {
namespace {

// The tensors of one head directory, under either of the two layer prefixes.
class HeadTensors {
 public:
  // `what` names the head in errors ("EAGLE-3 head", "MTP module").
  HeadTensors(const HfModelDir& dir, std::string what = "EAGLE-3 head") : dir_(dir), what_(std::move(what)) {}

  const HfModelDir::Entry* entry(const std::string& name) const {
    if (const auto* e = dir_.find(name)) return e;
    if (name.rfind("midlayer.", 0) == 0) return dir_.find("layers.0." + name.substr(9));
    return nullptr;
  }
  const std::string& what() const { return what_; }
  // A float tensor of exactly `shape`.
  Result<Tensor> get(const std::string& name, const std::vector<int64_t>& shape) const {
    const auto* e = entry(name);
    if (e == nullptr) return not_found("{} {}: tensor '{}' is missing", what_, dir_.dir(), name);
    if (e->info->shape != shape)
      return invalid_argument("{} {}: tensor '{}' has shape {} but the config needs {}", what_, dir_.dir(), name,
                              fmt::format("[{}]", fmt::join(e->info->shape, ", ")), fmt::format("[{}]", fmt::join(shape, ", ")));
    return e->file->to_tensor(*e->info);
  }
  Result<Tensor> get_f32(const std::string& name, int64_t n) const {
    PAGODA_ASSIGN_OR_RETURN(Tensor t, get(name, {n}));
    return to_f32(t);
  }
  const std::string& dir() const { return dir_.dir(); }

 private:
  const HfModelDir& dir_;
  std::string what_;
};

// The prepared weight of the named parts stacked along N; `parts` receives them as loaded.
Result<std::shared_ptr<const LinearWeight>> linear_of(const HeadTensors& ts, const std::vector<std::string>& names,
                                                      const std::vector<std::vector<int64_t>>& shapes,
                                                      const std::string& label, std::vector<Tensor>& parts) {
  parts.clear();
  for (size_t i = 0; i < names.size(); ++i) {
    PAGODA_ASSIGN_OR_RETURN(Tensor t, ts.get(names[i], shapes[i]));
    parts.push_back(std::move(t));
  }
  auto w = parts.size() == 1 ? prepare_linear(parts[0], label) : prepare_linear_fused(parts, label);
  if (!w.ok()) return invalid_argument("{} {}: {}: {}", ts.what(), ts.dir(), label, w.status().to_string());
  return *w;
}

}  // namespace

Result<std::unique_ptr<DraftHead>> load_eagle3_head(const std::string& path, const ModelConfig& target,
                                                     const Tensor& target_embedding, int64_t max_positions) {
  auto opened = HfModelDir::open(path);
  if (!opened.ok())
    return invalid_argument("EAGLE-3 head: a directory with config.json and model.safetensors is needed: {}",
                            opened.status().to_string());
  const HfModelDir& dir = **opened;
  const nlohmann::json& j = dir.config();
  auto head = std::make_unique<DraftHead>();
  head->path = path;
  int64_t layers = 0;
  try {
    layers = j.value("num_hidden_layers", int64_t{1});
    head->draft_vocab = j.contains("draft_vocab_size") && !j["draft_vocab_size"].is_null()
                            ? j["draft_vocab_size"].get<int64_t>()
                            : j.value("vocab_size", int64_t{0});
    head->target_hidden = j.value("target_hidden_size", target.hidden_size);
    head->norm_before_residual = j.value("norm_before_residual", false);
    // The layer ids: eagle_config's (SpecForge writes them there) or a top-level key.
    const nlohmann::json* ids = nullptr;
    if (j.contains("eagle_config") && j["eagle_config"].is_object()) {
      const auto& ec = j["eagle_config"];
      if (ec.value("use_aux_hidden_state", true) == false)
        return unimplemented("EAGLE-3 head {}: eagle_config.use_aux_hidden_state false (an EAGLE-1/2 style head) is not supported", path);
      if (ec.contains("eagle_aux_hidden_state_layer_ids")) ids = &ec["eagle_aux_hidden_state_layer_ids"];
    }
    if (ids == nullptr && j.contains("eagle_aux_hidden_state_layer_ids")) ids = &j["eagle_aux_hidden_state_layer_ids"];
    if (ids != nullptr && !ids->is_null()) {
      if (!ids->is_array() || ids->size() != 3)
        return invalid_argument("EAGLE-3 head {}: eagle_aux_hidden_state_layer_ids must list 3 layers, got {}", path, ids->dump());
      for (const auto& v : *ids) head->capture_after.push_back(v.get<int64_t>());
    }
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("EAGLE-3 head {}: config.json: {}", path, e.what());
  }
  if (layers != 1)
    return unimplemented("EAGLE-3 head {}: num_hidden_layers {} (only the released one-layer heads are supported)", path, layers);
  const int64_t L = target.num_layers;
  if (head->capture_after.empty()) {
    if (L < 5)
      return invalid_argument("EAGLE-3 head {}: the target has {} layers, too few for the default captured layers "
                              "(the inputs of layers 2, L/2, L-3); name them in eagle_config.eagle_aux_hidden_state_layer_ids",
                              path, L);
    head->capture_after = {1, L / 2 - 1, L - 4};
  }
  for (int64_t a : head->capture_after)
    if (a < 0 || a >= L)
      return invalid_argument("EAGLE-3 head {}: captured layer {} is not a layer of the target (0..{})", path, a, L - 1);

  // The decoder layer's shape through the HF parser (a one-layer llama).
  nlohmann::json lj = j;
  lj["model_type"] = "llama";
  lj["num_hidden_layers"] = 1;
  if (!lj.contains("vocab_size")) lj["vocab_size"] = target.vocab_size;
  auto mc = model_config_from_hf_json(lj);
  if (!mc.ok()) return invalid_argument("EAGLE-3 head {}: config.json: {}", path, mc.status().to_string());
  ModelConfig& c = head->config = *mc;
  c.arch_name = "eagle3";
  c.sliding_window = 0;
  if (c.vocab_size != target.vocab_size)
    return invalid_argument("EAGLE-3 head {}: vocab_size {} differs from the target's {}: the head belongs to another model",
                            path, c.vocab_size, target.vocab_size);
  if (head->draft_vocab < 1 || head->draft_vocab > c.vocab_size)
    return invalid_argument("EAGLE-3 head {}: draft_vocab_size {} must be in [1, vocab_size {}]", path, head->draft_vocab,
                            c.vocab_size);
  if (head->target_hidden != target.hidden_size)
    return invalid_argument("EAGLE-3 head {}: target_hidden_size {} differs from the target's hidden size {}", path,
                            head->target_hidden, target.hidden_size);
  if (c.attention_bias || c.qk_norm)
    return unimplemented("EAGLE-3 head {}: attention biases or q/k norms are not supported", path);

  const int64_t D = c.hidden_size, F = c.intermediate_size, Q = c.q_size(), KV = c.kv_size(), V = c.vocab_size;
  const int64_t Dt = head->target_hidden, DV = head->draft_vocab;
  HeadTensors ts(dir);
  // The embedding: the head's own when it has one, else the target's (same width as the head).
  if (ts.entry("embed_tokens.weight") != nullptr) {
    PAGODA_ASSIGN_OR_RETURN(head->embedding, ts.get("embed_tokens.weight", {V, D}));
  } else {
    if (target_embedding.ndim() != 2 || target_embedding.dim(0) != V || target_embedding.dim(1) != D)
      return invalid_argument("EAGLE-3 head {}: the head's hidden size {} does not match the target's embedding [{}, {}] "
                              "it reads",
                              path, D, target_embedding.dim(0), target_embedding.dim(1));
    head->embedding = target_embedding;
  }
  const std::string m = "midlayer.";
  PAGODA_ASSIGN_OR_RETURN(head->fc, linear_of(ts, {"fc.weight"}, {{D, 3 * Dt}}, "eagle3.fc", head->matrices.fc));
  PAGODA_ASSIGN_OR_RETURN(head->qkv, linear_of(ts, {m + "self_attn.q_proj.weight", m + "self_attn.k_proj.weight", m + "self_attn.v_proj.weight"},
                                               {{Q, 2 * D}, {KV, 2 * D}, {KV, 2 * D}}, "eagle3.qkv", head->matrices.qkv));
  PAGODA_ASSIGN_OR_RETURN(head->o, linear_of(ts, {m + "self_attn.o_proj.weight"}, {{D, Q}}, "eagle3.o", head->matrices.o));
  PAGODA_ASSIGN_OR_RETURN(head->gate_up, linear_of(ts, {m + "mlp.gate_proj.weight", m + "mlp.up_proj.weight"}, {{F, D}, {F, D}},
                                                   "eagle3.gate_up", head->matrices.gate_up));
  PAGODA_ASSIGN_OR_RETURN(head->down, linear_of(ts, {m + "mlp.down_proj.weight"}, {{D, F}}, "eagle3.down", head->matrices.down));
  PAGODA_ASSIGN_OR_RETURN(head->lm_head, linear_of(ts, {"lm_head.weight"}, {{DV, D}}, "eagle3.lm_head", head->matrices.lm_head));
  PAGODA_ASSIGN_OR_RETURN(head->input_norm, ts.get_f32(m + "input_layernorm.weight", D));
  PAGODA_ASSIGN_OR_RETURN(head->hidden_norm, ts.get_f32(m + "hidden_norm.weight", D));
  PAGODA_ASSIGN_OR_RETURN(head->post_norm, ts.get_f32(m + "post_attention_layernorm.weight", D));
  PAGODA_ASSIGN_OR_RETURN(head->final_norm, ts.get_f32("norm.weight", D));

  // d2t: draft id -> target id offsets (I64 in the releases; I32 accepted).
  head->draft_to_target.resize(static_cast<size_t>(DV));
  if (const auto* e = ts.entry("d2t")) {
    const auto& info = *e->info;
    if (info.shape != std::vector<int64_t>{DV} || (info.dtype_name != "I64" && info.dtype_name != "I32"))
      return invalid_argument("EAGLE-3 head {}: d2t must be I64 [{}] (draft_vocab_size), got {} [{}]", path, DV,
                              info.dtype_name, fmt::join(info.shape, ", "));
    const auto bytes = e->file->tensor_bytes(info);
    for (int64_t d = 0; d < DV; ++d) {
      int64_t off = 0;
      if (info.dtype_name == "I64") {
        std::memcpy(&off, bytes.data() + d * 8, 8);
      } else {
        int32_t o32 = 0;
        std::memcpy(&o32, bytes.data() + d * 4, 4);
        off = o32;
      }
      const int64_t t = d + off;
      if (t < 0 || t >= V)
        return invalid_argument("EAGLE-3 head {}: d2t maps draft id {} to {}, outside the vocabulary [0, {})", path, d, t, V);
      head->draft_to_target[static_cast<size_t>(d)] = static_cast<int32_t>(t);
    }
  } else if (DV != V) {
    return not_found("EAGLE-3 head {}: tensor 'd2t' is missing (needed: draft_vocab_size {} < vocab_size {})", path, DV, V);
  } else {
    for (int64_t d = 0; d < DV; ++d) head->draft_to_target[static_cast<size_t>(d)] = static_cast<int32_t>(d);
  }
  if (const auto* e = ts.entry("t2d")) {
    const auto& info = *e->info;
    if (info.shape != std::vector<int64_t>{V} || info.element_bytes != 1)
      return invalid_argument("EAGLE-3 head {}: t2d must be BOOL [{}] (vocab_size), got {} [{}]", path, V, info.dtype_name,
                              fmt::join(info.shape, ", "));
    const auto bytes = e->file->tensor_bytes(info);
    for (int64_t d = 0; d < DV; ++d)
      if (bytes[static_cast<size_t>(head->draft_to_target[static_cast<size_t>(d)])] == 0)
        return invalid_argument("EAGLE-3 head {}: t2d and d2t disagree: draft id {} maps to target id {}, which t2d leaves out",
                                path, d, head->draft_to_target[static_cast<size_t>(d)]);
  }
  for (const auto& [name, e] : dir.tensors())
    if (e.info->dtype.has_value() && name != "embed_tokens.weight") head->weight_bytes += static_cast<int64_t>(e.info->nbytes());
  head->rope = RopeTable(c.rope_spec(), max_positions);
  return head;
}

Result<std::unique_ptr<DraftHead>> load_mimo_mtp_head(const std::string& path, const ModelConfig& target,
                                                      const Tensor& target_embedding,
                                                      std::shared_ptr<const LinearWeight> target_output,
                                                      int64_t max_positions) {
  auto opened = HfModelDir::open(path);
  if (!opened.ok())
    return invalid_argument("MTP module: the target's checkpoint directory (config.json and safetensors) is needed: {}",
                            opened.status().to_string());
  const HfModelDir& dir = **opened;
  const nlohmann::json& j = dir.config();
  int64_t n_mtp = 0;
  try {
    n_mtp = j.value("num_nextn_predict_layers", int64_t{0});
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("MTP module {}: config.json: {}", path, e.what());
  }
  if (n_mtp < 1)
    return invalid_argument("MTP module {}: config.json has no num_nextn_predict_layers >= 1: the checkpoint has no MTP layers",
                            path);
  auto head = std::make_unique<DraftHead>();
  head->kind = DraftHeadKind::kMimoMtp;
  head->path = path;
  // The module's layer has the target's shape (a Qwen2 layer: q/k/v biases), HF's RoPE layout.
  nlohmann::json lj = j;
  lj["model_type"] = "qwen2";
  lj["num_hidden_layers"] = 1;
  auto mc = model_config_from_hf_json(lj);
  if (!mc.ok()) return invalid_argument("MTP module {}: config.json: {}", path, mc.status().to_string());
  ModelConfig& c = head->config = *mc;
  c.arch_name = "mimo_mtp";
  c.sliding_window = 0;
  if (c.vocab_size != target.vocab_size || c.hidden_size != target.hidden_size)
    return invalid_argument("MTP module {}: vocabulary {} and hidden size {} differ from the target's {} and {}: the "
                            "module belongs to another model",
                            path, c.vocab_size, c.hidden_size, target.vocab_size, target.hidden_size);
  if (target_embedding.ndim() != 2 || target_embedding.dim(0) != c.vocab_size || target_embedding.dim(1) != c.hidden_size)
    return invalid_argument("MTP module {}: the target's embedding is not [{}, {}]", path, c.vocab_size, c.hidden_size);
  head->draft_vocab = c.vocab_size;
  head->target_hidden = c.hidden_size;
  head->capture_after = {target.num_layers - 1};
  head->embedding = target_embedding;
  head->lm_head = std::move(target_output);
  head->target_norm_eps = target.rms_norm_eps;
  const int64_t D = c.hidden_size, F = c.intermediate_size, Q = c.q_size(), KV = c.kv_size();
  HeadTensors ts(dir, "MTP module");
  const std::string m = "model.mtp_layers.0.";
  PAGODA_ASSIGN_OR_RETURN(head->input_proj, linear_of(ts, {m + "input_proj.weight"}, {{D, 2 * D}}, "mtp.input_proj", head->matrices.input_proj));
  PAGODA_ASSIGN_OR_RETURN(head->qkv, linear_of(ts, {m + "self_attn.q_proj.weight", m + "self_attn.k_proj.weight", m + "self_attn.v_proj.weight"},
                                               {{Q, D}, {KV, D}, {KV, D}}, "mtp.qkv", head->matrices.qkv));
  PAGODA_ASSIGN_OR_RETURN(head->o, linear_of(ts, {m + "self_attn.o_proj.weight"}, {{D, Q}}, "mtp.o", head->matrices.o));
  PAGODA_ASSIGN_OR_RETURN(head->gate_up, linear_of(ts, {m + "mlp.gate_proj.weight", m + "mlp.up_proj.weight"}, {{F, D}, {F, D}},
                                                   "mtp.gate_up", head->matrices.gate_up));
  PAGODA_ASSIGN_OR_RETURN(head->down, linear_of(ts, {m + "mlp.down_proj.weight"}, {{D, F}}, "mtp.down", head->matrices.down));
  PAGODA_ASSIGN_OR_RETURN(head->input_norm, ts.get_f32(m + "token_layernorm.weight", D));
  PAGODA_ASSIGN_OR_RETURN(head->hidden_norm, ts.get_f32(m + "hidden_layernorm.weight", D));
  PAGODA_ASSIGN_OR_RETURN(head->layer_norm, ts.get_f32(m + "input_layernorm.weight", D));
  PAGODA_ASSIGN_OR_RETURN(head->post_norm, ts.get_f32(m + "post_attention_layernorm.weight", D));
  PAGODA_ASSIGN_OR_RETURN(head->final_norm, ts.get_f32(m + "final_layernorm.weight", D));
  PAGODA_ASSIGN_OR_RETURN(head->target_norm, ts.get_f32("model.norm.weight", D));
  if (c.attention_bias) {
    PAGODA_ASSIGN_OR_RETURN(Tensor qb, ts.get_f32(m + "self_attn.q_proj.bias", Q));
    PAGODA_ASSIGN_OR_RETURN(Tensor kb, ts.get_f32(m + "self_attn.k_proj.bias", KV));
    PAGODA_ASSIGN_OR_RETURN(Tensor vb, ts.get_f32(m + "self_attn.v_proj.bias", KV));
    head->qkv_bias = Tensor::empty(DType::kF32, {Q + 2 * KV});
    float* dst = head->qkv_bias.data_as<float>();
    std::memcpy(dst, qb.data(), static_cast<size_t>(Q) * 4);
    std::memcpy(dst + Q, kb.data(), static_cast<size_t>(KV) * 4);
    std::memcpy(dst + Q + KV, vb.data(), static_cast<size_t>(KV) * 4);
  }
  head->draft_to_target.resize(static_cast<size_t>(c.vocab_size));
  for (int64_t d = 0; d < c.vocab_size; ++d) head->draft_to_target[static_cast<size_t>(d)] = static_cast<int32_t>(d);
  for (const auto& [name, e] : dir.tensors())
    if (name.rfind(m, 0) == 0 && e.info->dtype.has_value()) head->weight_bytes += static_cast<int64_t>(e.info->nbytes());
  head->weight_bytes += static_cast<int64_t>(target_embedding.nbytes());  // the output head it reads (as large)
  head->rope = RopeTable(c.rope_spec(), max_positions);
  return head;
}

}  // namespace pagoda
