#include "runtime/cpu_layer_ops.h"

#include <cmath>
#include <cstring>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/rope.h"

namespace pagoda {
namespace {

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

class CpuLayerOps final : public LayerOps {
 public:
  CpuLayerOps(const Model& model, const ForwardBatch& batch, KvCacheStorage& kv, ForwardWorkspace& ws, Tensor& logits,
              ThreadPool& pool, const LayerHook& hook, const TensorParallelRank* tp)
      : m_(model), c_(model.config()), w_(model.weights()), batch_(batch), kv_(kv), logits_(logits), pool_(pool),
        hook_(hook), tp_(tp != nullptr && tp->comm != nullptr && tp->comm->size() > 1 ? tp : nullptr) {
    const int64_t T = batch.num_tokens();
    PAGODA_CHECK(T > 0, "empty batch");
    ensure_workspace(c_, T, ws);
    ws_ = &ws;
    residual_ = ws.residual.slice_rows(0, T);
    hidden_ = ws.hidden.slice_rows(0, T);
    qkv_ = ws.qkv.slice_rows(0, T);
    q_ = ws.q.slice_rows(0, T);
    k_ = ws.k.slice_rows(0, T);
    v_ = ws.v.slice_rows(0, T);
    attn_ = ws.attn.slice_rows(0, T);
    proj_ = ws.proj.slice_rows(0, T);
    gate_up_ = ws.gate_up.slice_rows(0, T);
    act_ = ws.act.slice_rows(0, T);
    seqs_.reserve(batch.seqs.size());
    for (const auto& s : batch.seqs) seqs_.push_back({s.token_begin, s.num_tokens, s.context_len, s.block_table});
  }

  void embed() override {
    if (tp_ == nullptr) {
      embedding_lookup(w_.token_embd, batch_.token_ids, residual_, pool_);
      return;
    }
    // The rank's vocabulary rows [begin, begin + V_r): tokens outside them get zeros, and the
    // all-reduce brings every token's row from the rank that holds it.
    const int64_t begin = tp_->vocab_begin, rows = w_.token_embd.dim(0);
    std::vector<int32_t> local(batch_.token_ids.size());
    std::vector<int64_t> elsewhere;  // token positions whose rows another rank holds
    for (size_t i = 0; i < local.size(); ++i) {
      const int64_t id = batch_.token_ids[i] - begin;
      const bool here = id >= 0 && id < rows;
      local[i] = here ? static_cast<int32_t>(id) : 0;
      if (!here) elsewhere.push_back(static_cast<int64_t>(i));
    }
    embedding_lookup(w_.token_embd, local, residual_, pool_);
    for (int64_t i : elsewhere) std::memset(residual_.row_ptr(i), 0, static_cast<size_t>(residual_.row_bytes()));
    all_reduce(residual_);
  }

  void norm_qkv(const NormArgs& norm, LinearId w) override {
    norm_residual(norm, hidden_);
    linear(cpu_weight(w), hidden_, qkv_, pool_);
  }

  void rope_kv_attention(const AttentionArgs& a) override {
    if (a.qkv_bias.defined()) add_bias(qkv_, w_.vector(a.qkv_bias), pool_);
    split_columns(qkv_, {&q_, &k_, &v_}, pool_);
    if (a.qk_norm_full) {
      rms_norm(q_, w_.vector(a.q_norm), a.norm_eps, q_, pool_);
      rms_norm(k_, w_.vector(a.k_norm), a.norm_eps, k_, pool_);
    }
    RopeKvWriteParams rp;
    rp.q = &q_;
    rp.k = &k_;
    rp.v = &v_;
    rp.positions = batch_.positions;
    rp.slots = batch_.slots;
    rp.rope = a.rope != nullptr ? a.rope : &m_.rope();
    rp.q_norm = a.q_norm.defined() && !a.qk_norm_full ? &w_.vector(a.q_norm) : nullptr;
    rp.k_norm = a.k_norm.defined() && !a.qk_norm_full ? &w_.vector(a.k_norm) : nullptr;
    rp.norm_eps = a.norm_eps;
    rp.num_heads = c_.num_heads;
    rp.cache = kv_.layer(a.layer);
    rope_kv_write(rp, pool_);

    PagedAttentionParams ap;
    ap.q = &q_;
    ap.out = &attn_;
    ap.seqs = seqs_;
    ap.cache = kv_.layer(a.layer);
    ap.num_heads = c_.num_heads;
    ap.scale = a.scale > 0.0f ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(c_.head_dim)));
    ap.sliding_window = a.sliding_window >= 0 ? a.sliding_window : c_.sliding_window;
    ap.softcap = a.logit_softcap;
    paged_attention(ap, pool_);
  }

  void scale_residual(float scale) override {
    flush_residual();
    float* r = residual_.data_as<float>();
    pool_.parallel_for(residual_.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) r[i] *= scale;
    });
  }

  void linear_post_norm_residual(LinearId w, const NormArgs& post) override {
    linear(cpu_weight(w), attn_, proj_, pool_);
    all_reduce(proj_);
    rms_norm(proj_, w_.vector(post.weight), post.eps, proj_, pool_);
    pending_add_ = true;
  }

  void gated_mlp_post_norm(const NormArgs& norm, LinearId gate_up, LinearId down, GateActivation act,
                           const NormArgs& post) override {
    norm_residual(norm, hidden_);
    linear(cpu_weight(gate_up), hidden_, gate_up_, pool_);
    if (act == GateActivation::kGeluTanh) {
      geglu_tanh_fused(gate_up_, act_, pool_);
    } else {
      swiglu_fused(gate_up_, act_, pool_);
    }
    linear(cpu_weight(down), act_, proj_, pool_);
    all_reduce(proj_);
    rms_norm(proj_, w_.vector(post.weight), post.eps, proj_, pool_);
    pending_add_ = true;
  }

  void final_logits_softcap(const NormArgs& norm, LinearId w, float cap) override {
    final_logits(norm, w);
    if (!(cap > 0.0f) || logits_.numel() == 0) return;
    float* l = logits_.data_as<float>();
    const float inv = 1.0f / cap;
    pool_.parallel_for(logits_.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) l[i] = cap * std::tanh(l[i] * inv);
    });
  }

  void linear_residual(LinearId w) override {
    linear(cpu_weight(w), attn_, proj_, pool_);
    all_reduce(proj_);
    pending_add_ = true;
  }

  void gated_mlp(const NormArgs& norm, LinearId gate_up, LinearId down) override {
    norm_residual(norm, hidden_);
    linear(cpu_weight(gate_up), hidden_, gate_up_, pool_);
    swiglu_fused(gate_up_, act_, pool_);
    linear(cpu_weight(down), act_, proj_, pool_);
    all_reduce(proj_);
    pending_add_ = true;
  }

  void moe_mlp(const NormArgs& norm, const MoeArgs& a) override {
    norm_residual(norm, hidden_);
    const ExpertSet& set = w_.expert_set(a.experts);
    MoeWeights mw;
    mw.router = &cpu_weight(a.router);
    mw.experts.reserve(static_cast<size_t>(set.num_experts()));
    for (int64_t e = 0; e < set.num_experts(); ++e) mw.experts.push_back({&cpu_weight(set.gate_up[e]), &cpu_weight(set.down[e])});
    mw.top_k = a.top_k;
    mw.normalize_top_k = a.normalize_top_k;
    if (a.shared_gate_up.defined()) {
      mw.shared_gate_up = &cpu_weight(a.shared_gate_up);
      mw.shared_down = &cpu_weight(a.shared_down);
      mw.shared_gate = &cpu_weight(a.shared_gate);
    }
    pagoda::moe_mlp(mw, hidden_, proj_, ws_->moe, pool_);
    all_reduce(proj_);  // each rank's experts hold a slice of their width: partial sums
    pending_add_ = true;
  }

  void final_logits(const NormArgs& norm, LinearId w) override {
    const int64_t n = static_cast<int64_t>(batch_.logits_rows.size());
    const int64_t V = tp_ != nullptr ? tp_->vocab_size : c_.vocab_size;
    if (logits_.dtype() != DType::kF32 || logits_.ndim() != 2 || logits_.dim(0) != n || logits_.dim(1) != V)
      logits_ = Tensor::empty(DType::kF32, {n, V});
    if (n == 0) return;
    flush_residual();
    Tensor last = ws_->last_hidden.slice_rows(0, n);
    gather_rows(residual_, batch_.logits_rows, last);
    rms_norm(last, w_.vector(norm.weight), norm.eps, last, pool_);
    if (tp_ == nullptr) {
      linear(cpu_weight(w), last, logits_, pool_);
      return;
    }
    // The rank's vocabulary columns, then every rank's at its offset.
    Tensor part = Tensor::empty(DType::kF32, {n, c_.vocab_size});
    linear(cpu_weight(w), last, part, pool_);
    tp_->comm->all_gather_columns(part.data_as<const float>(), n, c_.vocab_size, tp_->vocab_begin, logits_.data_as<float>(), V);
  }

  void end_layer(int64_t layer) override {
    if (!hook_) return;
    flush_residual();
    hook_(layer, residual_);
  }

  // The residual stream of a range after the first: `in` [T, D] f32.
  void set_residual(const Tensor& in) {
    PAGODA_CHECK(in.dtype() == DType::kF32 && in.ndim() == 2 && in.dim(0) == residual_.dim(0) && in.dim(1) == c_.hidden_size,
                 "layer split: input residual {} for {} tokens of hidden size {}", in.shape_string(), residual_.dim(0),
                 c_.hidden_size);
    std::memcpy(residual_.data(), in.data(), static_cast<size_t>(residual_.nbytes()));
    pending_add_ = false;
  }
  // After a range before the last: the residual stream complete in ws.residual.
  void finish_residual() { flush_residual(); }

 private:
  const LinearWeight& cpu_weight(LinearId id) const {
    const LinearEntry& e = w_.linear(id);
    PAGODA_CHECK(e.cpu != nullptr, "linear '{}' was loaded for a device executor: no CPU kernels", e.name);
    return *e.cpu;
  }
  // Tensor parallelism: `t` [T, D] f32 summed over the ranks (in place); nothing on one rank.
  void all_reduce(Tensor& t) {
    if (tp_ != nullptr) tp_->comm->all_reduce_sum(t.data_as<float>(), t.numel());
  }
  // out = rms_norm(residual), the deferred projection added into the residual first.
  void norm_residual(const NormArgs& norm, Tensor& out) {
    if (pending_add_) {
      add_rms_norm(residual_, proj_, w_.vector(norm.weight), norm.eps, out, pool_);
      pending_add_ = false;
    } else {
      rms_norm(residual_, w_.vector(norm.weight), norm.eps, out, pool_);
    }
  }
  void flush_residual() {
    if (!pending_add_) return;
    add_inplace(residual_, proj_, pool_);
    pending_add_ = false;
  }

  const Model& m_;
  const ModelConfig& c_;
  const ModelWeights& w_;
  const ForwardBatch& batch_;
  KvCacheStorage& kv_;
  Tensor& logits_;
  ThreadPool& pool_;
  const LayerHook& hook_;
  const TensorParallelRank* tp_;  // null: one rank
  ForwardWorkspace* ws_ = nullptr;
  // Views of the workspace's first T rows.
  Tensor residual_, hidden_, qkv_, q_, k_, v_, attn_, proj_, gate_up_, act_;
  std::vector<AttentionSeq> seqs_;
  bool pending_add_ = false;  // proj_ still has to be added into residual_
};

}  // namespace

int64_t ForwardWorkspace::bytes() const {
  int64_t b = 0;
  for (const Tensor* t : {&residual, &hidden, &qkv, &q, &k, &v, &attn, &proj, &gate_up, &act, &last_hidden})
    if (t->defined()) b += t->nbytes();
  return b;
}

void cpu_forward(const Model& model, const ForwardBatch& batch, KvCacheStorage& kv, ForwardWorkspace& ws, Tensor& logits,
                 ThreadPool& pool, const LayerHook& hook, LayerRange range, const Tensor* residual_in,
                 const TensorParallelRank* tp) {
  const int64_t L = model.config().num_layers;
  PAGODA_CHECK(tp == nullptr || range.whole(L), "tensor parallelism with a layer split");
  CpuLayerOps ops(model, batch, kv, ws, logits, pool, hook, tp);
  if (range.whole(L)) {
    PAGODA_CHECK(residual_in == nullptr, "an input residual for the whole model's forward pass");
    model.forward(ops);
    return;
  }
  PAGODA_CHECK(range.first() == (residual_in == nullptr), "{}: an input residual is needed exactly after layer 0",
               range.to_string(L));
  if (residual_in != nullptr) ops.set_residual(*residual_in);
  LayerRangeOps ranged(ops, range, L);
  model.forward(ranged);
  if (!range.last(L)) ops.finish_residual();
}

}  // namespace pagoda
