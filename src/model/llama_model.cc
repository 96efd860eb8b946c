#include "model/llama_model.h"

#include <cmath>
#include <cstring>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "common/mapped_file.h"
#include "ops/norm.h"

namespace pagoda {
namespace {

// The tensor if present (validate_tensor_table already vetted it), else nullptr.
const Tensor* find_tensor(const TensorLookup& lookup, const std::string& name) {
  if (name.empty()) return nullptr;
  auto r = lookup(name);
  return r.ok() ? *r : nullptr;
}

Tensor optional_f32(const TensorLookup& lookup, const std::string& name) {
  const Tensor* t = find_tensor(lookup, name);
  return t ? to_f32(*t) : Tensor();
}

void ensure_workspace(const ModelConfig& c, int64_t T, ForwardWorkspace& ws) {
  if (ws.capacity >= T) return;
  const int64_t cap = std::max<int64_t>(T, 16);
  ws.residual = Tensor::empty(DType::kF32, {cap, c.hidden_size});
  ws.hidden = Tensor::empty(DType::kF32, {cap, c.hidden_size});
  ws.qkv = Tensor::empty(DType::kF32, {cap, c.q_size() + 2 * c.kv_size()});
  ws.q = Tensor::empty(DType::kF32, {cap, c.q_size()});
  ws.k = Tensor::empty(DType::kF32, {cap, c.kv_size()});
  ws.v = Tensor::empty(DType::kF32, {cap, c.kv_size()});
  ws.attn = Tensor::empty(DType::kF32, {cap, c.q_size()});
  ws.proj = Tensor::empty(DType::kF32, {cap, c.hidden_size});
  ws.gate_up = Tensor::empty(DType::kF32, {cap, 2 * c.intermediate_size});
  ws.act = Tensor::empty(DType::kF32, {cap, c.intermediate_size});
  ws.last_hidden = Tensor::empty(DType::kF32, {cap, c.hidden_size});
  ws.capacity = cap;
}

}  // namespace

Result<std::unique_ptr<LlamaModel>> LlamaModel::load(const ModelConfig& config, WeightNaming naming,
                                                     const TensorLookup& lookup, int64_t max_positions,
                                                     bool cpu_kernels) {
  const IsaLevel isa_cap = cpu_kernels ? IsaLevel::kAmx : IsaLevel::kScalar;  // scalar: no repacking
  PAGODA_RETURN_IF_ERROR(config.validate());
  const auto table = llama_family_tensor_table(config);
  PAGODA_RETURN_IF_ERROR(validate_tensor_table(table, naming, lookup));
  auto name_of = [&](const TensorDecl& d) { return decl_name(d, naming); };
  auto find_decl = [&](const std::string& gguf_name) -> const TensorDecl& {
    for (const auto& d : table)
      if (d.gguf_name == gguf_name) return d;
    PAGODA_CHECK(false, "no declaration for {}", gguf_name);
  };
  // Mapped bytes whose pages can be released once prepared: the kernels read repacked copies.
  std::vector<const Tensor*> releasable;
  auto linear_of = [&](const std::string& gguf_name) -> Result<std::shared_ptr<const LinearWeight>> {
    const std::string name = name_of(find_decl(gguf_name));
    const Tensor* t = find_tensor(lookup, name);
    PAGODA_ASSIGN_OR_RETURN(auto lw, prepare_linear(*t, name, isa_cap));
    if (linear_weight_repacked(*lw)) releasable.push_back(t);
    return lw;
  };
  auto fused_of = [&](std::initializer_list<const char*> gguf_names, const std::string& label)
      -> Result<std::shared_ptr<const LinearWeight>> {
    std::vector<Tensor> parts;
    for (const char* g : gguf_names) parts.push_back(*find_tensor(lookup, name_of(find_decl(g))));
    PAGODA_ASSIGN_OR_RETURN(auto lw, prepare_linear_fused(parts, label, isa_cap));
    // The fused weight owns a concatenated copy: the mapped originals are not read again.
    for (const char* g : gguf_names) releasable.push_back(find_tensor(lookup, name_of(find_decl(g))));
    return lw;
  };

  LlamaWeights w;
  w.token_embd = *find_tensor(lookup, name_of(find_decl("token_embd.weight")));
  w.output_norm = optional_f32(lookup, name_of(find_decl("output_norm.weight")));
  const std::string out_name = name_of(find_decl("output.weight"));
  if (find_tensor(lookup, out_name) != nullptr) {
    PAGODA_ASSIGN_OR_RETURN(w.output, linear_of("output.weight"));
  } else {
    PAGODA_ASSIGN_OR_RETURN(w.output, prepare_linear(w.token_embd, name_of(find_decl("token_embd.weight")), isa_cap));
  }
  if (Tensor rf = optional_f32(lookup, name_of(find_decl("rope_freqs.weight"))); rf.defined())
    w.rope_freqs.assign(rf.data_as<float>(), rf.data_as<float>() + rf.numel());

  for (int64_t i = 0; i < config.num_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    auto f32 = [&](const char* suffix) { return optional_f32(lookup, name_of(find_decl(p + suffix))); };
    LlamaLayerWeights lw;
    lw.attn_norm = f32("attn_norm.weight");
    lw.ffn_norm = f32("ffn_norm.weight");
    const std::string q = p + "attn_q.weight", k = p + "attn_k.weight", v = p + "attn_v.weight";
    PAGODA_ASSIGN_OR_RETURN(lw.wqkv, fused_of({q.c_str(), k.c_str(), v.c_str()}, p + "attn_qkv"));
    PAGODA_ASSIGN_OR_RETURN(lw.wo, linear_of(p + "attn_output.weight"));
    const std::string gate = p + "ffn_gate.weight", up = p + "ffn_up.weight";
    PAGODA_ASSIGN_OR_RETURN(lw.w_gate_up, fused_of({gate.c_str(), up.c_str()}, p + "ffn_gate_up"));
    PAGODA_ASSIGN_OR_RETURN(lw.w_down, linear_of(p + "ffn_down.weight"));
    if (config.attention_bias) {
      lw.bq = f32("attn_q.bias");
      lw.bk = f32("attn_k.bias");
      lw.bv = f32("attn_v.bias");
    }
    if (config.qk_norm) {
      lw.q_norm = f32("attn_q_norm.weight");
      lw.k_norm = f32("attn_k_norm.weight");
    }
    w.layers.push_back(std::move(lw));
  }
  // The embedding stays readable (token lookups); everything else repacked is released.
  for (const Tensor* t : releasable)
    if (t->data() != w.token_embd.data()) release_mapped_pages(t->data(), static_cast<size_t>(t->nbytes()));
  RopeTable rope(config, max_positions, w.rope_freqs);
  return std::unique_ptr<LlamaModel>(new LlamaModel(config, std::move(w), std::move(rope)));
}

std::vector<const LinearWeight*> LlamaWeights::linear_weights() const {
  std::vector<const LinearWeight*> out;
  for (const auto& l : layers)
    for (const auto* lw : {&l.wqkv, &l.wo, &l.w_gate_up, &l.w_down}) out.push_back(lw->get());
  out.push_back(output.get());
  return out;
}

void LlamaModel::forward(const ForwardBatch& batch, KvCacheStorage& kv, ForwardWorkspace& ws, Tensor& logits,
                         ThreadPool& pool) const {
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens();
  PAGODA_CHECK(T > 0, "empty batch");
  ensure_workspace(c, T, ws);
  Tensor residual = ws.residual.slice_rows(0, T), hidden = ws.hidden.slice_rows(0, T);
  Tensor qkv = ws.qkv.slice_rows(0, T);
  Tensor q = ws.q.slice_rows(0, T), k = ws.k.slice_rows(0, T), v = ws.v.slice_rows(0, T);
  Tensor attn = ws.attn.slice_rows(0, T), proj = ws.proj.slice_rows(0, T);
  Tensor gate_up = ws.gate_up.slice_rows(0, T), act = ws.act.slice_rows(0, T);

  std::vector<AttentionSeq> seqs;
  seqs.reserve(batch.seqs.size());
  for (const auto& s : batch.seqs) seqs.push_back({s.token_begin, s.num_tokens, s.context_len, s.block_table});

  embedding_lookup(weights_.token_embd, batch.token_ids, residual, pool);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LlamaLayerWeights& lw = weights_.layers[l];
    // hidden = norm(residual); for l > 0 the previous MLP output (proj) is added first.
    if (l == 0) {
      rms_norm(residual, lw.attn_norm, c.rms_norm_eps, hidden, pool);
    } else {
      add_rms_norm(residual, proj, lw.attn_norm, c.rms_norm_eps, hidden, pool);
    }
    linear(*lw.wqkv, hidden, qkv, pool);
    split_columns(qkv, {&q, &k, &v}, pool);
    if (c.attention_bias) {
      add_bias(q, lw.bq, pool);
      add_bias(k, lw.bk, pool);
      add_bias(v, lw.bv, pool);
    }
    RopeKvWriteParams rp;
    rp.q = &q;
    rp.k = &k;
    rp.v = &v;
    rp.positions = batch.positions;
    rp.slots = batch.slots;
    rp.rope = &rope_;
    rp.q_norm = c.qk_norm ? &lw.q_norm : nullptr;
    rp.k_norm = c.qk_norm ? &lw.k_norm : nullptr;
    rp.norm_eps = c.rms_norm_eps;
    rp.num_heads = c.num_heads;
    rp.cache = kv.layer(l);
    rope_kv_write(rp, pool);

    PagedAttentionParams ap;
    ap.q = &q;
    ap.out = &attn;
    ap.seqs = seqs;
    ap.cache = kv.layer(l);
    ap.num_heads = c.num_heads;
    ap.scale = scale;
    ap.sliding_window = c.sliding_window;
    paged_attention(ap, pool);

    linear(*lw.wo, attn, proj, pool);
    add_rms_norm(residual, proj, lw.ffn_norm, c.rms_norm_eps, hidden, pool);
    linear(*lw.w_gate_up, hidden, gate_up, pool);
    swiglu_fused(gate_up, act, pool);
    linear(*lw.w_down, act, proj, pool);
    if (hook_) {
      add_inplace(residual, proj, pool);
      hook_(hook_ctx_, l, residual);
      // The next layer adds proj again; neutralise it by zeroing (debug path only).
      std::memset(proj.data(), 0, proj.nbytes());
    }
  }

  const int64_t n_logits = static_cast<int64_t>(batch.logits_rows.size());
  if (logits.dtype() != DType::kF32 || logits.ndim() != 2 || logits.dim(0) != n_logits || logits.dim(1) != c.vocab_size)
    logits = Tensor::empty(DType::kF32, {n_logits, c.vocab_size});
  if (n_logits == 0) return;
  add_inplace(residual, proj, pool);
  Tensor last = ws.last_hidden.slice_rows(0, n_logits);
  gather_rows(residual, batch.logits_rows, last);
  rms_norm(last, weights_.output_norm, c.rms_norm_eps, last, pool);
  linear(*weights_.output, last, logits, pool);
}

}  // namespace pagoda
