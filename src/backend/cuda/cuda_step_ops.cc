// The layer ops of one forward pass (T tokens) on the CUDA executor's buffers and the kernels they
// launch:
//   embed              embedding -> residual f32 [T, D]
//   norm_qkv           rms_norm -> hidden (act) ; QKV matmul -> qkv f32
//   rope_kv_attention  rope_kv_write (bias, q/k norm, RoPE, K/V into the cache) -> q f32 ;
//                      attention (split-KV rows and/or tensor-core prefill tiles) -> attn (act)
//                      (decode steps on the SIMT split-KV kernel: rope_kv_write runs inside it)
//   linear_residual    matmul adding into residual
//   gated_mlp          rms_norm -> hidden ; gate/up matmul + SwiGLU -> act ; down adds into residual
//   final_logits       rms_norm of the rows whose logits are wanted -> lm_head -> logits f32
// Matmul dispatch (on the weight's device format, backend/cuda/device_weight.h): batch-invariant
// mode -> SIMT GEMM; bf16 with few rows -> our GEMV (RMSNorm fused into the QKV / gate-up /
// lm_head GEMVs, SwiGLU into gate/up); otherwise cuBLASLt (residual add as its beta = 1 epilogue).
// FP8 weights: the FP8 GEMV (bf16 activations; SwiGLU fused) for few rows and in batch-invariant
// mode, else per-token FP8 activations and cuBLASLt's FP8 GEMM (residual add as its epilogue).
// Native quantized (GGUF-block) weights: the int8 GEMV for few rows (RMSNorm fused into the q8
// activation quantization before the QKV / gate-up / lm_head GEMVs: cuda::rms_norm_q8; SwiGLU into
// gate/up), the tensor-core matmul up to quant_mma_max_rows, else dequantized for cuBLASLt.
// 2:4 sparse weights (tuning sparsity): our 2:4 GEMV below tuning.sparse_min_rows rows (SwiGLU
// fused), cuSPARSELt's sparse GEMM from there.
// Kernel choices and diagnostics come from CudaExecutorOptions::tuning.

#include "backend/cuda/cuda_executor_impl.h"
#include "backend/cuda/gather_columns.h"
#include "common/log.h"
#include "model/layer_range_ops.h"

namespace pagoda::cuda_impl {

void CudaExecutor::linear(const void* x, const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode) {
  if (M <= 0) return;
  if (w.input_order.get() != nullptr) {
    // Act-order: the inputs in the weight's column order (gather_scratch_ holds the step's tokens).
    PAGODA_CHECK(gather_scratch_.bytes() >= static_cast<size_t>(M * w.k * elem_bytes(act_)), "act-order gather of {} x {} "
                 "exceeds its scratch", M, w.k);
    cuda::gather_columns(x, act_, M, w.k, w.input_order.as<int32_t>(), gather_scratch_.get(), stream_);
    x = gather_scratch_.get();
  }
  if (w.fp8()) return fp8_linear(x, w, M, y, mode);
  if (w.quantized()) return quant_linear(x, w, M, y, mode);
  if (w.sparse != nullptr) return sparse_linear(x, w, M, y, mode);
  PAGODA_CHECK(w.uniform() && w.format() == act_, "weight format {} has no kernels for compute dtype {}",
               dtype_name(w.format()), dtype_name(act_));
  dense_linear(x, w.data(), w.n, w.k, M, y, mode);
}

void CudaExecutor::dense_linear(const void* x, const void* w, int64_t N, int64_t K, int64_t M, void* y, GemmOut mode) {
  if (opt_.batch_invariant) {
    cuda::gemm_simt(x, w, act_, M, N, K, y, N, mode, stream_);
  } else if (mode == GemmOut::kSwiGlu ||
             (act_ == DType::kBF16 && M <= opt_.tuning.gemv_max_rows && cuda::gemv_supported(M, K))) {
    PAGODA_CHECK(act_ == DType::kBF16 && cuda::gemv_supported(M, K), "the fused SwiGLU matmul is the bf16 GEMV's");
    cuda::gemv_bf16(x, w, M, N, K, y, mode == GemmOut::kSwiGlu ? N / 2 : N, mode, stream_);
  } else {
    const bool f32_out = mode == GemmOut::kStoreF32 || mode == GemmOut::kAddF32;
    blas_->matmul(x, w, act_, M, N, K, y, f32_out ? DType::kF32 : act_, mode == GemmOut::kAddF32, stream_);
  }
}

void CudaExecutor::fp8_linear(const void* x, const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode) {
  PAGODA_CHECK(act_ == DType::kBF16 && w.uniform(), "an FP8 weight is one segment over bf16 activations");
  const cuda::DeviceWeightSegment& seg = w.segments.front();
  const float* w_scale = cuda::fp8_scales(seg, w.k);
  const int64_t N = w.n, K = w.k;
  const bool f32_out = mode == GemmOut::kStoreF32 || mode == GemmOut::kAddF32;
  if (quant_gemv(M, w)) {
    const int64_t ldy = mode == GemmOut::kSwiGlu ? N / 2 : N;
    const int64_t out_elem = f32_out ? 4 : 2;
    for (int64_t m0 = 0; m0 < M; m0 += cuda::kFp8GemvMaxM)
      cuda::gemv_fp8(static_cast<const uint8_t*>(x) + m0 * K * 2, seg.data, w_scale,
                     std::min<int64_t>(cuda::kFp8GemvMaxM, M - m0), N, K, static_cast<uint8_t*>(y) + m0 * ldy * out_elem,
                     ldy, mode, stream_);
    return;
  }
  PAGODA_CHECK(M <= fp8_rows_cap_, "FP8 activations of {} rows exceed their scratch of {}", M, fp8_rows_cap_);
  cuda::quantize_activations_fp8(x, act_, M, K, fp8_xq_, fp8_xs_, stream_);
  fp8_gemm(w, M, y, mode);
}

bool CudaExecutor::fp8_norm_quantized(const cuda::DeviceWeight& w, int64_t M, const float* x, const int32_t* rows,
                                      const float* norm_weight, float eps) {
  if (!w.fp8() || quant_gemv(M, w) || M > fp8_rows_cap_) return false;
  return cuda::rms_norm_fp8(x, rows, M, w.k, norm_weight, eps, fp8_xq_, fp8_xs_, stream_);
}

void CudaExecutor::fp8_gemm(const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode) {
  PAGODA_CHECK(mode != GemmOut::kSwiGlu, "the FP8 GEMM has no fused SwiGLU");
  const cuda::DeviceWeightSegment& seg = w.segments.front();
  const float* w_scale = cuda::fp8_scales(seg, w.k);
  const int64_t N = w.n, K = w.k;
  const bool f32_out = mode == GemmOut::kStoreF32 || mode == GemmOut::kAddF32;
  if (blas_->matmul_fp8(fp8_xq_, fp8_xs_, seg.data, w_scale, M, N, K, y, f32_out ? DType::kF32 : DType::kBF16,
                        mode == GemmOut::kAddF32, stream_))
    return;
  // No outer-vector FP8 kernel in this cuBLAS for the shape: the unscaled GEMM, then our scaling.
  if (!fp8_unscaled_logged_) {
    log_warn("cuda", "cuBLASLt has no FP8 GEMM with outer-vector scales for M={} N={} K={}: the FP8 matmuls run "
             "unscaled with a scaling kernel after them", M, N, K);
    fp8_unscaled_logged_ = true;
  }
  const int64_t rows = cuda::QuantScratch::kFp8UnscaledRows, out_elem = f32_out ? 4 : 2;
  for (int64_t m0 = 0; m0 < M; m0 += rows) {
    const int64_t m = std::min(rows, M - m0);
    blas_->matmul_fp8_unscaled(fp8_xq_ + m0 * K, seg.data, m, N, K, fp8_acc_, stream_);
    cuda::scale_fp8_output(fp8_acc_, m, N, fp8_xs_ + m0, w_scale, static_cast<uint8_t*>(y) + m0 * N * out_elem, N, mode,
                           stream_);
  }
}

namespace {

// matmul(segment, out, ldy, mode) per segment of w, its outputs at the segment's columns of y (M
// rows); a SwiGLU over gate/up in two formats goes through gu (the matmuls' kStoreAct outputs [M, N])
// and the swiglu kernel.
template <class Matmul>
void per_segment(const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode, void* gu, DType act, cudaStream_t s,
                 Matmul&& matmul) {
  const int64_t N = w.n;
  if (mode == GemmOut::kSwiGlu && !w.uniform()) {
    for (const auto& seg : w.segments) matmul(seg, static_cast<uint16_t*>(gu) + seg.row0, N, GemmOut::kStoreAct);
    cuda::swiglu(gu, M, N / 2, y, act, s);
    return;
  }
  const bool f32_out = mode == GemmOut::kStoreF32 || mode == GemmOut::kAddF32;
  for (const auto& seg : w.segments) {
    void* ys = f32_out ? static_cast<void*>(static_cast<float*>(y) + seg.row0)
                       : static_cast<void*>(static_cast<uint16_t*>(y) + seg.row0);
    matmul(seg, ys, mode == GemmOut::kSwiGlu ? N / 2 : N, mode);
  }
}

}  // namespace

// Native quantized weights: the int8 GEMV or the tensor-core matmul per segment for few rows
// (outputs at the segment's columns; a SwiGLU over gate/up in two formats goes through gu_ and the
// swiglu kernel), else the weight dequantized into the scratch and the dense path.
void CudaExecutor::quant_linear(const void* x, const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode) {
  const int64_t N = w.n, K = w.k;
  if (quant_mma(M, w)) {
    per_segment(w, M, y, mode, gu_.get(), act_, stream_, [&](const auto& seg, void* ys, int64_t ldy, GemmOut m) {
      cuda::gemm_quant_mma(x, seg.data, seg.format, M, seg.n, K, ys, ldy, m, stream_);
    });
    return;
  }
  if (quant_gemv(M, w)) {
    cuda::quantize_activations_q8(x, act_, M, K, xq_, xds_, stream_);
    quant_gemv_quantized(w, M, y, mode);
    return;
  }
  PAGODA_CHECK(mode != GemmOut::kSwiGlu, "the dequantized path has no fused SwiGLU");
  for (const auto& seg : w.segments)
    cuda::dequantize_weight(seg.data, seg.format, seg.n, K, dequant_ + seg.row0 * K * cuda::elem_bytes(act_), act_,
                            stream_);
  dense_linear(x, dequant_, N, K, M, y, mode);
}

void CudaExecutor::quant_gemv_quantized(const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode) {
  per_segment(w, M, y, mode, gu_.get(), act_, stream_, [&](const auto& seg, void* ys, int64_t ldy, GemmOut m) {
    cuda::gemv_quant(xq_, xds_, seg.data, seg.format, M, seg.n, w.k, ys, ldy, m, stream_);
  });
}

bool CudaExecutor::q8_norm_quantized(const cuda::DeviceWeight& w, int64_t M, const float* x, const int32_t* rows,
                                     const float* norm_weight, float eps) {
  if (!w.quantized() || w.fp8() || !quant_gemv(M, w) || w.input_order.get() != nullptr) return false;
  return cuda::rms_norm_q8(x, rows, M, w.k, norm_weight, eps, act_, xq_, xds_, stream_);
}

// The layer ops of one forward pass on the executor's buffers: `in` holds the step's inputs on
// the device, `sh` its shape. Each op launches what the replaced launch sequence launched, in
// the same order (a decode step replays them from a graph).
class CudaExecutor::StepOps final : public LayerOps {
 public:
  StepOps(CudaExecutor& ex, const InputRegion& in, const StepShape& sh)
      : ex_(ex), in_(in), sh_(sh), T_(sh.tokens) {}

  // The hidden-state capture (CudaExecutor::set_hidden_capture): the residual stream is complete
  // at a layer's end (its adds are GEMM epilogues into it).
  // Offloaded layers (cuda::WeightStreamer): the layer's copy is awaited before its first op, and
  // its slot handed to the next copy after its last.
  void begin_layer(int64_t layer) override { ex_.streamer_.begin_layer(layer, ex_.stream_); }
  void end_layer(int64_t layer) override {
    ex_.streamer_.end_layer(layer, ex_.stream_);
    if (!ex_.capture_.empty()) ex_.capture_layer(layer, T_);
  }

  void embed() override {
    if (ex_.tp_ == nullptr) {
      cuda::embedding(ex_.embed_.get(), ex_.act_, in_.d<int32_t>(in_.o_ids), T_, ex_.d_.D, ex_.residual_.as<float>(),
                      ex_.stream_);
      ex_.profiler_.mark("embedding", ex_.stream_);
      return;
    }
    // The rank's vocabulary rows (zeros for other tokens); the all-reduce brings each token's row
    // from the rank that holds it.
    cuda::embedding(ex_.embed_.get(), ex_.act_, in_.d<int32_t>(in_.o_ids), T_, ex_.d_.D, ex_.residual_.as<float>(),
                    ex_.stream_, ex_.opt_.tensor_parallel.vocab_begin, ex_.tp_vocab_rows());
    ex_.profiler_.mark("embedding", ex_.stream_);
    reduce_residual();
  }

  void norm_qkv(const NormArgs& norm, LinearId wid) override {
    const cuda::DeviceWeight& w = ex_.weight(wid);
    norm_linear(norm, w, T_, nullptr, ex_.qkv_.get(), GemmOut::kStoreF32, "norm+qkv gemv", "qkv");
  }

  void rope_kv_attention(const AttentionArgs& a) override {
    CudaExecutor& e = ex_;
    const cuda::KvCacheLayer kv = e.kv_layer(a.layer);
    cuda::RopeKvParams rp;
    rp.qkv = e.qkv_.as<float>();
    rp.num_tokens = T_;
    rp.num_heads = e.d_.H;
    rp.head_dim = e.d_.Dh;
    rp.bias = e.vec(a.qkv_bias);
    rp.q_norm = a.qk_norm_full ? nullptr : e.vec(a.q_norm);
    rp.k_norm = a.qk_norm_full ? nullptr : e.vec(a.k_norm);
    rp.norm_eps = static_cast<float>(a.norm_eps);
    if (a.qk_norm_full) {  // OLMoE: q and k normalised over their whole projections, before RoPE
      PAGODA_CHECK(!a.qkv_bias.defined(), "whole-projection q/k norms with a qkv bias are not supported on CUDA");
      cuda::qk_rms_norm(e.qkv_.as<float>(), T_, e.d_.Nqkv, e.d_.Q, e.d_.KVH * e.d_.Dh, e.vec(a.q_norm), e.vec(a.k_norm),
                        static_cast<float>(a.norm_eps), e.stream_);
      e.profiler_.mark("q/k norm", e.stream_);
    }
    const DeviceRope& rope = e.device_rope(a.rope);
    rp.rope_dim = rope.rope_dim;
    rp.cos = rope.cos.as<float>();
    rp.sin = rope.sin.as<float>();
    rp.interleaved = rope.interleaved;
    rp.positions = in_.d<int32_t>(in_.o_pos);
    rp.slots = in_.d<int32_t>(in_.o_slots);
    rp.q_out = e.q_.as<float>();
    rp.cache = kv;
    cuda::RowAttentionParams ap;
    e.set_attention_operands(ap, in_, kv, a);
    ap.max_keys = sh_.max_keys;
    ap.num_sms = e.sms_;
    ap.part_o = e.part_o_.as<float>();
    ap.part_ml = e.part_ml_.as<float>();
    ap.counters = e.att_counters_.as<int>();
    ap.tensor_cores = e.use_prefill_kernel_ && e.opt_.tuning.row_attention != "simt";
    ap.tensor_cores_short = e.opt_.tuning.row_attention == "mma";
    ap.simt_heads_per_block = e.opt_.tuning.simt_heads;
    ap.fresh_keys = sh_.decode ? 1 : static_cast<int>(sh_.fresh_keys);
    // Decode steps on the SIMT attention kernel take the RoPE + KV write into it (one kernel and
    // one dependent round trip fewer a layer); the row count decides which kernel runs.
    ap.rope = rp;
    ap.num_rows = sh_.rows;
    const bool fuse_rope = sh_.decode && sh_.rows > 0 && cuda::row_attention_fuses_rope(ap);
    if (!fuse_rope) {
      ap.rope = cuda::RopeKvParams{};
      cuda::rope_kv_write(rp, e.stream_);
      e.profiler_.mark("rope+kv write", e.stream_);
    }
    if (sh_.rows > 0) {
      for (int64_t r0 = 0; r0 < sh_.rows; r0 += e.caps_.att_rows) {
        cuda::RowAttentionParams cp = ap;
        cp.num_rows = std::min(e.caps_.att_rows, sh_.rows - r0);
        cp.row_token = in_.d<int32_t>(in_.o_rtok) + r0;
        cp.row_seq = in_.d<int32_t>(in_.o_rseq) + r0;
        cp.row_ctx = in_.d<int32_t>(in_.o_rctx) + r0;
        cuda::row_attention(cp, e.stream_);
      }
      e.profiler_.mark(fuse_rope ? "rope+kv write+attention split-kv" : "attention split-kv", e.stream_);
    }
    if (sh_.items > 0) {
      cuda::PrefillAttentionParams pp;
      e.set_attention_operands(pp, in_, kv, a);
      pp.seqs = in_.d<cuda::PrefillSeq>(in_.o_pseqs);
      pp.items = in_.d<cuda::PrefillItem>(in_.o_pitems);
      pp.num_items = sh_.items;
      pp.tile_q = e.opt_.prefill_tile_q;
      pp.kernel = e.prefill_kernel();
      cuda::prefill_attention(pp, e.stream_);
      e.profiler_.mark("attention prefill", e.stream_);
    }
  }

  void linear_residual(LinearId wid) override {
    ex_.linear(ex_.attn_.get(), ex_.weight(wid), T_, ex_.residual_.get(), add_mode());
    ex_.profiler_.mark("o", ex_.stream_);
    reduce_residual();
  }

  void gated_mlp(const NormArgs& norm, LinearId gate_up, LinearId down) override {
    CudaExecutor& e = ex_;
    const cuda::DeviceWeight& gu = e.weight(gate_up);
    const int64_t F = gu.n / 2;
    if (e.use_norm_gemv(T_, gu)) {  // norm + gate/up + SwiGLU in one GEMV
      const cuda::GemvNorm nrm{e.residual_.as<float>(), nullptr, e.vec(norm.weight), static_cast<float>(norm.eps)};
      cuda::gemv_bf16(nullptr, gu.data(), T_, gu.n, gu.k, e.act_buf_.get(), F, GemmOut::kSwiGlu, e.stream_, &nrm);
      e.profiler_.mark("norm+gate/up+swiglu gemv", e.stream_);
    } else if (e.q8_norm_quantized(gu, T_, e.residual_.as<float>(), nullptr, e.vec(norm.weight),
                                   static_cast<float>(norm.eps))) {  // the norm writes the int8 GEMV's input
      e.profiler_.mark("rms_norm+q8 quantize", e.stream_);
      e.quant_gemv_quantized(gu, T_, e.act_buf_.get(), GemmOut::kSwiGlu);
      e.profiler_.mark("gate/up+swiglu", e.stream_);
    } else if (e.quant_gemv(T_, gu) || e.quant_mma(T_, gu) || e.sparse_gemv(T_, gu)) {  // gate/up + SwiGLU in one matmul
      cuda::rms_norm(e.residual_.as<float>(), nullptr, T_, gu.k, e.vec(norm.weight), static_cast<float>(norm.eps),
                     e.hidden_.get(), e.act_, e.stream_);
      e.profiler_.mark("rms_norm", e.stream_);
      e.linear(e.hidden_.get(), gu, T_, e.act_buf_.get(), GemmOut::kSwiGlu);
      e.profiler_.mark("gate/up+swiglu", e.stream_);
    } else if (e.fp8_norm_quantized(gu, T_, e.residual_.as<float>(), nullptr, e.vec(norm.weight),
                                    static_cast<float>(norm.eps))) {  // FP8: the norm writes the GEMM's FP8 input
      e.profiler_.mark("rms_norm+fp8 quantize", e.stream_);
      e.fp8_gemm(gu, T_, e.gu_.get(), GemmOut::kStoreAct);
      e.profiler_.mark("gate/up", e.stream_);
      const cuda::DeviceWeight& dw = e.weight(down);
      if (dw.fp8() && !e.quant_gemv(T_, dw) && dw.k == F &&
          cuda::swiglu_fp8(e.gu_.get(), T_, F, e.fp8_xq_, e.fp8_xs_, e.stream_)) {  // SwiGLU writes down's FP8 input
        e.profiler_.mark("swiglu+fp8 quantize", e.stream_);
        e.fp8_gemm(dw, T_, e.residual_.get(), add_mode());
        e.profiler_.mark("down", e.stream_);
        reduce_residual();
        return;
      }
      cuda::swiglu(e.gu_.get(), T_, F, e.act_buf_.get(), e.act_, e.stream_);
      e.profiler_.mark("swiglu", e.stream_);
    } else {
      cuda::rms_norm(e.residual_.as<float>(), nullptr, T_, gu.k, e.vec(norm.weight), static_cast<float>(norm.eps),
                     e.hidden_.get(), e.act_, e.stream_);
      e.profiler_.mark("rms_norm", e.stream_);
      e.linear(e.hidden_.get(), gu, T_, e.gu_.get(), GemmOut::kStoreAct);
      e.profiler_.mark("gate/up", e.stream_);
      cuda::swiglu(e.gu_.get(), T_, F, e.act_buf_.get(), e.act_, e.stream_);
      e.profiler_.mark("swiglu", e.stream_);
    }
    e.linear(e.act_buf_.get(), e.weight(down), T_, e.residual_.get(), add_mode());
    e.profiler_.mark("down", e.stream_);
    reduce_residual();
  }

  // The unfused routing: rms_norm -> hidden, the router matmul -> logits, then the routing and
  // the sort (one single-block kernel for steps of up to kMoeGemvMaxTokens tokens, else two).
  void route_unfused(const NormArgs& norm, const MoeArgs& a, const cuda::DeviceWeight& router,
                     const cuda::MoeSegments& seg) {
    CudaExecutor& e = ex_;
    const int64_t D = e.d_.D, E = e.expert_sets_.at(static_cast<size_t>(a.experts.index)).E, k = a.top_k;
    cudaStream_t s = e.stream_;
    cuda::rms_norm(e.residual_.as<float>(), nullptr, T_, D, e.vec(norm.weight), static_cast<float>(norm.eps),
                   e.hidden_.get(), e.act_, s);
    e.profiler_.mark("rms_norm", s);
    e.linear(e.hidden_.get(), router, T_, e.moe_logits_.get(), GemmOut::kStoreF32);
    e.profiler_.mark("moe router", s);
    if (T_ <= cuda::kMoeGemvMaxTokens) {
      cuda::moe_route_sort(e.moe_logits_.as<float>(), T_, E, k, a.normalize_top_k, e.moe_ids_.as<int32_t>(),
                           e.moe_weights_.as<float>(), e.moe_order_.as<int32_t>(), seg, s);
    } else {
      cuda::moe_route(e.moe_logits_.as<float>(), T_, E, k, a.normalize_top_k, e.moe_ids_.as<int32_t>(),
                      e.moe_weights_.as<float>(), s);
      cuda::moe_sort(e.moe_ids_.as<int32_t>(), T_ * k, E, e.moe_order_.as<int32_t>(), seg, s);
    }
    e.profiler_.mark("moe route+sort", s);
  }

  // Mixture of experts (model/families/moe.cc; kernels.h moe.cu): rms_norm -> hidden; the router
  // matmul -> logits f32; routing and the sort of the T x k pairs by expert on the device (decode
  // steps: all of that in one moe_norm_route launch; else route_unfused()); the experts over their
  // pairs' rows (the grouped GEMV for small steps: only the selected experts' weights are read,
  // once per 4 of their rows; else the grouped tensor-core GEMM, or the SIMT one in
  // --batch-invariant mode and f32, and a SwiGLU kernel; experts in a block format through the
  // grouped quantized kernels, moe_matmul_quant); the shared expert through the dense
  // matmuls; the weighted combine adds into the residual (one token without a shared expert: inside
  // the down projection, moe_down_combine).
  void moe_mlp(const NormArgs& norm, const MoeArgs& a) override {
    CudaExecutor& e = ex_;
    const DeviceExpertSet& set = e.expert_sets_.at(static_cast<size_t>(a.experts.index));
    const int64_t D = e.d_.D, E = set.E, F = set.F, k = a.top_k, P = T_ * k;
    cudaStream_t s = e.stream_;
    cuda::MoeSegments seg;
    int32_t* sb = e.moe_seg_.as<int32_t>();
    seg.expert = sb;
    seg.begin = sb + E;
    seg.tile = sb + 2 * E + 1;
    seg.count = sb + 3 * E + 2;
    const cuda::DeviceWeight& router = e.weight(a.router);
    const float* norm_w = e.vec(norm.weight);
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (!e.opt_.batch_invariant && cuda::moe_norm_route_supported(T_, D, e.act_) && router.uniform() &&
        router.format() == e.act_ && router.input_order.get() == nullptr && aligned(router.data()) && aligned(norm_w)) {
      // decode: the norm, the router and the routing in one launch
      cuda::MoeNormRouteParams nr;
      nr.residual = e.residual_.as<float>();
      nr.norm_w = norm_w;
      nr.eps = static_cast<float>(norm.eps);
      nr.router = router.data();
      nr.T = T_;
      nr.D = D;
      nr.E = E;
      nr.k = k;
      nr.normalize = a.normalize_top_k;
      nr.hidden = e.hidden_.get();
      nr.logits = e.moe_logits_.as<float>();
      nr.ids = e.moe_ids_.as<int32_t>();
      nr.weights = e.moe_weights_.as<float>();
      nr.order = e.moe_order_.as<int32_t>();
      nr.seg = seg;
      nr.done = reinterpret_cast<unsigned*>(sb + 3 * e.d_.E + 3);  // past every layer's segments
      cuda::moe_norm_route(nr, e.act_, s);
      e.profiler_.mark("moe norm+router+route+sort", s);
    } else {
      route_unfused(norm, a, router, seg);
    }

    const bool gemv = !e.opt_.batch_invariant && T_ <= cuda::kMoeGemvMaxTokens;
    const bool quant_up = set.gate_up_format != e.act_, quant_down = set.down_format != e.act_;
    cuda::MoeMatmulParams up;
    up.x = e.hidden_.get();
    up.ldx = D;
    up.gather = e.moe_order_.as<int32_t>();
    up.gather_div = static_cast<int>(k);
    up.w = set.gate_up();
    up.N = static_cast<int>(2 * F);
    up.K = static_cast<int>(D);
    up.seg = seg;
    up.P = P;
    up.E = E;
    up.max_rows = T_;
    // Prefill: the bf16 tensor-core GEMM; --batch-invariant (and f32) the SIMT one.
    const bool mma = !gemv && !e.opt_.batch_invariant && e.act_ == DType::kBF16 && D % 8 == 0 && F % 8 == 0;
    up.tensor_cores = mma;
    // Quantized experts: the grouped int8 GEMV (it quantizes its inputs itself), else the grouped
    // tensor-core GEMM (also in --batch-invariant mode: a row's result does not depend on the
    // other rows).
    if (gemv) {  // gate/up + SwiGLU in one grouped GEMV
      up.y = e.moe_act_.get();
      up.ldy = F;
      up.mode = GemmOut::kSwiGlu;
      if (quant_up) {
        up.w_row_bytes = cuda::device_row_bytes(set.gate_up_format, D);
        cuda::moe_matmul_quant(up, set.gate_up_format, true, s);
      } else {
        cuda::moe_matmul(up, e.act_, true, s);
      }
      e.profiler_.mark("moe gate/up+swiglu gemv", s);
    } else {
      up.y = e.moe_gu_.get();
      up.ldy = 2 * F;
      up.mode = GemmOut::kStoreAct;
      if (quant_up) {
        up.w_row_bytes = cuda::device_row_bytes(set.gate_up_format, D);
        cuda::moe_matmul_quant(up, set.gate_up_format, false, s);
      } else {
        cuda::moe_matmul(up, e.act_, false, s);
      }
      e.profiler_.mark(quant_up || mma ? "moe gate/up gemm (mma)" : "moe gate/up gemm", s);
      cuda::swiglu(e.moe_gu_.get(), P, F, e.moe_act_.get(), e.act_, s);
      e.profiler_.mark("moe swiglu", s);
    }
    cuda::MoeMatmulParams down;
    down.x = e.moe_act_.get();
    down.ldx = F;
    down.w = set.down();
    down.N = static_cast<int>(D);
    down.K = static_cast<int>(F);
    down.y = e.moe_out_.get();
    down.ldy = D;
    down.scatter = e.moe_order_.as<int32_t>();
    down.seg = seg;
    down.P = P;
    down.E = E;
    down.max_rows = T_;
    down.tensor_cores = mma;
    down.mode = GemmOut::kStoreF32;
    if (quant_down) down.w_row_bytes = cuda::device_row_bytes(set.down_format, F);
    if (gemv && T_ == 1 && !a.shared_gate_up.defined()) {  // one token: the combine inside the down GEMV
      zero_partial_residual();
      if (quant_down) cuda::moe_down_combine_quant(down, set.down_format, e.moe_weights_.as<float>(), e.residual_.as<float>(), s);
      else cuda::moe_down_combine(down, e.moe_weights_.as<float>(), e.residual_.as<float>(), e.act_, s);
      e.profiler_.mark("moe down gemv+combine", s);
      reduce_residual();
      return;
    }
    if (quant_down) cuda::moe_matmul_quant(down, set.down_format, gemv, s);
    else cuda::moe_matmul(down, e.act_, gemv, s);
    e.profiler_.mark(gemv ? "moe down gemv" : (quant_down || mma ? "moe down gemm (mma)" : "moe down gemm"), s);

    cuda::MoeCombineParams cp;
    cp.expert_out = e.moe_out_.as<float>();
    cp.weights = e.moe_weights_.as<float>();
    cp.ids = e.moe_ids_.as<int32_t>();
    cp.T = T_;
    cp.top_k = static_cast<int>(k);
    cp.D = static_cast<int>(D);
    cp.residual = e.residual_.as<float>();
    if (a.shared_gate_up.defined()) {
      const cuda::DeviceWeight& sgu = e.weight(a.shared_gate_up);
      const int64_t Fs = sgu.n / 2;
      e.linear(e.hidden_.get(), sgu, T_, e.gu_.get(), GemmOut::kStoreAct);
      cuda::swiglu(e.gu_.get(), T_, Fs, e.act_buf_.get(), e.act_, s);
      e.linear(e.act_buf_.get(), e.weight(a.shared_down), T_, e.moe_shared_.get(), GemmOut::kStoreF32);
      cp.shared_out = e.moe_shared_.as<float>();
      const cuda::DeviceWeight& g = e.weight(a.shared_gate);
      if (g.uniform() && g.format() == e.act_) {  // the gate's dot product inside the combine
        cp.hidden = e.hidden_.get();
        cp.shared_gate = g.data();
      } else {  // a quantized gate: its matmul into the router's logits buffer (read by now)
        e.linear(e.hidden_.get(), g, T_, e.moe_logits_.get(), GemmOut::kStoreF32);
        cp.shared_gate_logits = e.moe_logits_.as<float>();
      }
      e.profiler_.mark("moe shared expert", s);
    }
    zero_partial_residual();
    cuda::moe_combine(cp, e.act_, s);
    e.profiler_.mark("moe combine", s);
    reduce_residual();
  }

  void final_logits(const NormArgs& norm, LinearId wid) override {
    if (sh_.logits <= 0) return;
    CudaExecutor& e = ex_;
    const int64_t n = sh_.logits;
    if (e.tp_ == nullptr) {
      norm_linear(norm, e.weight(wid), n, in_.d<int32_t>(in_.o_lrows), e.logits_.get(), GemmOut::kStoreF32, nullptr,
                  nullptr);
      e.profiler_.mark("final norm+lm_head", e.stream_);
      return;
    }
    // The rank's vocabulary columns [n, V_r] into tp_part_, every rank's gathered (each rank's
    // block n x vocab_rows_per_rank floats, its real [n, V_r] first), then each block's rows to
    // its columns of the logits.
    norm_linear(norm, e.weight(wid), n, in_.d<int32_t>(in_.o_lrows), e.tp_part_.get(), GemmOut::kStoreF32, nullptr,
                nullptr);
    e.profiler_.mark("final norm+lm_head", e.stream_);
    const int64_t per = e.opt_.tensor_parallel.vocab_rows_per_rank, V = e.d_.V;
    e.tp_->all_gather(e.tp_part_.as<float>(), e.tp_gather_.as<float>(), n * per, e.stream_);
    for (int r = 0; r < e.tp_->size(); ++r) {
      const int64_t cols = e.tp_rank_vocab_rows(r);
      if (cols == 0) continue;
      CUDA_CHECK(cudaMemcpy2DAsync(e.logits_.as<float>() + r * per, static_cast<size_t>(V) * 4,
                                   e.tp_gather_.as<float>() + r * n * per, static_cast<size_t>(cols) * 4,
                                   static_cast<size_t>(cols) * 4, static_cast<size_t>(n), cudaMemcpyDeviceToDevice,
                                   e.stream_));
    }
    e.profiler_.mark("logits all-gather", e.stream_);
  }

  // Gemma (model/families/gemma.cc). The sub-block outputs go to qkv_ as f32 [T, D] (free once the
  // attention has read q, k, v; make_cuda_executor checks it holds D columns), then the post-norm
  // adds them into the residual.
  void scale_residual(float scale) override {
    cuda::scale_f32(ex_.residual_.as<float>(), T_ * ex_.d_.D, scale, ex_.stream_);
    ex_.profiler_.mark("embedding scale", ex_.stream_);
  }

  void linear_post_norm_residual(LinearId wid, const NormArgs& post) override {
    CudaExecutor& e = ex_;
    e.linear(e.attn_.get(), e.weight(wid), T_, e.qkv_.get(), GemmOut::kStoreF32);
    e.profiler_.mark("o", e.stream_);
    e.tp_all_reduce(e.qkv_.as<float>(), T_ * e.d_.D, "o all-reduce");
    post_norm_add(post);
  }

  void gated_mlp_post_norm(const NormArgs& norm, LinearId gate_up, LinearId down, GateActivation act,
                           const NormArgs& post) override {
    CudaExecutor& e = ex_;
    const cuda::DeviceWeight& gu = e.weight(gate_up);
    const int64_t F = gu.n / 2;
    norm_linear(norm, gu, T_, nullptr, e.gu_.get(), GemmOut::kStoreAct, nullptr, "gate/up");
    if (act == GateActivation::kGeluTanh) {
      cuda::geglu_tanh(e.gu_.get(), T_, F, e.act_buf_.get(), e.act_, e.stream_);
      e.profiler_.mark("geglu", e.stream_);
    } else {
      cuda::swiglu(e.gu_.get(), T_, F, e.act_buf_.get(), e.act_, e.stream_);
      e.profiler_.mark("swiglu", e.stream_);
    }
    e.linear(e.act_buf_.get(), e.weight(down), T_, e.qkv_.get(), GemmOut::kStoreF32);
    e.profiler_.mark("down", e.stream_);
    e.tp_all_reduce(e.qkv_.as<float>(), T_ * e.d_.D, "down all-reduce");
    post_norm_add(post);
  }

  void final_logits_softcap(const NormArgs& norm, LinearId wid, float cap) override {
    final_logits(norm, wid);
    if (!(cap > 0.0f) || sh_.logits <= 0) return;
    cuda::softcap_f32(ex_.logits_.as<float>(), sh_.logits * ex_.d_.V, cap, ex_.stream_);
    ex_.profiler_.mark("logit softcap", ex_.stream_);
  }

 private:
  // Tensor parallelism: the row-parallel products (o, down, the experts' down) of ranks past 0
  // are stored into the residual, rank 0's added, so that the all-reduce of the residual sums the
  // residual once and every rank's product (reduce_residual after each). One GPU: the add.
  GemmOut add_mode() const { return ex_.tp_partial() ? GemmOut::kStoreF32 : GemmOut::kAddF32; }
  void reduce_residual() { ex_.tp_all_reduce(ex_.residual_.as<float>(), T_ * ex_.d_.D, "residual all-reduce"); }
  // Before an add that has no store form (the MoE combine): ranks past 0 add into zeros.
  void zero_partial_residual() {
    if (ex_.tp_partial())
      CUDA_CHECK(cudaMemsetAsync(ex_.residual_.get(), 0, static_cast<size_t>(T_ * ex_.d_.D) * 4, ex_.stream_));
  }

  // residual += rms_norm(qkv_ as f32 [T, D]) * post.weight
  void post_norm_add(const NormArgs& post) {
    CudaExecutor& e = ex_;
    cuda::rms_norm_add(e.qkv_.as<float>(), T_, e.d_.D, e.vec(post.weight), static_cast<float>(post.eps),
                       e.residual_.as<float>(), e.stream_);
    e.profiler_.mark("post-norm add", e.stream_);
  }

  // y[M, N] = rms_norm(residual[rows]) w^T (rows: nullptr for the first M rows, else M row
  // indices): one GEMV with the norm fused where it applies, else the norm into `hidden` (the
  // `last` buffer for gathered rows) and a matmul. Labels non-null: profiler marks.
  void norm_linear(const NormArgs& norm, const cuda::DeviceWeight& w, int64_t M, const int32_t* rows, void* y,
                   GemmOut mode, const char* fused_label, const char* label) {
    CudaExecutor& e = ex_;
    const float eps = static_cast<float>(norm.eps);
    // The GEMV fuses the norm for f32 outputs and the SwiGLU only (gemv.cu).
    if (e.use_norm_gemv(M, w) && (mode == GemmOut::kStoreF32 || mode == GemmOut::kSwiGlu)) {
      const cuda::GemvNorm nrm{e.residual_.as<float>(), rows, e.vec(norm.weight), eps};
      cuda::gemv_bf16(nullptr, w.data(), M, w.n, w.k, y, w.n, mode, e.stream_, &nrm);
      if (fused_label) e.profiler_.mark(fused_label, e.stream_);
      return;
    }
    // A native quantized weight on the int8 GEMV: the norm writes its q8 activations directly.
    if (e.q8_norm_quantized(w, M, e.residual_.as<float>(), rows, e.vec(norm.weight), eps)) {
      if (label) e.profiler_.mark("rms_norm+q8 quantize", e.stream_);
      e.quant_gemv_quantized(w, M, y, mode);
      if (label) e.profiler_.mark(label, e.stream_);
      return;
    }
    // An FP8 weight past the GEMV: the norm writes the FP8 activations of the GEMM directly.
    if (mode != GemmOut::kSwiGlu && e.fp8_norm_quantized(w, M, e.residual_.as<float>(), rows, e.vec(norm.weight), eps)) {
      if (label) e.profiler_.mark("rms_norm+fp8 quantize", e.stream_);
      e.fp8_gemm(w, M, y, mode);
      if (label) e.profiler_.mark(label, e.stream_);
      return;
    }
    DeviceBuffer& normed = rows ? e.last_ : e.hidden_;
    cuda::rms_norm(e.residual_.as<float>(), rows, M, w.k, e.vec(norm.weight), eps, normed.get(), e.act_, e.stream_);
    if (label) e.profiler_.mark("rms_norm", e.stream_);
    e.linear(normed.get(), w, M, y, mode);
    if (label) e.profiler_.mark(label, e.stream_);
  }

  CudaExecutor& ex_;
  const InputRegion& in_;
  const StepShape& sh_;
  const int64_t T_;
};

void CudaExecutor::launch_forward(const InputRegion& in, const StepShape& sh) {
  cuda::block_trace_begin_step();
  StepOps ops(*this, in, sh);
  streamer_.begin_forward(stream_);
  if (partial()) {
    LayerRangeOps ranged(ops, opt_.layers, d_.L);  // a layer split's first part
    model_.forward(ranged);
    return;
  }
  model_.forward(ops);
}


}  // namespace pagoda::cuda_impl
