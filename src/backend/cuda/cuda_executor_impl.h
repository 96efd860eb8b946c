// The CUDA executor of one GPU (runtime/cuda_executor.h is its public face): the class, its step
// inputs and shapes, shared by the files that implement it:
//   cuda_executor.cc           init, weights, workspace, graphs, the step's inputs, forward, swap
//   cuda_step_ops.cc           the layer ops of one forward pass and the matmul dispatch
//   cuda_executor_sampling.cc  forward_sample: sampling arguments packed for the device sampler
// Internal to backend/cuda: not included outside it.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <type_traits>
#include <unordered_map>

#include "backend/cuda/blas.h"
#include "backend/cuda/block_trace.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_sizing.h"
#include "backend/cuda/device.h"
#include "backend/cuda/device_weight.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/op_profiler.h"
#include "backend/cuda/sparse_2of4.h"
#include "backend/cuda/step_graph_shape.h"
#include "backend/cuda/step_timer.h"
#include "backend/cuda/weight_streamer.h"
#include "backend/cuda/weight_uploader.h"
#include "model/family.h"
#include "ops/linear.h"
#include "runtime/cuda_executor.h"

namespace pagoda::cuda_impl {

using cuda::align_up;
using cuda::Capacities;
using cuda::DeviceBuffer;
using cuda::Dims;
using cuda::elem_bytes;
using cuda::GemmOut;
using cuda::graph_buckets;
using cuda::PinnedBuffer;
using cuda::resolve_compute_dtype;
using cuda::tied_output;

// Fixed-layout step inputs: a pinned host mirror and its device copy. Small int32 arrays of
// tok_cap entries first (copied in one go), then prefill sequences / items, then block tables.
struct InputRegion {
  int64_t tok_cap = 0, seq_cap = 0, item_cap = 0, bt_stride = 0;
  size_t o_ids = 0, o_pos = 0, o_slots = 0, o_rtok = 0, o_rseq = 0, o_rctx = 0, o_lrows = 0, o_small_end = 0;
  size_t o_pseqs = 0, o_pitems = 0, o_bt = 0, total = 0;
  PinnedBuffer host;
  DeviceBuffer dev;

  void allocate(int64_t tokens, int64_t seqs, int64_t stride) {
    tok_cap = tokens;
    seq_cap = seqs;
    item_cap = tokens / 64 + seqs;  // the smallest query tile is 64
    bt_stride = stride;
    const size_t a = static_cast<size_t>(tok_cap) * 4;
    o_ids = 0;
    o_pos = a;
    o_slots = 2 * a;
    o_rtok = 3 * a;
    o_rseq = 4 * a;
    o_rctx = 5 * a;
    o_lrows = 6 * a;
    o_small_end = 7 * a;
    o_pseqs = static_cast<size_t>(align_up(static_cast<int64_t>(o_small_end), 256));
    o_pitems = static_cast<size_t>(align_up(static_cast<int64_t>(o_pseqs + seq_cap * sizeof(cuda::PrefillSeq)), 256));
    o_bt = static_cast<size_t>(align_up(static_cast<int64_t>(o_pitems + item_cap * sizeof(cuda::PrefillItem)), 256));
    total = o_bt + static_cast<size_t>(seq_cap * bt_stride) * 4;
    host.reset(total);
    dev.reset(total);
    std::memset(host.get(), 0, total);
  }
  template <class T>
  T* h(size_t off) const { return reinterpret_cast<T*>(host.as<uint8_t>() + off); }
  template <class T>
  T* d(size_t off) const { return reinterpret_cast<T*>(dev.as<uint8_t>() + off); }
};

// A RoPE table on the device: cos and sin, [max_pos, rope_dim / 2] f32 each.
struct DeviceRope {
  DeviceBuffer cos, sin;
  int64_t rope_dim = 0;
  bool interleaved = false;
};

// One MoE layer's experts on the device (model/model_weights.h ExpertSet): the device pointers of
// each expert's gate/up [2F, D] and down [D, F] weights (compute dtype), gate_up[0..E) then
// down[0..E), for moe_matmul.
struct DeviceExpertSet {
  DeviceBuffer ptrs;
  int64_t E = 0, F = 0;
  // The experts' gate/up and down formats: the compute dtype, or a block format the grouped
  // quantized kernels read (cuda_sizing.h dense_only_linears).
  DType gate_up_format = DType::kBF16, down_format = DType::kBF16;
  const void* const* gate_up() const { return ptrs.as<const void* const>(); }
  const void* const* down() const { return ptrs.as<const void* const>() + E; }
};

struct StepShape {
  int64_t tokens = 0;    // T
  int64_t rows = 0;      // split-KV attention rows
  int64_t items = 0;     // prefill tiles
  int64_t logits = 0;    // logits rows
  int64_t max_keys = 0;  // bound on any row's keys (grid sizing)
  bool decode = false;   // every token is a decode row: its own key is the only one this step writes
  // Not a decode step: keys at the end of every row's context that this step may write (a
  // verification graph: its rows a sequence); -1: unknown (RowAttentionParams::fresh_keys).
  int64_t fresh_keys = -1;
};

class CudaExecutor final : public ModelExecutor {
 public:
  CudaExecutor(const Model& model, const KvCacheSpec& spec, const CudaExecutorOptions& opt, DType act)
      : model_(model), d_(model), spec_(spec), opt_(opt), act_(act), caps_(opt) {
    if (opt.tensor_parallel.active()) {  // the rank's model has its vocabulary rows; logits are the whole model's
      tp_ = opt.tensor_parallel.comm;
      d_.V = opt.tensor_parallel.vocab_size;
    }
  }

  ~CudaExecutor() override {
    cudaSetDevice(opt_.device);
    cudaStreamSynchronize(stream_);
    if (copy_stream_ != nullptr) cudaStreamSynchronize(copy_stream_);
    for (auto& [b, g] : graphs_) cudaGraphExecDestroy(g);
    if (compute_done_ != nullptr) cudaEventDestroy(compute_done_);
    if (copies_done_ != nullptr) cudaEventDestroy(copies_done_);
    if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
    cudaStreamDestroy(stream_);
    cuda::block_trace_write();  // tuning.block_trace: the last step's warp records
  }

  Status init();

  std::string device_name() const override { return fmt::format("cuda:{}", opt_.device); }
  std::string describe() const override;
  WeightStreamingStats weight_streaming() const override {
    if (!streamer_.active()) return {};
    return {streamer_.plan().streamed_bytes, streamer_.bandwidth(), streamer_.plan().num_streamed()};
  }
  const Tensor& forward(const ForwardBatch& batch) override;
  void forward_discard(const ForwardBatch& batch) override;
  // A layer split's first part (CudaExecutorOptions::layers): the step of its layers, then the
  // residual rows [T, D] f32 copied into pinned host memory.
  const Tensor& forward_part(const ForwardBatch& batch, const Tensor* residual_in) override;
  LayerRange layer_range() const override { return opt_.layers; }
  bool samples_on_device() const override { return !partial(); }
  void forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> specs, std::vector<SampleResult>& results,
                      const std::function<void()>& before_sampling) override;
  void row_logprobs(std::span<const RowLogprobSpec> rows, std::vector<RowLogprobs>& out) override;
  void swap_out(const std::vector<BlockCopy>& copies) override { swap(copies, true); }
  void swap_in(const std::vector<BlockCopy>& copies) override { swap(copies, false); }
  int64_t host_block_bytes() const override {
    return host_kv_.get() != nullptr ? 2 * kv_layers() * d_.KVH * spec_.block_size * d_.Dh * elem_bytes(spec_.dtype) : 0;
  }
  void read_host_block(BlockId block, std::span<uint8_t> dst) override { move_host_block(block, dst.data(), nullptr); }
  void write_host_block(BlockId block, std::span<const uint8_t> src) override {
    move_host_block(block, nullptr, src.data());
  }
  int64_t workspace_bytes() const override { return workspace_bytes_; }
  int64_t kv_cache_bytes() const override { return static_cast<int64_t>(kv_.bytes()); }
  DeviceMemoryStats device_memory() const override { return cuda::device_memory_stats(opt_.device); }
  // Hidden-state capture (ModelExecutor::set_hidden_capture): StepOps::end_layer copies each
  // captured layer's residual rows [T, D] f32 into its columns of a [rows, n * D] f32 buffer:
  // capture_dev_ on the device while a decode or verification graph is captured (the copies are
  // graph nodes, so graphs stay on), the pinned capture_host_ in an eager step. After a replayed
  // graph one device-to-host copy moves the graph's rows; finish_capture() puts them in batch order
  // (captured_) once the step's stream is synchronised. Turning the capture on or off (or to other
  // layers) re-captures the graphs.
  bool set_hidden_capture(const std::vector<int64_t>& after_layers) override;
  // Whether this executor runs only a layer split's first layers.
  bool partial() const { return !opt_.layers.whole(d_.L); }
  // Layers whose weights and K/V this executor holds: [0, kv_layers()).
  int64_t kv_layers() const { return opt_.layers.end_in(d_.L); }
  const Tensor* captured_hidden() const override { return capture_.empty() ? nullptr : &captured_; }
  // ModelExecutor::output_logits: chunks of kOutputRows rows copied to the device, converted to
  // the compute dtype, through the output head's matmul (the step's dispatch) and back, in buffers
  // of their own (head_*), grown on first use.
  bool output_logits(const float* x, int64_t m, float* logits) override;
  // ModelExecutor::make_draft_head_runner: DraftRunner (cuda_draft_head.cc) on this stream, its
  // passes between steps; it reads the split-KV workspace, the embedding and the output head.
  std::unique_ptr<DraftHeadRunner> make_draft_head_runner(const DraftHead& head, int64_t num_blocks, int64_t block_size,
                                                          std::string& why) override;
  bool set_graphs_enabled(bool on) override {
    graphs_on_ = on && opt_.cuda_graphs;
    return opt_.cuda_graphs;
  }
  std::string profile_report() const override { return profiler_.report() + step_timer_.report() + graph_report(); }
  int64_t expert_weight_bytes() const override {
    int64_t total = 0;
    for (const ExpertSet& set : model_.weights().expert_sets)
      for (const auto* ids : {&set.gate_up, &set.down})
        for (LinearId id : *ids) {
          const cuda::DeviceWeight& w = weight(id);
          for (const auto& seg : w.segments) total += cuda::device_weight_bytes(seg.format, seg.n, w.k);
        }
    return total;
  }
  int64_t linear_weight_bytes() const override {
    int64_t total = 0;
    for (const auto& w : linears_)
      if (w.sparse == nullptr)
        for (const auto& seg : w.segments) total += cuda::device_weight_bytes(seg.format, seg.n, w.k);
    return total + sparse_read_bytes_;  // a step reads one of a 2:4 weight's two layouts
  }

 private:
  class StepOps;      // the layer ops of one launch_forward()
  class DraftRunner;  // a draft head's passes (cuda_draft_head.cc)

  Status upload_weights();
  // Linear entry i into device memory at `base` (its storage, or a streamed layer's region); its
  // segments' data pointers then point into `run_base` (where it runs from: base, or the slot).
  void upload_linear(cuda::WeightUploader& up, size_t i, uint8_t* base, uint8_t* run_base);
  // The 2:4 layouts of each candidate that holds the pattern (cuda_sizing.h
  // sparse_2of4_candidates), whose dense weight is then freed, and the sparse GEMM's scratch;
  // nothing when the tuning or the checkpoint asks for none.
  Status make_sparse_copies();
  void allocate_workspace(int64_t tokens, int64_t logits_rows);
  // Every bucket's graphs now (TuningConfig::graph_capture "start"; a workspace that grew).
  void capture_graphs();
  // Padding inputs in the graph region (context 0, slot -1, token 0): the state a warm-up and a
  // capture run on. Copied to the device on the stream.
  void reset_graph_inputs();
  // The graphs of shape s (cuda/step_graph_shape.h: the long-key one and, where it differs, the
  // short-key one), each after a warm-up launch with autotuning; needs reset_graph_inputs() first.
  // A shape whose tokens exceed the graph region or the workspace is marked captured, with no graph.
  void capture_shape(const cuda::StepGraphShape& s);
  // A verification step (cuda::verify_graph_shape accepted the batch) through the graph of shape s,
  // captured first if needed (lazy: this shape; start: every bucket of these rows). False: no graph
  // (the caller runs the step eagerly).
  bool replay_verify_graph(const ForwardBatch& batch, const cuda::StepGraphShape& s, int64_t max_blocks);
  // Tokens the graph region and the workspace hold: bound on a graph's bucket x rows.
  int64_t graph_token_limit() const { return std::min({graph_.tok_cap, tok_cap_, logits_cap_}); }
  // "verification graphs: ..." for profile_report (empty before the first one).
  std::string graph_report() const;
  void destroy_graphs();
  bool lazy_graphs() const { return opt_.tuning.graph_capture == "lazy"; }
  // The prefill attention kernel the tuning asks for (cuda::PrefillAttentionParams::kernel).
  cuda::PrefillKernel prefill_kernel() const {
    return opt_.tuning.prefill_attention == "mma" ? cuda::PrefillKernel::kMmaSync : cuda::PrefillKernel::kAuto;
  }
  cuda::KvCacheLayer kv_layer(int64_t l) const;
  // y = x w^T for M rows; N, K from the weight.
  void linear(const void* x, const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode);
  // The same for a dense [N, K] weight in the compute dtype; kSwiGlu only through the bf16 GEMV.
  void dense_linear(const void* x, const void* w, int64_t N, int64_t K, int64_t M, void* y, GemmOut mode);
  void quant_linear(const void* x, const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode);
  // A 2:4 weight (no dense copy): our 2:4 GEMV where sparse_gemv (every mode), else cuSPARSELt's
  // sparse GEMM (bf16 out; not kSwiGlu): rows in multiples of kSparseRowAlign, the last M % 16
  // padded through sparse_x_; f32 and unaligned outputs through sparse_y_ in chunks.
  void sparse_linear(const void* x, const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode);
  // Whether M rows over a 2:4 weight take our 2:4 GEMV (fewer than tuning.sparse_min_rows).
  bool sparse_gemv(int64_t M, const cuda::DeviceWeight& w) const {
    return w.sparse != nullptr && M < opt_.tuning.sparse_min_rows && M <= cuda::kGemv2of4MaxM;
  }
  // FP8 weights: the FP8 GEMV for few rows (and, in chunks of its rows, in batch-invariant mode),
  // else per-token FP8 activations and the cuBLASLt FP8 GEMM.
  void fp8_linear(const void* x, const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode);
  // The FP8 GEMM of M rows over the activations in fp8_xq_ / fp8_xs_ (fp8_linear's quantization or
  // fp8_norm_quantized's); kSwiGlu not supported.
  void fp8_gemm(const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode);
  // Where M rows over w take the FP8 GEMM: rms_norm of x's rows (rows: gathered, or null) fused with
  // their FP8 quantization into fp8_xq_ / fp8_xs_ (cuda::rms_norm_fp8), true; false (nothing
  // launched) for any other weight, M or shape: the caller runs the norm and linear().
  bool fp8_norm_quantized(const cuda::DeviceWeight& w, int64_t M, const float* x, const int32_t* rows,
                          const float* norm_weight, float eps);
  // Where M rows over a native quantized weight take the int8 GEMV (and it has no input order):
  // rms_norm of x's rows (rows: gathered, or null) fused with their q8 quantization into xq_ / xds_
  // (cuda::rms_norm_q8: the bits rms_norm + quantize_activations_q8 write), true; false (nothing
  // launched) for any other weight, M or shape: the caller runs the norm and linear().
  bool q8_norm_quantized(const cuda::DeviceWeight& w, int64_t M, const float* x, const int32_t* rows,
                         const float* norm_weight, float eps);
  // The int8 GEMV of M rows over a native quantized weight from the activations in xq_ / xds_
  // (quant_linear's quantization or q8_norm_quantized's), per segment; every mode.
  void quant_gemv_quantized(const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode);
  // Whether M rows over a native quantized weight take the int8 GEMV (not batch-invariant), or for
  // an FP8 weight the FP8 GEMV (at most tuning.quant_gemv_max_rows rows too; always in
  // batch-invariant mode). Both fuse SwiGLU.
  bool quant_gemv(int64_t M, const cuda::DeviceWeight& w) const {
    if (w.fp8()) return opt_.batch_invariant || M <= std::min<int64_t>(opt_.tuning.quant_gemv_max_rows, cuda::kFp8GemvMaxM);
    return w.quantized() && !opt_.batch_invariant && M <= opt_.tuning.quant_gemv_max_rows;
  }
  // Whether they take the tensor-core matmul instead: bf16 activations, more rows than the GEMV
  // takes and at most tuning.quant_mma_max_rows (not batch-invariant; not FP8).
  bool quant_mma(int64_t M, const cuda::DeviceWeight& w) const {
    return w.quantized() && !w.fp8() && !opt_.batch_invariant && act_ == DType::kBF16 && !quant_gemv(M, w) &&
           M <= opt_.tuning.quant_mma_max_rows;
  }
  const cuda::DeviceWeight& weight(LinearId id) const { return linears_.at(static_cast<size_t>(id.index)); }
  // Tensor parallelism (CudaTensorParallel): whether this rank's row-parallel products are partial
  // sums that must not be added into the residual (every rank but 0), and the all-reduce of `n`
  // f32 on the stream (nothing on one GPU).
  bool tp_partial() const { return tp_ != nullptr && tp_->rank() > 0; }
  void tp_all_reduce(float* data, int64_t n, const char* label) {
    if (tp_ == nullptr) return;
    tp_->all_reduce_sum(data, n, stream_);
    profiler_.mark(label, stream_);
  }
  // This rank's vocabulary rows (the model's embedding and output-head rows).
  int64_t tp_vocab_rows() const { return model_.config().vocab_size; }
  // Rank r's real vocabulary rows: [r * per_rank, ...) clipped to the vocabulary.
  int64_t tp_rank_vocab_rows(int r) const {
    const int64_t per = opt_.tensor_parallel.vocab_rows_per_rank, V = opt_.tensor_parallel.vocab_size;
    return std::clamp<int64_t>(V - r * per, 0, per);
  }
  const float* vec(VectorId id) const {
    return id.defined() ? vectors_.at(static_cast<size_t>(id.index)).as<float>() : nullptr;
  }
  // Whether M rows of a bf16 linear layer take our GEMV (not batch-invariant, at most
  // tuning.gemv_max_rows rows) with the preceding RMSNorm fused in.
  bool use_norm_gemv(int64_t M, const cuda::DeviceWeight& w) const {
    return !w.quantized() && w.sparse == nullptr && !opt_.batch_invariant && act_ == DType::kBF16 &&
           M <= opt_.tuning.gemv_max_rows && cuda::gemv_norm_supported(M, w.k);
  }
  // The operands both attention kernels take from a step: q, the output, block tables, the layer's
  // cache, heads, scale, window.
  // a: the layer's scale and window (Gemma's per-layer variants; the defaults are the config's).
  template <class P>
  void set_attention_operands(P& p, const InputRegion& in, const cuda::KvCacheLayer& kv, const AttentionArgs& a) const {
    p.q = q_.as<float>();
    p.q_stride = d_.Q;
    p.out = attn_.get();
    p.out_dtype = act_;
    p.out_stride = d_.Q;
    p.block_tables = in.d<int32_t>(in.o_bt);
    p.bt_stride = in.bt_stride;
    p.cache = kv;
    p.num_heads = d_.H;
    p.scale = a.scale > 0.0f ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(d_.Dh)));
    p.window = a.sliding_window >= 0 ? a.sliding_window : model_.config().sliding_window;
    p.softcap = a.logit_softcap;
  }
  // The device copy of a RoPE table the forward names (Model::rope_tables(); nullptr: rope()).
  const DeviceRope& device_rope(const RopeTable* table) const {
    return table == nullptr ? ropes_.front() : ropes_.at(rope_index_.at(table));
  }
  void launch_forward(const InputRegion& in, const StepShape& sh);
  // Runs the forward pass of `batch`; logits rows [0, n) are then in logits_.
  void run_step(const ForwardBatch& batch);
  void copy_inputs(const InputRegion& in, int64_t seqs, int64_t max_blocks, int64_t items);
  // Block copies between the KV cache and the pinned host blocks, on the copy stream: it waits for
  // the compute stream's work so far, and the compute stream waits for the copies (the next
  // forward pass reads or overwrites those blocks). Runs of consecutive source and destination
  // ids are one copy per layer and K/V.
  void swap(const std::vector<BlockCopy>& copies, bool out);
  // One host block's bytes gathered into `out` or scattered from `in` (layer by layer, K then V),
  // after the copy stream's pending copies.
  void move_host_block(BlockId block, uint8_t* out, const uint8_t* in);

  const Model& model_;
  Dims d_;  // V: the whole vocabulary (under tensor parallelism more than the rank's output rows)
  DeviceComm* tp_ = nullptr;  // tensor parallelism of more than one rank; null: the whole model here
  // The rank's logits [logits rows, vocab_rows_per_rank] f32 and every rank's [size, rows, per rank].
  DeviceBuffer tp_part_, tp_gather_;
  KvCacheSpec spec_;
  CudaExecutorOptions opt_;
  DType act_;
  Capacities caps_;
  bool use_prefill_kernel_ = false;
  int sms_ = 0;
  std::string gpu_name_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // host-block copies (swap, the KV host tier)
  cudaEvent_t compute_done_ = nullptr, copies_done_ = nullptr;
  std::unique_ptr<cuda::BlasLt> blas_;
  // 2:4 sparse linears (make_sparse_copies): the library, the two layouts' bytes, and the
  // scratch: the padded last rows' inputs [kSparseRowAlign, max K] bf16 (sparse_x_) and bf16
  // outputs of sparse_y_bytes_ (sparse_y_).
  std::unique_ptr<cuda::SparseLt> sparse_;
  int64_t sparse_bytes_ = 0;       // both layouts
  int64_t sparse_read_bytes_ = 0;  // our layout's (cuSPARSELt's is about as large)
  DeviceBuffer sparse_scratch_;
  uint8_t* sparse_x_ = nullptr;
  uint8_t* sparse_y_ = nullptr;
  int64_t sparse_y_bytes_ = 0;

  DeviceBuffer embed_;                                      // [V, D] act
  std::vector<DeviceRope> ropes_;                           // by Model::rope_tables() order
  std::unordered_map<const RopeTable*, size_t> rope_index_;
  std::vector<cuda::DeviceWeight> linears_;                 // by LinearId (model/model_weights.h)
  std::vector<DeviceBuffer> vectors_;                       // by VectorId: [n] f32
  std::vector<DeviceExpertSet> expert_sets_;                // by ExpertSetId
  cuda::WeightStreamer streamer_;                           // offloaded layers (opt_.cpu_offload_bytes)
  DeviceBuffer kv_;
  int64_t kv_layer_bytes_ = 0;
  PinnedBuffer host_kv_;

  // Workspace.
  int64_t tok_cap_ = 0, logits_cap_ = 0;
  DeviceBuffer residual_, hidden_, qkv_, q_, attn_, gu_, act_buf_, last_, logits_, part_o_, part_ml_, att_counters_;
  // MoE layers (cuda_sizing.h moe_workspace_bytes_for; P = tok_cap_ x topk pairs): router logits
  // [T, E] f32, pair experts / weights / sorted order [P], the segments, gate/up [P, 2Fe] act
  // (SIMT path), SwiGLU [P, Fe] act, expert outputs [P, D] f32, shared expert output [T, D] f32.
  DeviceBuffer moe_logits_, moe_ids_, moe_weights_, moe_order_, moe_seg_, moe_gu_, moe_act_, moe_out_, moe_shared_;
  // Native quantized matmuls (cuda_sizing.h QuantScratch): int8 activations and their scales,
  // the dequantized weight; views into quant_scratch_.
  DeviceBuffer quant_scratch_;
  // Act-order weights' inputs gathered into their column order: [tokens, max K] act (or empty).
  DeviceBuffer gather_scratch_;
  int8_t* xq_ = nullptr;
  float2* xds_ = nullptr;
  uint8_t* dequant_ = nullptr;
  // FP8 weights' activations for the cuBLASLt FP8 GEMM (cuda_sizing.h QuantScratch::fp8_bytes):
  // codes [fp8_rows_cap_, max K] e4m3 and one f32 scale a row; the unscaled GEMM's output
  // [kFp8UnscaledRows, max N] f32 (used only where cuBLASLt has no outer-vector scaling).
  DeviceBuffer fp8_scratch_;
  uint8_t* fp8_xq_ = nullptr;
  float* fp8_xs_ = nullptr;
  float* fp8_acc_ = nullptr;
  int64_t fp8_rows_cap_ = 0;
  bool fp8_unscaled_logged_ = false;
  DeviceBuffer sample_work_, sample_mask_, sample_out_dev_, sample_params_dev_, penalties_dev_, blocked_dev_, biases_dev_;
  DeviceBuffer token_masks_dev_, token_mask_rows_dev_;     // structured outputs (SampleSpec::allowed_mask)
  PinnedBuffer token_masks_host_, token_mask_rows_host_;
  // Prompt logprobs (row_logprobs): the rows asked for, their outputs and ranks; grown on demand.
  DeviceBuffer row_lp_rows_dev_, row_lp_out_dev_;
  PinnedBuffer row_lp_rows_host_, row_lp_out_host_;
  int64_t penalties_cap_ = 0, blocked_cap_ = 0;
  PinnedBuffer sample_params_host_, sample_out_host_, penalties_host_, blocked_host_, biases_host_, logits_host_;
  int64_t workspace_bytes_ = 0;
  InputRegion eager_, graph_;
  int64_t bt_stride_ = 0;

  std::vector<int64_t> buckets_;
  bool graphs_on_ = true;
  std::vector<int64_t> capture_;  // target layers whose output rows a step captures, in column order
  DeviceBuffer capture_dev_;      // [graph_.tok_cap, capture_.size() * D] f32: rows a graph writes
  PinnedBuffer capture_host_;     // [capture_host_rows_, capture_.size() * D] f32: the last step's rows
  int64_t capture_host_rows_ = 0;
  // Batch token -> row of capture_host_ for the last step (a verification graph's layout); empty:
  // row t is batch token t.
  std::vector<int32_t> capture_rows_;
  Tensor captured_;               // [T, capture_.size() * D] f32 host, of the last step
  int64_t capture_width() const { return static_cast<int64_t>(capture_.size()) * d_.D; }
  // Copies the residual rows [0, T) of layer `layer` (if captured) into its columns of capture_dev_
  // (the stream is being captured into a graph) or capture_host_ (eager).
  void capture_layer(int64_t layer, int64_t T);
  // capture_host_ holds at least `rows` rows (grown after a stream synchronisation).
  void reserve_capture_host(int64_t rows);
  // After a replayed graph: its rows [0, rows) of capture_dev_ copied to capture_host_, batch token
  // t in row map[t] (nullptr: row t).
  void copy_graph_capture(int64_t rows, const std::vector<int32_t>* map);
  // After the step's stream synchronisation: captured_ holds the T batch tokens' rows in order.
  void finish_capture(int64_t T);
  std::unordered_map<int64_t, cudaGraphExec_t> graphs_;
  std::set<int64_t> captured_shapes_;  // step_graph_key(shape, false) of the shapes captured (lazy capture)
  // Verification graphs (rows > 1): how many exist, the device memory their capture took (free
  // memory before minus after, including cuBLASLt's autotuned plans), steps replayed.
  int64_t verify_graphs_ = 0, verify_graph_bytes_ = 0, verify_steps_ = 0;
  std::vector<int32_t> graph_token_map_;  // batch token -> graph token (replay_verify_graph)
  cuda::OpProfiler profiler_;  // tuning.cuda_profile: every step eager, timed per op
  cuda::StepTimer step_timer_;  // host phases of a step, decode graphs' device time (pagoda bench)
  Tensor logits_tensor_;
  int64_t last_logits_rows_ = 0;
  PinnedBuffer residual_host_;  // a split's first part: the residual rows of the last step, [T, D] f32
  // output_logits: [kOutputRows, D] f32 and act inputs, [kOutputRows, V] f32 logits.
  static constexpr int64_t kOutputRows = 16;
  DeviceBuffer head_in_, head_act_, head_logits_;
  Tensor residual_tensor_;      // view of residual_host_
};

}  // namespace pagoda::cuda_impl
