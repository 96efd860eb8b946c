// CudaExecutor::DraftRunner: a draft head's passes (model/draft_head.h: EAGLE-3 heads, MiMo MTP
// modules; runtime/draft_head_forward.h is the CPU reference) on the executor's device and stream,
// between the target's steps. The head's matrices are uploaded in the compute dtype, its one-layer
// KV cache lives in device memory (the compute dtype), the target's embedding (and for MTP its
// output head) are the executor's. A pass copies its inputs up (tokens, positions, slots, the rows'
// attention layout, the target's captured rows or the head's own hidden rows), runs the head with
// the executor's step ops (embedding, rms_norm, the matmul dispatch, RoPE + KV write, split-KV row
// attention over the head's cache, SwiGLU), and copies back the logits rows and their hidden
// outputs; the argmax and the d2t mapping run on the host. Not thread-safe (the engine-core thread).

#include <cmath>

#include "backend/cuda/cuda_executor_impl.h"
#include "model/draft_head.h"
#include "runtime/draft_head_device_memory.h"
#include "runtime/draft_head_forward.h"

namespace pagoda::cuda_impl {

class CudaExecutor::DraftRunner final : public DraftHeadRunner {
 public:
  DraftRunner(CudaExecutor& ex, const DraftHead& head, int64_t num_blocks, int64_t block_size)
      : e_(ex), head_(head), num_blocks_(num_blocks), block_size_(block_size) {}

  // Uploads the weights and allocates the cache; false (with `why`) when it cannot.
  bool init(std::string& why);
  void forward(const DraftHeadPass& pass) override;
  const Tensor& logits() const override { return logits_; }
  const std::vector<int32_t>& drafts() const override { return drafts_; }
  const Tensor& out_hidden() const override { return out_; }

 private:
  // A dense [N, K] matrix in the compute dtype, the parts stacked along N.
  struct Dense {
    DeviceBuffer buf;
    int64_t n = 0, k = 0;
  };
  void upload(cuda::WeightUploader& up, const std::vector<Tensor>& parts, Dense& d);
  void upload_vec(cuda::WeightUploader& up, const Tensor& v, DeviceBuffer& d);
  // The pass buffers hold at least T rows and m logits rows.
  void ensure(int64_t T, int64_t m, int64_t bt_cols, int64_t seqs);
  void linear(const void* x, const Dense& w, int64_t M, void* y, GemmOut mode) {
    e_.dense_linear(x, w.buf.get(), w.n, w.k, M, y, mode);
  }
  const float* vec(const DeviceBuffer& b) const { return b.as<float>(); }

  CudaExecutor& e_;
  const DraftHead& head_;
  int64_t num_blocks_, block_size_;
  int64_t D_ = 0, H_ = 0, KVH_ = 0, Dh_ = 0, Q_ = 0, Nqkv_ = 0, F_ = 0, Dv_ = 0, Win_ = 0;
  size_t ae_ = 4;  // bytes of a compute-dtype element
  Dense fc_, input_proj_, qkv_, o_, gate_up_, down_, lm_head_;
  DeviceBuffer input_norm_, hidden_norm_, layer_norm_, post_norm_, final_norm_, target_norm_, qkv_bias_;
  DeviceBuffer embed_own_;  // the head's own embedding ([V, D] act) where it is not the target's
  const void* embed_ = nullptr;
  DeviceBuffer rope_cos_, rope_sin_;
  DeviceBuffer kv_;
  cuda::KvCacheLayer cache_;

  // Pass buffers (rows capacity cap_, logits rows mcap_, block-table and logits-row entries btcap_).
  int64_t cap_ = 0, mcap_ = 0, btcap_ = 0;
  PinnedBuffer in_host_, bt_host_, logits_host_, hidden_host_;
  DeviceBuffer in_dev_, bt_dev_, feat_, feat_act_, h_, emb_, a_emb_, a_h_, cat_, r_, x_, qkv_buf_, q_, attn_, gu_, act_;
  DeviceBuffer fin_, fin_act_, logits_dev_;
  Tensor logits_, out_;
  std::vector<int32_t> drafts_;
};

void CudaExecutor::DraftRunner::upload(cuda::WeightUploader& up, const std::vector<Tensor>& parts, Dense& d) {
  d.n = 0;
  d.k = parts.at(0).dim(1);
  for (const Tensor& p : parts) d.n += p.dim(0);
  d.buf.reset(static_cast<size_t>(d.n * d.k) * ae_);
  int64_t row = 0;
  for (const Tensor& p : parts) {
    PAGODA_CHECK(p.data() != nullptr && p.dim(1) == d.k, "draft head matrix part without data or of another width");
    up.upload(p, e_.act_, d.buf.as<uint8_t>() + static_cast<size_t>(row * d.k) * ae_);
    row += p.dim(0);
  }
}

void CudaExecutor::DraftRunner::upload_vec(cuda::WeightUploader& up, const Tensor& v, DeviceBuffer& d) {
  if (!v.defined()) return;
  PAGODA_CHECK(v.dtype() == DType::kF32, "draft head vector: expected f32");
  d.reset(static_cast<size_t>(v.numel()) * 4);
  up.upload_f32(v.data_as<float>(), v.numel(), d.get());
}

bool CudaExecutor::DraftRunner::init(std::string& why) {
  const ModelConfig& c = head_.config;
  const bool eagle = head_.kind == DraftHeadKind::kEagle3;
  D_ = c.hidden_size;
  H_ = c.num_heads;
  KVH_ = c.num_kv_heads;
  Dh_ = c.head_dim;
  Q_ = c.q_size();
  Nqkv_ = Q_ + 2 * c.kv_size();
  F_ = c.intermediate_size;
  Dv_ = head_.draft_vocab;
  Win_ = eagle ? 2 * D_ : D_;
  ae_ = static_cast<size_t>(elem_bytes(e_.act_));
  if (e_.act_ != DType::kBF16 && e_.act_ != DType::kF32) {
    why = fmt::format("compute dtype {} (the device head runs in bf16 or f32)", dtype_name(e_.act_));
    return false;
  }
  if (D_ != e_.d_.D || head_.target_hidden != e_.d_.D) {
    why = "the head's hidden size differs from the target's";
    return false;
  }
  // The split-KV attention reuses the executor's split workspace (sized for the target's heads).
  if (H_ > e_.d_.H || H_ * Dh_ > e_.d_.H * e_.d_.Dh || Dh_ > 256) {
    why = "the head has more attention heads or a wider head than the target";
    return false;
  }
  const Tensor& embd = e_.model_.weights().token_embd;
  if (head_.embedding.data() == embd.data()) {
    embed_ = e_.embed_.get();
  } else if (head_.embedding.defined()) {
    // Below, after the uploader exists.
  } else {
    why = "the head has no embedding";
    return false;
  }
  if (!eagle) {
    const cuda::DeviceWeight& w = e_.weight(e_.model_.weights().output);
    if (w.k != D_ || w.n != Dv_) {
      why = "the target's output head does not match the module's vocabulary";
      return false;
    }
  }
  // The bytes the memory plan counts for a device head (runtime/draft_head_device_memory.h).
  const DraftHeadDeviceMemory mem = draft_head_device_memory(head_, e_.act_, embed_ != nullptr, 0, 0);
  const int64_t kv_bytes = num_blocks_ * block_size_ * mem.kv_bytes_per_token;
  const int64_t weight_bytes = mem.weights;
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  // Head weights, its cache, and a margin for the pass buffers.
  const int64_t need = kv_bytes + weight_bytes + (int64_t{256} << 20);
  if (need > static_cast<int64_t>(free_bytes)) {
    why = fmt::format("{:.2f} GiB of device memory needed (weights {:.2f}, cache {:.2f}), {:.2f} GiB free: lower "
                      "--gpu-memory-utilization",
                      need / 1073741824.0, weight_bytes / 1073741824.0, kv_bytes / 1073741824.0, free_bytes / 1073741824.0);
    return false;
  }
  CUDA_CHECK(cudaStreamSynchronize(e_.stream_));
  {
    cuda::WeightUploader up(e_.stream_);
    if (eagle) {
      upload(up, head_.matrices.fc, fc_);
      upload(up, head_.matrices.lm_head, lm_head_);
      if (fc_.n != D_ || fc_.k != static_cast<int64_t>(head_.capture_after.size()) * head_.target_hidden) {
        why = "fc's width is not the captured states'";
        return false;
      }
    } else {
      upload(up, head_.matrices.input_proj, input_proj_);
    }
    upload(up, head_.matrices.qkv, qkv_);
    upload(up, head_.matrices.o, o_);
    upload(up, head_.matrices.gate_up, gate_up_);
    upload(up, head_.matrices.down, down_);
    upload_vec(up, head_.input_norm, input_norm_);
    upload_vec(up, head_.hidden_norm, hidden_norm_);
    upload_vec(up, head_.layer_norm, layer_norm_);
    upload_vec(up, head_.post_norm, post_norm_);
    upload_vec(up, head_.final_norm, final_norm_);
    upload_vec(up, head_.target_norm, target_norm_);
    upload_vec(up, head_.qkv_bias, qkv_bias_);
    if (embed_ == nullptr) {
      embed_own_.reset(static_cast<size_t>(head_.embedding.dim(0) * head_.embedding.dim(1)) * ae_);
      up.upload(head_.embedding, e_.act_, embed_own_.get());
      embed_ = embed_own_.get();
    }
    const RopeTable& rope = head_.rope;
    const int64_t n = rope.max_positions() * (rope.rope_dim() / 2);
    rope_cos_.reset(static_cast<size_t>(n) * 4);
    rope_sin_.reset(static_cast<size_t>(n) * 4);
    up.upload_f32(rope.cos(0), n, rope_cos_.get());
    up.upload_f32(rope.sin(0), n, rope_sin_.get());
  }
  if (qkv_.k != Win_ || qkv_.n != Nqkv_ || o_.n != D_ || o_.k != Q_ || gate_up_.n != 2 * F_ || down_.k != F_ ||
      (eagle && lm_head_.n != Dv_) || (!eagle && (input_proj_.n != D_ || input_proj_.k != 2 * D_))) {
    why = "the head's matrices do not have its config's shapes";
    return false;
  }
  kv_.reset(static_cast<size_t>(kv_bytes));
  CUDA_CHECK(cudaMemsetAsync(kv_.get(), 0, kv_.bytes(), e_.stream_));
  cache_.k = kv_.as<uint8_t>();
  cache_.v = kv_.as<uint8_t>() + kv_bytes / 2;
  cache_.dtype = e_.act_;
  cache_.num_blocks = num_blocks_;
  cache_.block_size = block_size_;
  cache_.num_kv_heads = KVH_;
  cache_.head_dim = Dh_;
  CUDA_CHECK(cudaStreamSynchronize(e_.stream_));
  return true;
}

void CudaExecutor::DraftRunner::ensure(int64_t T, int64_t m, int64_t bt_cols, int64_t seqs) {
  const bool eagle = head_.kind == DraftHeadKind::kEagle3;
  const int64_t bt_need = bt_cols * seqs + m;  // block tables, then the logits rows
  if (T > cap_ || m > mcap_ || bt_need > btcap_) CUDA_CHECK(cudaStreamSynchronize(e_.stream_));
  if (T > cap_) {
    const int64_t cap = align_up(std::max<int64_t>(T, 16), 16);
    const size_t c = static_cast<size_t>(cap);
    const int64_t W = fc_.k > 0 ? fc_.k : D_;  // a captured row's floats
    in_host_.reset(c * 6 * 4);
    in_dev_.reset(c * 6 * 4);
    feat_.reset(c * static_cast<size_t>(std::max(W, D_)) * 4);
    if (eagle) feat_act_.reset(c * static_cast<size_t>(W) * ae_);
    h_.reset(c * static_cast<size_t>(D_) * 4);
    emb_.reset(c * static_cast<size_t>(D_) * 4);
    a_emb_.reset(c * static_cast<size_t>(D_) * ae_);
    a_h_.reset(c * static_cast<size_t>(D_) * ae_);
    cat_.reset(c * static_cast<size_t>(2 * D_) * ae_);
    r_.reset(c * static_cast<size_t>(D_) * 4);
    x_.reset(c * static_cast<size_t>(D_) * ae_);
    qkv_buf_.reset(c * static_cast<size_t>(Nqkv_) * 4);
    q_.reset(c * static_cast<size_t>(Q_) * 4);
    attn_.reset(c * static_cast<size_t>(Q_) * ae_);
    gu_.reset(c * static_cast<size_t>(2 * F_) * ae_);
    act_.reset(c * static_cast<size_t>(F_) * ae_);
    cap_ = cap;
  }
  if (m > mcap_) {
    const int64_t mc = align_up(std::max<int64_t>(m, 8), 8);
    const size_t c = static_cast<size_t>(mc);
    fin_.reset(c * static_cast<size_t>(D_) * 4);
    fin_act_.reset(c * static_cast<size_t>(D_) * ae_);
    logits_dev_.reset(c * static_cast<size_t>(Dv_) * 4);
    logits_host_.reset(c * static_cast<size_t>(Dv_) * 4);
    hidden_host_.reset(c * static_cast<size_t>(D_) * 4);
    mcap_ = mc;
  }
  if (bt_need > btcap_) {
    const int64_t n = align_up(bt_need + 64, 256);
    bt_host_.reset(static_cast<size_t>(n) * 4);
    bt_dev_.reset(static_cast<size_t>(n) * 4);
    btcap_ = n;
  }
}

void CudaExecutor::DraftRunner::forward(const DraftHeadPass& p) {
  CUDA_CHECK(cudaSetDevice(e_.opt_.device));
  const bool eagle = head_.kind == DraftHeadKind::kEagle3;
  const ModelConfig& c = head_.config;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t T = static_cast<int64_t>(p.tokens.size()), m = static_cast<int64_t>(p.logits_rows.size());
  const int64_t n_seqs = static_cast<int64_t>(p.seqs.size());
  PAGODA_CHECK(T > 0 && static_cast<int64_t>(p.positions.size()) == T && static_cast<int64_t>(p.slots.size()) == T,
               "draft head pass: {} tokens, {} positions, {} slots", T, p.positions.size(), p.slots.size());
  PAGODA_CHECK((p.features != nullptr) != (p.hidden != nullptr), "draft head pass: exactly one of features and hidden");
  int64_t bt_cols = 1, max_keys = 0;
  for (const AttentionSeq& s : p.seqs) {
    bt_cols = std::max<int64_t>(bt_cols, static_cast<int64_t>(s.block_table.size()));
    max_keys = std::max<int64_t>(max_keys, s.context_len);
  }
  ensure(T, m, bt_cols, n_seqs);

  // Inputs: ids, positions, slots, row token, row sequence, row context ([cap_] i32 each); block
  // tables [n_seqs, bt_cols] then the logits rows.
  int32_t* in = in_host_.as<int32_t>();
  const size_t cap = static_cast<size_t>(cap_);
  for (int64_t t = 0; t < T; ++t) {
    in[t] = p.tokens[static_cast<size_t>(t)];
    in[cap + t] = p.positions[static_cast<size_t>(t)];
    const int64_t slot = p.slots[static_cast<size_t>(t)];
    PAGODA_CHECK(slot < (int64_t{1} << 31), "draft head slot {} exceeds int32", slot);
    in[2 * cap + t] = static_cast<int32_t>(slot);
    in[3 * cap + t] = static_cast<int32_t>(t);
    in[4 * cap + t] = 0;
    in[5 * cap + t] = 0;  // padding unless a sequence covers the row
  }
  int32_t* bt = bt_host_.as<int32_t>();
  for (int64_t s = 0; s < n_seqs; ++s) {
    const AttentionSeq& sq = p.seqs[static_cast<size_t>(s)];
    std::memset(bt + s * bt_cols, 0, static_cast<size_t>(bt_cols) * 4);
    std::memcpy(bt + s * bt_cols, sq.block_table.data(), sq.block_table.size() * 4);
    for (int32_t i = 0; i < sq.num_queries; ++i) {
      const int64_t r = sq.query_begin + i;
      PAGODA_CHECK(r >= 0 && r < T, "draft head pass: query row {} of {}", r, T);
      in[4 * cap + r] = static_cast<int32_t>(s);
      in[5 * cap + r] = sq.context_len - sq.num_queries + i + 1;
    }
  }
  int32_t* lrows = bt + n_seqs * bt_cols;
  for (int64_t i = 0; i < m; ++i) {
    lrows[i] = p.logits_rows[static_cast<size_t>(i)];
    PAGODA_CHECK(lrows[i] >= 0 && lrows[i] < T, "draft head logits row {} of {}", lrows[i], T);
  }
  cudaStream_t st = e_.stream_;
  CUDA_CHECK(cudaMemcpyAsync(in_dev_.get(), in_host_.get(), cap * 6 * 4, cudaMemcpyHostToDevice, st));
  CUDA_CHECK(cudaMemcpyAsync(bt_dev_.get(), bt_host_.get(), static_cast<size_t>(n_seqs * bt_cols + m) * 4,
                             cudaMemcpyHostToDevice, st));
  const int32_t* d_ids = in_dev_.as<int32_t>();
  const int32_t* d_pos = d_ids + cap;
  const int32_t* d_slots = d_ids + 2 * cap;
  const int32_t* d_rtok = d_ids + 3 * cap;
  const int32_t* d_rseq = d_ids + 4 * cap;
  const int32_t* d_rctx = d_ids + 5 * cap;
  const int32_t* d_bt = bt_dev_.as<int32_t>();
  const int32_t* d_lrows = d_bt + n_seqs * bt_cols;
  const size_t rowD = static_cast<size_t>(D_) * 4;

  // h: the hidden input, f32 [T, D].
  if (p.features != nullptr) {
    const int64_t W = eagle ? fc_.k : D_;
    CUDA_CHECK(cudaMemcpyAsync(feat_.get(), p.features, static_cast<size_t>(T * W) * 4, cudaMemcpyHostToDevice, st));
    if (eagle) {
      cuda::convert(feat_.get(), DType::kF32, feat_act_.get(), e_.act_, T * W, st);
      linear(feat_act_.get(), fc_, T, h_.get(), GemmOut::kStoreF32);
    } else {
      cuda::rms_norm(feat_.as<float>(), nullptr, T, D_, vec(target_norm_), static_cast<float>(head_.target_norm_eps), h_.get(),
                     DType::kF32, st);
    }
  } else {
    CUDA_CHECK(cudaMemcpyAsync(h_.get(), p.hidden, static_cast<size_t>(T) * rowD, cudaMemcpyHostToDevice, st));
  }
  // The embedding rows (MTP: zero at position 0), normed; the normed hidden; their concatenation.
  cuda::embedding(embed_, e_.act_, d_ids, T, D_, emb_.as<float>(), st);
  if (!eagle)
    for (int64_t t = 0; t < T; ++t)
      if (p.positions[static_cast<size_t>(t)] == 0) CUDA_CHECK(cudaMemsetAsync(emb_.as<float>() + t * D_, 0, rowD, st));
  cuda::rms_norm(emb_.as<float>(), nullptr, T, D_, vec(input_norm_), eps, a_emb_.get(), e_.act_, st);
  cuda::rms_norm(h_.as<float>(), nullptr, T, D_, vec(hidden_norm_), eps, a_h_.get(), e_.act_, st);
  const size_t rowA = static_cast<size_t>(D_) * ae_;
  uint8_t* cat = cat_.as<uint8_t>();
  // EAGLE-3: [emb | hidden]; MTP: [hidden | emb].
  CUDA_CHECK(cudaMemcpy2DAsync(cat, 2 * rowA, eagle ? a_emb_.get() : a_h_.get(), rowA, rowA, static_cast<size_t>(T),
                               cudaMemcpyDeviceToDevice, st));
  CUDA_CHECK(cudaMemcpy2DAsync(cat + rowA, 2 * rowA, eagle ? a_h_.get() : a_emb_.get(), rowA, rowA, static_cast<size_t>(T),
                               cudaMemcpyDeviceToDevice, st));
  const void* layer_in = cat_.get();
  if (eagle) {
    // The residual starts from h (or its normed copy, in f32).
    if (head_.norm_before_residual)
      cuda::rms_norm(h_.as<float>(), nullptr, T, D_, vec(hidden_norm_), eps, r_.get(), DType::kF32, st);
    else CUDA_CHECK(cudaMemcpyAsync(r_.get(), h_.get(), static_cast<size_t>(T) * rowD, cudaMemcpyDeviceToDevice, st));
  } else {
    linear(cat_.get(), input_proj_, T, r_.get(), GemmOut::kStoreF32);
    cuda::rms_norm(r_.as<float>(), nullptr, T, D_, vec(layer_norm_), eps, x_.get(), e_.act_, st);
    layer_in = x_.get();
  }
  // Attention: qkv (+ bias), RoPE + KV write into the head's cache, split-KV rows over it.
  linear(layer_in, qkv_, T, qkv_buf_.get(), GemmOut::kStoreF32);
  cuda::RopeKvParams rp;
  rp.qkv = qkv_buf_.as<float>();
  rp.num_tokens = T;
  rp.num_heads = H_;
  rp.head_dim = Dh_;
  rp.rope_dim = head_.rope.rope_dim();
  rp.bias = qkv_bias_.get() != nullptr ? qkv_bias_.as<float>() : nullptr;
  rp.cos = rope_cos_.as<float>();
  rp.sin = rope_sin_.as<float>();
  rp.interleaved = head_.rope.layout() == RopeLayout::kInterleaved;
  rp.positions = d_pos;
  rp.slots = d_slots;
  rp.q_out = q_.as<float>();
  rp.cache = cache_;
  cuda::rope_kv_write(rp, st);
  cuda::RowAttentionParams ap;
  ap.q = q_.as<float>();
  ap.q_stride = Q_;
  ap.out = attn_.get();
  ap.out_dtype = e_.act_;
  ap.out_stride = Q_;
  ap.block_tables = d_bt;
  ap.bt_stride = bt_cols;
  ap.cache = cache_;
  ap.num_heads = H_;
  ap.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh_)));
  ap.max_keys = max_keys;
  ap.num_sms = e_.sms_;
  ap.part_o = e_.part_o_.as<float>();
  ap.part_ml = e_.part_ml_.as<float>();
  ap.counters = e_.att_counters_.as<int>();
  for (int64_t r0 = 0; r0 < T; r0 += e_.caps_.att_rows) {
    cuda::RowAttentionParams cp = ap;
    cp.num_rows = std::min(e_.caps_.att_rows, T - r0);
    cp.row_token = d_rtok + r0;
    cp.row_seq = d_rseq + r0;
    cp.row_ctx = d_rctx + r0;
    cuda::row_attention(cp, st);
  }
  linear(attn_.get(), o_, T, r_.get(), GemmOut::kAddF32);
  // The MLP: r += down(silu(gate(n)) * up(n)), n = rms(r) * w_post.
  cuda::rms_norm(r_.as<float>(), nullptr, T, D_, vec(post_norm_), eps, x_.get(), e_.act_, st);
  linear(x_.get(), gate_up_, T, gu_.get(), GemmOut::kStoreAct);
  cuda::swiglu(gu_.get(), T, F_, act_.get(), e_.act_, st);
  linear(act_.get(), down_, T, r_.get(), GemmOut::kAddF32);

  drafts_.assign(static_cast<size_t>(m), 0);
  if (m == 0) {
    CUDA_CHECK(cudaStreamSynchronize(st));
    logits_ = Tensor::view(DType::kF32, {0, Dv_}, logits_host_.get(), nullptr);
    out_ = Tensor::view(DType::kF32, {0, D_}, hidden_host_.get(), nullptr);
    return;
  }
  // The logits rows: out = rms(r[rows]) * w_final; logits = lm_head(out) (MTP: the target's).
  cuda::rms_norm(r_.as<float>(), d_lrows, m, D_, vec(final_norm_), eps, fin_.get(), DType::kF32, st);
  cuda::convert(fin_.get(), DType::kF32, fin_act_.get(), e_.act_, m * D_, st);
  if (eagle) linear(fin_act_.get(), lm_head_, m, logits_dev_.get(), GemmOut::kStoreF32);
  else e_.linear(fin_act_.get(), e_.weight(e_.model_.weights().output), m, logits_dev_.get(), GemmOut::kStoreF32);
  CUDA_CHECK(cudaMemcpyAsync(logits_host_.get(), logits_dev_.get(), static_cast<size_t>(m * Dv_) * 4,
                             cudaMemcpyDeviceToHost, st));
  // The hidden outputs: EAGLE-3 the pre-norm rows of r, MTP the normed ones.
  if (eagle) {
    for (int64_t i = 0; i < m; ++i)
      CUDA_CHECK(cudaMemcpyAsync(hidden_host_.as<float>() + i * D_, r_.as<float>() + static_cast<int64_t>(lrows[i]) * D_,
                                 rowD, cudaMemcpyDeviceToHost, st));
  } else {
    CUDA_CHECK(cudaMemcpyAsync(hidden_host_.get(), fin_.get(), static_cast<size_t>(m) * rowD, cudaMemcpyDeviceToHost, st));
  }
  CUDA_CHECK(cudaStreamSynchronize(st));
  logits_ = Tensor::view(DType::kF32, {m, Dv_}, logits_host_.get(), nullptr);
  out_ = Tensor::view(DType::kF32, {m, D_}, hidden_host_.get(), nullptr);
  draft_argmax(logits_, head_.draft_to_target, drafts_);
}

std::unique_ptr<DraftHeadRunner> CudaExecutor::make_draft_head_runner(const DraftHead& head, int64_t num_blocks,
                                                                     int64_t block_size, std::string& why) {
  if (partial()) {
    why = "the CUDA part of a layer split does not hold the output head";
    return nullptr;
  }
  if (tp_ != nullptr) {
    why = "under tensor parallelism each rank holds a slice of the embedding and the output head";
    return nullptr;
  }
  CUDA_CHECK(cudaSetDevice(opt_.device));
  auto r = std::make_unique<DraftRunner>(*this, head, num_blocks, block_size);
  if (!r->init(why)) return nullptr;
  return r;
}

}  // namespace pagoda::cuda_impl
