#include "runtime/draft_head_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/check.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/rope.h"

namespace pagoda {

DraftHeadForward::DraftHeadForward(const DraftHead& head, int64_t num_blocks, int64_t block_size, DType kv_dtype,
                                     ThreadPool& pool, DraftOutputHead output_head)
    : head_(head), pool_(pool), output_head_(std::move(output_head)), kv_(head.config, num_blocks, block_size, kv_dtype) {
  PAGODA_CHECK(head.lm_head != nullptr || output_head_, "a draft head without an lm_head needs an output head");
}

void DraftHeadForward::ensure(int64_t T) {
  if (capacity_ >= T) return;
  const ModelConfig& c = head_.config;
  const int64_t cap = std::max<int64_t>(T, 16), D = c.hidden_size;
  auto f32 = [&](int64_t n) { return Tensor::empty(DType::kF32, {cap, n}); };
  h_ = f32(D);
  emb_ = f32(D);
  cat_ = f32(2 * D);
  qkv_ = f32(c.q_size() + 2 * c.kv_size());
  q_ = f32(c.q_size());
  k_ = f32(c.kv_size());
  v_ = f32(c.kv_size());
  attn_ = f32(c.q_size());
  r_ = f32(D);
  n_ = f32(D);
  gate_up_ = f32(2 * c.intermediate_size);
  act_ = f32(c.intermediate_size);
  proj_ = f32(D);
  capacity_ = cap;
}

namespace {
// out[t] = concat(a[t], b[t]); a, b: [T, D], out: [T, 2 D].
void concat_rows(const Tensor& a, const Tensor& b, Tensor& out, int64_t D) {
  for (int64_t t = 0; t < a.dim(0); ++t) {
    float* dst = out.data_as<float>() + t * 2 * D;
    std::memcpy(dst, a.data_as<const float>() + t * D, static_cast<size_t>(D) * sizeof(float));
    std::memcpy(dst + D, b.data_as<const float>() + t * D, static_cast<size_t>(D) * sizeof(float));
  }
}
}  // namespace

void DraftHeadForward::forward(const DraftHeadPass& p) {
  const ModelConfig& c = head_.config;
  const int64_t T = static_cast<int64_t>(p.tokens.size()), D = c.hidden_size;
  PAGODA_CHECK(T > 0 && static_cast<int64_t>(p.positions.size()) == T && static_cast<int64_t>(p.slots.size()) == T,
               "draft head pass: {} tokens, {} positions, {} slots", T, p.positions.size(), p.slots.size());
  PAGODA_CHECK((p.features != nullptr) != (p.hidden != nullptr), "draft head pass: exactly one of features and hidden");
  ensure(T);
  auto rows = [T](const Tensor& t) { return t.slice_rows(0, T); };
  Tensor h = rows(h_), emb = rows(emb_), cat = rows(cat_), qkv = rows(qkv_), q = rows(q_), k = rows(k_), v = rows(v_);
  Tensor attn = rows(attn_), r = rows(r_), n = rows(n_), gate_up = rows(gate_up_), act = rows(act_), proj = rows(proj_);

  if (head_.kind == DraftHeadKind::kEagle3) {
    // h: fc(target states) or the given hidden rows; a = concat(rms(emb) * w_in, rms(h) * w_hidden);
    // the residual starts from h (or its norm).
    if (p.features != nullptr) {
      linear(*head_.fc, p.features, T, h.data_as<float>(), pool_);
    } else {
      std::memcpy(h.data(), p.hidden, static_cast<size_t>(T * D) * sizeof(float));
    }
    embedding_lookup(head_.embedding, p.tokens, emb, pool_);
    rms_norm(emb, head_.input_norm, c.rms_norm_eps, emb, pool_);
    rms_norm(h, head_.hidden_norm, c.rms_norm_eps, n, pool_);
    concat_rows(emb, n, cat, D);
    if (head_.norm_before_residual) std::memcpy(r.data(), n.data(), static_cast<size_t>(T * D) * sizeof(float));
    else std::memcpy(r.data(), h.data(), static_cast<size_t>(T * D) * sizeof(float));
  } else {
    // MTP: h = the target's final normed state or the given hidden rows; z = input_proj(concat(
    // rms(h) * w_hidden, rms(e) * w_token)), e zero at position 0; a = rms(z) * w_in over [T, D].
    if (p.features != nullptr) {
      const Tensor f = Tensor::view(DType::kF32, {T, D}, p.features, nullptr);
      rms_norm(f, head_.target_norm, head_.target_norm_eps, h, pool_);
    } else {
      std::memcpy(h.data(), p.hidden, static_cast<size_t>(T * D) * sizeof(float));
    }
    embedding_lookup(head_.embedding, p.tokens, emb, pool_);
    for (int64_t t = 0; t < T; ++t)
      if (p.positions[static_cast<size_t>(t)] == 0) std::memset(emb.data_as<float>() + t * D, 0, static_cast<size_t>(D) * sizeof(float));
    rms_norm(emb, head_.input_norm, c.rms_norm_eps, emb, pool_);
    rms_norm(h, head_.hidden_norm, c.rms_norm_eps, n, pool_);
    concat_rows(n, emb, cat, D);
    linear(*head_.input_proj, cat, r, pool_);
    rms_norm(r, head_.layer_norm, c.rms_norm_eps, n, pool_);
    cat = n;  // the layer's input, [T, D]
  }
  linear(*head_.qkv, cat, qkv, pool_);
  if (head_.qkv_bias.defined()) add_bias(qkv, head_.qkv_bias, pool_);
  split_columns(qkv, {&q, &k, &v}, pool_);
  RopeKvWriteParams rp;
  rp.q = &q;
  rp.k = &k;
  rp.v = &v;
  rp.positions = p.positions;
  rp.slots = p.slots;
  rp.rope = &head_.rope;
  rp.num_heads = c.num_heads;
  rp.cache = kv_.layer(0);
  rope_kv_write(rp, pool_);
  PagedAttentionParams ap;
  ap.q = &q;
  ap.out = &attn;
  ap.seqs = p.seqs;
  ap.cache = kv_.layer(0);
  ap.num_heads = c.num_heads;
  ap.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  paged_attention(ap, pool_);
  linear(*head_.o, attn, proj, pool_);
  add_inplace(r, proj, pool_);
  // g = r + mlp(rms(r) * w_post), in r.
  rms_norm(r, head_.post_norm, c.rms_norm_eps, n, pool_);
  linear(*head_.gate_up, n, gate_up, pool_);
  swiglu_fused(gate_up, act, pool_);
  linear(*head_.down, act, proj, pool_);
  add_inplace(r, proj, pool_);

  const int64_t m = static_cast<int64_t>(p.logits_rows.size());
  if (!out_.defined() || out_.dim(0) != m) {
    out_ = Tensor::empty(DType::kF32, {m, D});
    last_ = Tensor::empty(DType::kF32, {m, D});
    logits_ = Tensor::empty(DType::kF32, {m, head_.draft_vocab});
  }
  drafts_.assign(static_cast<size_t>(m), 0);
  if (m == 0) return;
  gather_rows(r, p.logits_rows, last_);
  rms_norm(last_, head_.final_norm, c.rms_norm_eps, out_, pool_);
  // EAGLE-3 feeds the pre-norm g back, MTP the normed output; the logits read the normed one.
  if (head_.lm_head != nullptr) linear(*head_.lm_head, out_, logits_, pool_);
  else output_head_(out_.data_as<const float>(), m, logits_.data_as<float>());
  if (head_.kind == DraftHeadKind::kEagle3) std::swap(out_, last_);
  draft_argmax(logits_, head_.draft_to_target, drafts_);
}

void draft_argmax(const Tensor& logits, const std::vector<int32_t>& draft_to_target, std::vector<int32_t>& drafts) {
  const int64_t m = logits.dim(0), dv = logits.dim(1);
  drafts.assign(static_cast<size_t>(m), 0);
  for (int64_t i = 0; i < m; ++i) {
    const float* row = logits.data_as<const float>() + i * dv;
    const int64_t d = std::max_element(row, row + dv) - row;
    drafts[static_cast<size_t>(i)] = draft_to_target[static_cast<size_t>(d)];
  }
}

}  // namespace pagoda
