// The CUDA executor: weights, paged KV cache, activation workspace and the layer ops of any
// family's forward pass (model/layer_ops.h) on one GPU, with decode steps replayed from CUDA
// graphs and sampling on the device. runtime/cuda_executor.h states the compute paths and the
// batch-invariance contract.
//
// The layer ops of one forward pass (T tokens) and the kernels they launch:
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
// lm_head GEMVs, SwiGLU into gate/up); otherwise cuBLASLt (residual add as its beta = 1 epilogue). Kernel choices and diagnostics
// come from CudaExecutorOptions::tuning.
//
// Inputs of a step (token ids, positions, slots, attention rows, block tables, ...) are packed
// on the host into pinned memory and copied with two or three asynchronous copies into fixed
// device buffers, so a decode step (every sequence one new token, up to the largest bucket) is
// one cudaGraphLaunch of the graph captured for its padded batch size. Padding rows have context
// 0 (attention writes zeros) and slot -1 (no KV write).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
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
#include "backend/cuda/step_timer.h"
#include "backend/cuda/weight_uploader.h"
#include "model/family.h"
#include "ops/linear.h"
#include "runtime/cuda_executor.h"

namespace pagoda {
namespace {

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

struct StepShape {
  int64_t tokens = 0;    // T
  int64_t rows = 0;      // split-KV attention rows
  int64_t items = 0;     // prefill tiles
  int64_t logits = 0;    // logits rows
  int64_t max_keys = 0;  // bound on any row's keys (grid sizing)
  bool decode = false;   // every token is a decode row: its own key is the only one this step writes
};

// Graph of a decode bucket: captured with max_keys = max_model_len, and for the small buckets also
// with max_keys = cuda::kRowShortKeys (row_attention picks its SIMT kernel there: kernels.h),
// replayed by the batch's longest context.
int64_t graph_key(int64_t bucket, bool short_keys) { return 2 * bucket + (short_keys ? 1 : 0); }

static_assert(cuda::kGemvMaxM == kTuningMaxGemvRows, "TuningConfig::gemv_max_rows bounds the GEMV's rows");

class CudaExecutor final : public ModelExecutor {
 public:
  CudaExecutor(const Model& model, const KvCacheSpec& spec, const CudaExecutorOptions& opt, DType act)
      : model_(model), d_(model), spec_(spec), opt_(opt), act_(act), caps_(opt) {}

  ~CudaExecutor() override {
    cudaSetDevice(opt_.device);
    cudaStreamSynchronize(stream_);
    for (auto& [b, g] : graphs_) cudaGraphExecDestroy(g);
    cudaStreamDestroy(stream_);
    cuda::block_trace_write();  // tuning.block_trace: the last step's warp records
  }

  Status init();

  std::string device_name() const override { return fmt::format("cuda:{}", opt_.device); }
  std::string describe() const override;
  const Tensor& forward(const ForwardBatch& batch) override;
  bool samples_on_device() const override { return true; }
  void forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> specs,
                      std::vector<SampleResult>& results) override;
  void swap_out(const std::vector<BlockCopy>& copies) override { swap(copies, true); }
  void swap_in(const std::vector<BlockCopy>& copies) override { swap(copies, false); }
  int64_t workspace_bytes() const override { return workspace_bytes_; }
  int64_t kv_cache_bytes() const override { return static_cast<int64_t>(kv_.bytes()); }
  DeviceMemoryStats device_memory() const override { return cuda::device_memory_stats(opt_.device); }
  bool set_graphs_enabled(bool on) override {
    graphs_on_ = on && opt_.cuda_graphs;
    return opt_.cuda_graphs;
  }
  std::string profile_report() const override { return profiler_.report() + step_timer_.report(); }
  int64_t linear_weight_bytes() const override {
    int64_t total = 0;
    for (const auto& w : linears_)
      for (const auto& seg : w.segments) total += cuda::device_weight_bytes(seg.format, seg.n, w.k);
    return total;
  }

 private:
  class StepOps;  // the layer ops of one launch_forward()

  void upload_weights();
  void allocate_workspace(int64_t tokens, int64_t logits_rows);
  void capture_graphs();
  void destroy_graphs();
  cuda::KvCacheLayer kv_layer(int64_t l) const;
  // y = x w^T for M rows; N, K from the weight.
  void linear(const void* x, const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode);
  // The same for a dense [N, K] weight in the compute dtype; kSwiGlu only through the bf16 GEMV.
  void dense_linear(const void* x, const void* w, int64_t N, int64_t K, int64_t M, void* y, GemmOut mode);
  void quant_linear(const void* x, const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode);
  // Whether M rows over a native quantized weight take the int8 GEMV (not batch-invariant).
  bool quant_gemv(int64_t M, const cuda::DeviceWeight& w) const {
    return w.quantized() && !opt_.batch_invariant && M <= opt_.tuning.quant_gemv_max_rows;
  }
  const cuda::DeviceWeight& weight(LinearId id) const { return linears_.at(static_cast<size_t>(id.index)); }
  const float* vec(VectorId id) const {
    return id.defined() ? vectors_.at(static_cast<size_t>(id.index)).as<float>() : nullptr;
  }
  // Whether M rows of a bf16 linear layer take our GEMV (not batch-invariant, at most
  // tuning.gemv_max_rows rows) with the preceding RMSNorm fused in.
  bool use_norm_gemv(int64_t M, const cuda::DeviceWeight& w) const {
    return !w.quantized() && !opt_.batch_invariant && act_ == DType::kBF16 && M <= opt_.tuning.gemv_max_rows &&
           cuda::gemv_norm_supported(M, w.k);
  }
  // The operands both attention kernels take from a step: q, the output, block tables, the layer's
  // cache, heads, scale, window.
  template <class P>
  void set_attention_operands(P& p, const InputRegion& in, const cuda::KvCacheLayer& kv) const {
    p.q = q_.as<float>();
    p.q_stride = d_.Q;
    p.out = attn_.get();
    p.out_dtype = act_;
    p.out_stride = d_.Q;
    p.block_tables = in.d<int32_t>(in.o_bt);
    p.bt_stride = in.bt_stride;
    p.cache = kv;
    p.num_heads = d_.H;
    p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d_.Dh)));
    p.window = model_.config().sliding_window;
  }
  void launch_forward(const InputRegion& in, const StepShape& sh);
  // Runs the forward pass of `batch`; logits rows [0, n) are then in logits_.
  void run_step(const ForwardBatch& batch);
  void copy_inputs(const InputRegion& in, int64_t seqs, int64_t max_blocks, int64_t items);
  void swap(const std::vector<BlockCopy>& copies, bool out);

  const Model& model_;
  Dims d_;
  KvCacheSpec spec_;
  CudaExecutorOptions opt_;
  DType act_;
  Capacities caps_;
  bool use_prefill_kernel_ = false;
  int sms_ = 0;
  std::string gpu_name_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::BlasLt> blas_;

  DeviceBuffer embed_, rope_cos_, rope_sin_;                // [V, D] act; [max_pos, half] f32 each
  std::vector<cuda::DeviceWeight> linears_;                 // by LinearId (model/model_weights.h)
  std::vector<DeviceBuffer> vectors_;                       // by VectorId: [n] f32
  DeviceBuffer kv_;
  int64_t kv_layer_bytes_ = 0;
  PinnedBuffer host_kv_;

  // Workspace.
  int64_t tok_cap_ = 0, logits_cap_ = 0;
  DeviceBuffer residual_, hidden_, qkv_, q_, attn_, gu_, act_buf_, last_, logits_, part_o_, part_ml_, att_counters_;
  // Native quantized matmuls (cuda_sizing.h QuantScratch): int8 activations and their scales,
  // the dequantized weight; views into quant_scratch_.
  DeviceBuffer quant_scratch_;
  int8_t* xq_ = nullptr;
  float2* xds_ = nullptr;
  uint8_t* dequant_ = nullptr;
  DeviceBuffer sample_work_, sample_mask_, sample_out_dev_, sample_params_dev_, penalties_dev_, blocked_dev_, biases_dev_;
  DeviceBuffer token_masks_dev_, token_mask_rows_dev_;     // structured outputs (SampleSpec::allowed_mask)
  PinnedBuffer token_masks_host_, token_mask_rows_host_;
  int64_t penalties_cap_ = 0, blocked_cap_ = 0;
  PinnedBuffer sample_params_host_, sample_out_host_, penalties_host_, blocked_host_, biases_host_, logits_host_;
  int64_t workspace_bytes_ = 0;
  InputRegion eager_, graph_;
  int64_t bt_stride_ = 0;

  std::vector<int64_t> buckets_;
  bool graphs_on_ = true;
  std::unordered_map<int64_t, cudaGraphExec_t> graphs_;
  cuda::OpProfiler profiler_;  // tuning.cuda_profile: every step eager, timed per op
  cuda::StepTimer step_timer_;  // host phases of a step, decode graphs' device time (pagoda bench)
  Tensor logits_tensor_;
  int64_t last_logits_rows_ = 0;
};

Status CudaExecutor::init() {
  CUDA_CHECK(cudaSetDevice(opt_.device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  step_timer_.init();
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, opt_.device));
  sms_ = prop.multiProcessorCount;
  gpu_name_ = prop.name;
  blas_ = std::make_unique<cuda::BlasLt>();
  if (opt_.tuning.cuda_profile) profiler_.enable();
  cuda::block_trace_open(opt_.tuning.block_trace);
  if (!kv_cache_dtype_supported(spec_.dtype))
    return invalid_argument("CUDA KV cache dtype must be f32, f16, bf16 or f8_e4m3, got {}", dtype_name(spec_.dtype));
  if (d_.Dh > 256) return unimplemented("head_dim {} > 256 is not supported on CUDA", d_.Dh);
  if (opt_.prefill_tile_q != 64 && opt_.prefill_tile_q != 128)
    return invalid_argument("prefill query tile must be 64 or 128, got {}", opt_.prefill_tile_q);
  use_prefill_kernel_ = !opt_.batch_invariant && act_ == DType::kBF16 &&
                        cuda::prefill_attention_supported(d_.Dh, spec_.dtype);
  upload_weights();

  // KV cache: per layer K then V, each [num_blocks, KVH, block_size, Dh].
  kv_layer_bytes_ = spec_.num_blocks * d_.KVH * spec_.block_size * d_.Dh * elem_bytes(spec_.dtype);
  kv_.reset(static_cast<size_t>(2 * d_.L * kv_layer_bytes_));
  CUDA_CHECK(cudaMemsetAsync(kv_.get(), 0, kv_.bytes(), stream_));
  if (spec_.num_host_blocks > 0) {
    host_kv_.reset(static_cast<size_t>(2 * d_.L * spec_.num_host_blocks * d_.KVH * spec_.block_size * d_.Dh *
                                       elem_bytes(spec_.dtype)));
  }
  bt_stride_ = (opt_.max_model_len + spec_.block_size - 1) / spec_.block_size + 1;
  graph_.allocate(std::max<int64_t>(1, caps_.max_bucket), std::max<int64_t>(1, caps_.max_bucket), bt_stride_);
  allocate_workspace(caps_.tokens, caps_.logits);
  buckets_ = graph_buckets(std::max<int64_t>(1, opt_.max_num_seqs));
  // Block trace: every step eager (a replayed graph would write its capture's trace slots).
  if (opt_.cuda_graphs && !cuda::block_trace_enabled()) capture_graphs();
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return {};
}

std::string CudaExecutor::describe() const {
  std::map<std::string, int64_t> formats;  // weight formats on the device, by bytes
  for (const auto& w : linears_)
    for (const auto& seg : w.segments) formats[std::string(dtype_name(seg.format))] += cuda::device_weight_bytes(seg.format, seg.n, w.k);
  std::string weights;
  for (const auto& [name, bytes] : formats) weights += fmt::format("{}{} {:.1f} MiB", weights.empty() ? "" : ", ", name, bytes / 1048576.0);
  return fmt::format("cuda:{} ({}, {} SMs) | compute {} | weights {} | kv {} | prefill attention {} | graphs {}{} | "
                     "batch-invariant {} | NVML {}",
                     opt_.device, gpu_name_, sms_, dtype_name(act_), weights, dtype_name(spec_.dtype),
                     use_prefill_kernel_ ? "tensor-core" : "split-KV rows",
                     opt_.cuda_graphs ? fmt::format("on ({} buckets up to {})", buckets_.size(), caps_.max_bucket) : "off",
                     profiler_.enabled()         ? " (not replayed: the profiler times every step eagerly)"
                     : cuda::block_trace_enabled() ? " (not captured: the block trace records every step eagerly)"
                                                   : "",
                     opt_.batch_invariant ? "on" : "off", cuda::nvml_available() ? "yes" : "no");
}

void CudaExecutor::upload_weights() {
  const ModelWeights& w = model_.weights();
  cuda::WeightUploader up(stream_);
  embed_.reset(static_cast<size_t>(cuda::device_weight_bytes(act_, w.token_embd.dim(0), w.token_embd.dim(1))));
  up.upload(w.token_embd, act_, embed_.get());
  linears_.resize(w.linears.size());
  const bool native = cuda::native_quant(opt_);
  for (size_t i = 0; i < w.linears.size(); ++i) {
    const LinearEntry& e = w.linears[i];
    cuda::DeviceWeight& dw = linears_[i];
    dw.n = e.n();
    dw.k = e.k();
    if (e.parts.size() == 1 && e.parts[0].data() == w.token_embd.data()) {
      dw.segments = {{act_, 0, dw.n, 0, embed_.get()}};  // the tied output projection reads the embedding's copy
      continue;
    }
    int64_t bytes = 0;
    dw.segments = cuda::plan_device_weight(e, act_, native, &bytes);
    dw.storage.reset(static_cast<size_t>(bytes));
    for (auto& seg : dw.segments) seg.data = dw.storage.as<uint8_t>() + seg.offset;
    int64_t row = 0;  // parts stacked along N, each copied, converted or dequantized on the way
    for (const Tensor& part : e.parts) {
      const cuda::DeviceWeightSegment* seg = &dw.segments.front();
      for (const auto& sg : dw.segments)
        if (row >= sg.row0 && row < sg.row0 + sg.n) seg = &sg;
      up.upload(part, seg->format,
                dw.storage.as<uint8_t>() + seg->offset + cuda::device_weight_bytes(seg->format, row - seg->row0, dw.k));
      row += part.dim(0);
    }
  }
  vectors_.resize(w.vectors.size());
  for (size_t i = 0; i < w.vectors.size(); ++i) {
    const Tensor& v = w.vectors[i];
    PAGODA_CHECK(v.dtype() == DType::kF32, "expected an f32 vector");
    vectors_[i].reset(static_cast<size_t>(v.numel() * 4));
    up.upload_f32(v.data_as<float>(), v.numel(), vectors_[i].get());
  }
  const RopeTable& rope = model_.rope();
  rope_cos_.reset(static_cast<size_t>(d_.max_pos * d_.half * 4));
  rope_sin_.reset(static_cast<size_t>(d_.max_pos * d_.half * 4));
  up.upload_f32(rope.cos(0), d_.max_pos * d_.half, rope_cos_.get());
  up.upload_f32(rope.sin(0), d_.max_pos * d_.half, rope_sin_.get());
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaExecutor::allocate_workspace(int64_t tokens, int64_t logits_rows) {
  const int64_t e = elem_bytes(act_);
  tok_cap_ = tokens;
  logits_cap_ = logits_rows;
  residual_.reset(static_cast<size_t>(tokens * d_.D * 4));
  hidden_.reset(static_cast<size_t>(tokens * d_.D * e));
  qkv_.reset(static_cast<size_t>(tokens * d_.Nqkv * 4));
  q_.reset(static_cast<size_t>(tokens * d_.Q * 4));
  attn_.reset(static_cast<size_t>(tokens * d_.Q * e));
  gu_.reset(static_cast<size_t>(tokens * 2 * d_.F * e));
  act_buf_.reset(static_cast<size_t>(tokens * d_.F * e));
  const int64_t rows = caps_.att_rows;
  part_o_.reset(static_cast<size_t>(rows * d_.H * cuda::kRowMaxSplits * d_.Dh * 4));
  part_ml_.reset(static_cast<size_t>(rows * d_.H * cuda::kRowMaxSplits * 2 * 4));
  att_counters_.reset(static_cast<size_t>(rows * d_.H * 4));  // >= rows x kv heads x head chunks
  CUDA_CHECK(cudaMemsetAsync(att_counters_.get(), 0, att_counters_.bytes(), stream_));
  last_.reset(static_cast<size_t>(logits_rows * d_.D * e));
  logits_.reset(static_cast<size_t>(logits_rows * d_.V * 4));
  const int64_t srows = caps_.seqs;
  sample_work_.reset(static_cast<size_t>(srows * d_.V * 4));
  sample_mask_.reset(static_cast<size_t>(srows * d_.V));
  sample_out_dev_.reset(static_cast<size_t>(srows) * sizeof(cuda::SampleOutput));
  sample_params_dev_.reset(static_cast<size_t>(srows) * sizeof(cuda::SampleRowParams));
  sample_out_host_.reset(static_cast<size_t>(srows) * sizeof(cuda::SampleOutput));
  sample_params_host_.reset(static_cast<size_t>(srows) * sizeof(cuda::SampleRowParams));
  eager_.allocate(tokens, std::max<int64_t>(caps_.seqs, tokens / 16 + 1), bt_stride_);
  const cuda::QuantScratch qs = cuda::quant_scratch_for(model_, act_, cuda::native_quant(opt_));
  if (qs.max_k > 0) {
    quant_scratch_.reset(static_cast<size_t>(qs.bytes(act_)));
    xq_ = quant_scratch_.as<int8_t>();
    xds_ = reinterpret_cast<float2*>(quant_scratch_.as<uint8_t>() + cuda::align_up(cuda::kQuantGemvMaxM * qs.max_k, 256));
    dequant_ = quant_scratch_.as<uint8_t>() + cuda::align_up(cuda::kQuantGemvMaxM * qs.max_k, 256) +
               cuda::align_up(cuda::kQuantGemvMaxM * (qs.max_k / 32) * 8, 256);
  }
  workspace_bytes_ = cuda::workspace_bytes_for(d_, act_, tokens, rows) + qs.bytes(act_) +
                     cuda::logits_bytes_for(d_, act_, logits_rows, srows);
}

cuda::KvCacheLayer CudaExecutor::kv_layer(int64_t l) const {
  cuda::KvCacheLayer k;
  k.k = kv_.as<uint8_t>() + 2 * l * kv_layer_bytes_;
  k.v = kv_.as<uint8_t>() + (2 * l + 1) * kv_layer_bytes_;
  k.dtype = spec_.dtype;
  k.num_blocks = spec_.num_blocks;
  k.block_size = spec_.block_size;
  k.num_kv_heads = d_.KVH;
  k.head_dim = d_.Dh;
  return k;
}

void CudaExecutor::linear(const void* x, const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode) {
  if (M <= 0) return;
  if (w.quantized()) return quant_linear(x, w, M, y, mode);
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

// Native quantized weights: the int8 GEMV per segment for few rows (outputs at the segment's
// columns; a SwiGLU over gate/up in two formats goes through gu_ and the swiglu kernel), else the
// weight dequantized into the scratch and the dense path.
void CudaExecutor::quant_linear(const void* x, const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode) {
  const int64_t N = w.n, K = w.k;
  if (quant_gemv(M, w)) {
    cuda::quantize_activations_q8(x, act_, M, K, xq_, xds_, stream_);
    if (mode == GemmOut::kSwiGlu && !w.uniform()) {
      for (const auto& seg : w.segments)
        cuda::gemv_quant(xq_, xds_, seg.data, seg.format, M, seg.n, K, gu_.as<uint16_t>() + seg.row0, N,
                         GemmOut::kStoreAct, stream_);
      cuda::swiglu(gu_.get(), M, N / 2, y, act_, stream_);
      return;
    }
    for (const auto& seg : w.segments) {
      const bool f32_out = mode == GemmOut::kStoreF32 || mode == GemmOut::kAddF32;
      void* ys = f32_out ? static_cast<void*>(static_cast<float*>(y) + seg.row0)
                         : static_cast<void*>(static_cast<uint16_t*>(y) + seg.row0);
      cuda::gemv_quant(xq_, xds_, seg.data, seg.format, M, seg.n, K, ys, mode == GemmOut::kSwiGlu ? N / 2 : N, mode,
                       stream_);
    }
    return;
  }
  PAGODA_CHECK(mode != GemmOut::kSwiGlu, "the dequantized path has no fused SwiGLU");
  for (const auto& seg : w.segments)
    cuda::dequantize_weight(seg.data, seg.format, seg.n, K, dequant_ + seg.row0 * K * cuda::elem_bytes(act_), act_,
                            stream_);
  dense_linear(x, dequant_, N, K, M, y, mode);
}

// The layer ops of one forward pass on the executor's buffers: `in` holds the step's inputs on
// the device, `sh` its shape. Each op launches what the replaced launch sequence launched, in
// the same order (a decode step replays them from a graph).
class CudaExecutor::StepOps final : public LayerOps {
 public:
  StepOps(CudaExecutor& ex, const InputRegion& in, const StepShape& sh)
      : ex_(ex), in_(in), sh_(sh), T_(sh.tokens) {}

  void embed() override {
    cuda::embedding(ex_.embed_.get(), ex_.act_, in_.d<int32_t>(in_.o_ids), T_, ex_.d_.D, ex_.residual_.as<float>(),
                    ex_.stream_);
    ex_.profiler_.mark("embedding", ex_.stream_);
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
    rp.rope_dim = e.model_.rope().rope_dim();
    rp.bias = e.vec(a.qkv_bias);
    rp.q_norm = e.vec(a.q_norm);
    rp.k_norm = e.vec(a.k_norm);
    rp.norm_eps = static_cast<float>(a.norm_eps);
    rp.cos = e.rope_cos_.as<float>();
    rp.sin = e.rope_sin_.as<float>();
    rp.interleaved = e.model_.rope().layout() == RopeLayout::kInterleaved;
    rp.positions = in_.d<int32_t>(in_.o_pos);
    rp.slots = in_.d<int32_t>(in_.o_slots);
    rp.q_out = e.q_.as<float>();
    rp.cache = kv;
    cuda::RowAttentionParams ap;
    e.set_attention_operands(ap, in_, kv);
    ap.max_keys = sh_.max_keys;
    ap.num_sms = e.sms_;
    ap.part_o = e.part_o_.as<float>();
    ap.part_ml = e.part_ml_.as<float>();
    ap.counters = e.att_counters_.as<int>();
    ap.tensor_cores = e.use_prefill_kernel_ && e.opt_.tuning.row_attention != "simt";
    ap.tensor_cores_short = e.opt_.tuning.row_attention == "mma";
    ap.simt_heads_per_block = e.opt_.tuning.simt_heads;
    ap.fresh_keys = sh_.decode ? 1 : -1;
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
      e.set_attention_operands(pp, in_, kv);
      pp.seqs = in_.d<cuda::PrefillSeq>(in_.o_pseqs);
      pp.items = in_.d<cuda::PrefillItem>(in_.o_pitems);
      pp.num_items = sh_.items;
      pp.tile_q = e.opt_.prefill_tile_q;
      cuda::prefill_attention(pp, e.stream_);
      e.profiler_.mark("attention prefill", e.stream_);
    }
  }

  void linear_residual(LinearId wid) override {
    ex_.linear(ex_.attn_.get(), ex_.weight(wid), T_, ex_.residual_.get(), GemmOut::kAddF32);
    ex_.profiler_.mark("o", ex_.stream_);
  }

  void gated_mlp(const NormArgs& norm, LinearId gate_up, LinearId down) override {
    CudaExecutor& e = ex_;
    const cuda::DeviceWeight& gu = e.weight(gate_up);
    const int64_t F = gu.n / 2;
    if (e.use_norm_gemv(T_, gu)) {  // norm + gate/up + SwiGLU in one GEMV
      const cuda::GemvNorm nrm{e.residual_.as<float>(), nullptr, e.vec(norm.weight), static_cast<float>(norm.eps)};
      cuda::gemv_bf16(nullptr, gu.data(), T_, gu.n, gu.k, e.act_buf_.get(), F, GemmOut::kSwiGlu, e.stream_, &nrm);
      e.profiler_.mark("norm+gate/up+swiglu gemv", e.stream_);
    } else if (e.quant_gemv(T_, gu)) {  // gate/up + SwiGLU in one int8 GEMV
      cuda::rms_norm(e.residual_.as<float>(), nullptr, T_, gu.k, e.vec(norm.weight), static_cast<float>(norm.eps),
                     e.hidden_.get(), e.act_, e.stream_);
      e.profiler_.mark("rms_norm", e.stream_);
      e.linear(e.hidden_.get(), gu, T_, e.act_buf_.get(), GemmOut::kSwiGlu);
      e.profiler_.mark("gate/up+swiglu", e.stream_);
    } else {
      cuda::rms_norm(e.residual_.as<float>(), nullptr, T_, gu.k, e.vec(norm.weight), static_cast<float>(norm.eps),
                     e.hidden_.get(), e.act_, e.stream_);
      e.profiler_.mark("rms_norm", e.stream_);
      e.linear(e.hidden_.get(), gu, T_, e.gu_.get(), GemmOut::kStoreAct);
      e.profiler_.mark("gate/up", e.stream_);
      cuda::swiglu(e.gu_.get(), T_, F, e.act_buf_.get(), e.act_, e.stream_);
      e.profiler_.mark("swiglu", e.stream_);
    }
    e.linear(e.act_buf_.get(), e.weight(down), T_, e.residual_.get(), GemmOut::kAddF32);
    e.profiler_.mark("down", e.stream_);
  }

  void final_logits(const NormArgs& norm, LinearId wid) override {
    if (sh_.logits <= 0) return;
    norm_linear(norm, ex_.weight(wid), sh_.logits, in_.d<int32_t>(in_.o_lrows), ex_.logits_.get(), GemmOut::kStoreF32,
                nullptr, nullptr);
    ex_.profiler_.mark("final norm+lm_head", ex_.stream_);
  }

 private:
  // y[M, N] = rms_norm(residual[rows]) w^T (rows: nullptr for the first M rows, else M row
  // indices): one GEMV with the norm fused where it applies, else the norm into `hidden` (the
  // `last` buffer for gathered rows) and a matmul. Labels non-null: profiler marks.
  void norm_linear(const NormArgs& norm, const cuda::DeviceWeight& w, int64_t M, const int32_t* rows, void* y,
                   GemmOut mode, const char* fused_label, const char* label) {
    CudaExecutor& e = ex_;
    const float eps = static_cast<float>(norm.eps);
    if (e.use_norm_gemv(M, w)) {
      const cuda::GemvNorm nrm{e.residual_.as<float>(), rows, e.vec(norm.weight), eps};
      cuda::gemv_bf16(nullptr, w.data(), M, w.n, w.k, y, w.n, mode, e.stream_, &nrm);
      if (fused_label) e.profiler_.mark(fused_label, e.stream_);
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
  model_.forward(ops);
}

void CudaExecutor::copy_inputs(const InputRegion& in, int64_t seqs, int64_t max_blocks, int64_t items) {
  CUDA_CHECK(cudaMemcpyAsync(in.dev.get(), in.host.get(), in.o_small_end, cudaMemcpyHostToDevice, stream_));
  if (items > 0) {
    const size_t end = in.o_pitems + static_cast<size_t>(items) * sizeof(cuda::PrefillItem);
    CUDA_CHECK(cudaMemcpyAsync(in.dev.as<uint8_t>() + in.o_pseqs, in.host.as<uint8_t>() + in.o_pseqs, end - in.o_pseqs,
                               cudaMemcpyHostToDevice, stream_));
  }
  if (seqs > 0 && max_blocks > 0) {
    const size_t pitch = static_cast<size_t>(in.bt_stride) * 4;
    CUDA_CHECK(cudaMemcpy2DAsync(in.dev.as<uint8_t>() + in.o_bt, pitch, in.host.as<uint8_t>() + in.o_bt, pitch,
                                 static_cast<size_t>(max_blocks) * 4, static_cast<size_t>(seqs), cudaMemcpyHostToDevice,
                                 stream_));
  }
}

void CudaExecutor::destroy_graphs() {
  for (auto& [b, g] : graphs_) CUDA_CHECK(cudaGraphExecDestroy(g));
  graphs_.clear();
}

void CudaExecutor::capture_graphs() {
  destroy_graphs();
  // Padding inputs everywhere: context 0, slot -1, token 0, logits row = row.
  InputRegion& in = graph_;
  const int64_t cap = in.tok_cap;
  for (int64_t i = 0; i < cap; ++i) {
    in.h<int32_t>(in.o_ids)[i] = 0;
    in.h<int32_t>(in.o_pos)[i] = 0;
    in.h<int32_t>(in.o_slots)[i] = -1;
    in.h<int32_t>(in.o_rtok)[i] = static_cast<int32_t>(i);
    in.h<int32_t>(in.o_rseq)[i] = static_cast<int32_t>(i);
    in.h<int32_t>(in.o_rctx)[i] = 0;
    in.h<int32_t>(in.o_lrows)[i] = static_cast<int32_t>(i);
  }
  copy_inputs(in, 0, 0, 0);
  for (int64_t b : buckets_) {
    if (b > cap || b > tok_cap_ || b > logits_cap_) continue;
    for (bool short_keys : {false, true}) {
      StepShape sh;
      sh.tokens = sh.rows = sh.logits = b;
      sh.decode = true;
      sh.max_keys = short_keys ? std::min(cuda::kRowShortKeys, opt_.max_model_len) : opt_.max_model_len;
      // The short graph only where it differs from the other one.
      if (short_keys && (!cuda::row_attention_short(b, sh.max_keys) || cuda::row_attention_short(b, opt_.max_model_len)))
        continue;
      // Warm-up: cuBLASLt plans (autotuned for these decode shapes) and kernel attributes outside
      // the capture.
      blas_->set_autotune(true);
      launch_forward(in, sh);
      blas_->set_autotune(false);
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      cudaGraph_t graph;
      CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      launch_forward(in, sh);
      CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
      cudaGraphExec_t exec;
      CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      CUDA_CHECK(cudaGraphDestroy(graph));
      graphs_[graph_key(b, short_keys)] = exec;
    }
  }
}

void CudaExecutor::run_step(const ForwardBatch& batch) {
  CUDA_CHECK(cudaSetDevice(opt_.device));
  step_timer_.begin_step();
  const int64_t T = batch.num_tokens();
  const int64_t n_seqs = static_cast<int64_t>(batch.seqs.size());
  const int64_t n_logits = static_cast<int64_t>(batch.logits_rows.size());
  PAGODA_CHECK(T > 0, "empty batch");
  int64_t max_blocks = 0;
  for (const auto& s : batch.seqs) {
    const int64_t nb = static_cast<int64_t>(s.block_table.size());
    PAGODA_CHECK(nb <= bt_stride_, "a block table of {} blocks exceeds max_model_len {} (block size {})", nb,
                 opt_.max_model_len, spec_.block_size);
    max_blocks = std::max(max_blocks, nb);
  }
  // Grow the workspace (and re-capture the graphs, whose pointers change) when needed.
  if (T > tok_cap_ || n_logits > logits_cap_ || n_seqs > eager_.seq_cap) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    allocate_workspace(std::max(tok_cap_, align_up(T, 256)), std::max(logits_cap_, align_up(n_logits, 64)));
    if (n_seqs > eager_.seq_cap) eager_.allocate(tok_cap_, n_seqs, bt_stride_);
    if (opt_.cuda_graphs && !cuda::block_trace_enabled()) capture_graphs();
  }
  bool decode = opt_.cuda_graphs && graphs_on_ && !profiler_.enabled() && T <= caps_.max_bucket && n_logits == T && n_seqs == T;
  for (int64_t i = 0; decode && i < n_logits; ++i) decode = batch.logits_rows[i] == i && batch.seqs[i].num_tokens == 1;
  if (decode) {
    const int64_t B = *std::lower_bound(buckets_.begin(), buckets_.end(), T);
    int64_t max_ctx = 0;
    for (const auto& sq : batch.seqs) max_ctx = std::max<int64_t>(max_ctx, sq.context_len);
    auto it = graphs_.find(graph_key(B, cuda::row_attention_short(B, max_ctx)));
    if (it == graphs_.end()) it = graphs_.find(graph_key(B, false));
    decode = it != graphs_.end();
    if (decode) {
      InputRegion& in = graph_;
      for (int64_t i = 0; i < B; ++i) {
        const bool real = i < T;
        in.h<int32_t>(in.o_ids)[i] = real ? batch.token_ids[i] : 0;
        in.h<int32_t>(in.o_pos)[i] = real ? batch.positions[i] : 0;
        in.h<int32_t>(in.o_slots)[i] = real ? static_cast<int32_t>(batch.slots[i]) : -1;
        in.h<int32_t>(in.o_rtok)[i] = static_cast<int32_t>(i);
        in.h<int32_t>(in.o_rseq)[i] = static_cast<int32_t>(i);
        in.h<int32_t>(in.o_rctx)[i] = real ? batch.seqs[i].context_len : 0;
        in.h<int32_t>(in.o_lrows)[i] = static_cast<int32_t>(i);
        if (real) {
          const auto& bt = batch.seqs[i].block_table;
          std::memcpy(in.h<int32_t>(in.o_bt) + i * in.bt_stride, bt.data(), bt.size() * 4);
        }
      }
      copy_inputs(in, T, max_blocks, 0);
      step_timer_.launch_graph(it->second, stream_);
      last_logits_rows_ = n_logits;
      return;
    }
  }
  // Eager: any mix of prefill chunks and decodes.
  InputRegion& in = eager_;
  StepShape sh;
  sh.tokens = T;
  sh.logits = n_logits;
  for (int64_t t = 0; t < T; ++t) {
    in.h<int32_t>(in.o_ids)[t] = batch.token_ids[t];
    in.h<int32_t>(in.o_pos)[t] = batch.positions[t];
    PAGODA_CHECK(batch.slots[t] < (int64_t{1} << 31), "slot {} exceeds int32", batch.slots[t]);
    in.h<int32_t>(in.o_slots)[t] = static_cast<int32_t>(batch.slots[t]);
  }
  auto* pseqs = in.h<cuda::PrefillSeq>(in.o_pseqs);
  auto* pitems = in.h<cuda::PrefillItem>(in.o_pitems);
  int64_t np = 0;
  for (int64_t si = 0; si < n_seqs; ++si) {
    const ForwardSeq& s = batch.seqs[si];
    std::memcpy(in.h<int32_t>(in.o_bt) + si * in.bt_stride, s.block_table.data(), s.block_table.size() * 4);
    if (!use_prefill_kernel_ || s.num_tokens == 1) {
      for (int32_t i = 0; i < s.num_tokens; ++i) {
        const int64_t r = sh.rows++;
        in.h<int32_t>(in.o_rtok)[r] = s.token_begin + i;
        in.h<int32_t>(in.o_rseq)[r] = static_cast<int32_t>(si);
        in.h<int32_t>(in.o_rctx)[r] = s.context_len - s.num_tokens + i + 1;
      }
      sh.max_keys = std::max<int64_t>(sh.max_keys, s.context_len);
    } else {
      pseqs[np] = {s.token_begin, s.num_tokens, s.context_len, static_cast<int32_t>(si)};
      for (int32_t q0 = 0; q0 < s.num_tokens; q0 += opt_.prefill_tile_q) pitems[sh.items++] = {static_cast<int32_t>(np), q0};
      ++np;
    }
  }
  // Longest tiles first: a tile's work grows with the position of its last query.
  std::sort(pitems, pitems + sh.items, [&](const cuda::PrefillItem& a, const cuda::PrefillItem& b) {
    auto last = [&](const cuda::PrefillItem& x) {
      const cuda::PrefillSeq& s = pseqs[x.seq];
      return s.context_len - s.num_queries + std::min(x.q0 + opt_.prefill_tile_q, s.num_queries);
    };
    return last(a) > last(b);
  });
  for (int64_t i = 0; i < n_logits; ++i) in.h<int32_t>(in.o_lrows)[i] = batch.logits_rows[i];
  sh.decode = sh.items == 0 && sh.rows == T && n_seqs == T;
  for (int64_t si = 0; sh.decode && si < n_seqs; ++si) sh.decode = batch.seqs[si].num_tokens == 1;
  profiler_.begin(sh.items == 0 ? "decode" : sh.rows == 0 ? "prefill" : "mixed", stream_);
  copy_inputs(in, n_seqs, max_blocks, sh.items);
  profiler_.mark("input copies", stream_);
  launch_forward(in, sh);
  last_logits_rows_ = n_logits;
}

const Tensor& CudaExecutor::forward(const ForwardBatch& batch) {
  run_step(batch);
  const int64_t n = last_logits_rows_;
  const size_t bytes = static_cast<size_t>(n * d_.V * 4);
  if (logits_host_.bytes() < bytes) logits_host_.reset(std::max(bytes, static_cast<size_t>(d_.V * 4 * 64)));
  if (n > 0) CUDA_CHECK(cudaMemcpyAsync(logits_host_.get(), logits_.get(), bytes, cudaMemcpyDeviceToHost, stream_));
  profiler_.mark("logits to host", stream_);
  profiler_.end();
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  step_timer_.end_step();
  logits_tensor_ = Tensor::view(DType::kF32, {n, d_.V}, logits_host_.get(), nullptr);
  return logits_tensor_;
}

void CudaExecutor::forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> specs,
                                  std::vector<SampleResult>& results) {
  using Clock = cuda::StepTimer::Clock;
  const auto t_start = Clock::now();
  run_step(batch);
  const double launch_s = cuda::StepTimer::seconds(t_start, Clock::now());
  double sampling_s = 0, wait_s = 0;
  results.assign(specs.size(), SampleResult{});
  const int64_t cap = caps_.seqs;
  for (size_t c0 = 0; c0 < specs.size(); c0 += static_cast<size_t>(cap)) {
    const auto t_chunk = Clock::now();
    const size_t n = std::min(specs.size() - c0, static_cast<size_t>(cap));
    auto* prm = sample_params_host_.as<cuda::SampleRowParams>();
    std::vector<cuda::PenaltyEntry> pens;
    std::vector<int32_t> blocked;
    std::vector<cuda::BiasEntry> biases;
    std::vector<int32_t> toks, outs;
    std::vector<int32_t> mask_rows;  // logits rows with an allowed-token mask
    std::vector<uint32_t> masks;     // mask_words words per entry of mask_rows
    const int64_t mask_words = (d_.V + 31) / 32;
    bool plain_greedy = true;  // every row greedy, no penalty entries, blocked ids or logprobs
    for (size_t i = 0; i < n; ++i) {
      const SampleSpec& sp = specs[c0 + i];
      const SamplingParams& P = *sp.params;
      PAGODA_CHECK(sp.logits_row >= 0 && sp.logits_row < last_logits_rows_, "sample row {} of {}", sp.logits_row,
                   last_logits_rows_);
      cuda::SampleRowParams& r = prm[i];
      r.logits_row = static_cast<int32_t>(sp.logits_row);
      r.top_k = P.top_k;
      r.temperature = P.temperature;
      r.top_p = P.top_p;
      r.min_p = P.min_p;
      r.repetition_penalty = P.repetition_penalty;
      r.presence_penalty = P.presence_penalty;
      r.frequency_penalty = P.frequency_penalty;
      r.logprobs = P.logprobs;
      r.uniform = sp.uniform;
      r.pen_begin = static_cast<int32_t>(pens.size());
      const bool rep = P.repetition_penalty != 1.0f, pf = P.presence_penalty != 0.0f || P.frequency_penalty != 0.0f;
      if (rep || pf) {
        outs.assign(sp.history.output.begin(), sp.history.output.end());
        std::sort(outs.begin(), outs.end());
        toks = outs;
        if (rep) toks.insert(toks.end(), sp.history.prompt.begin(), sp.history.prompt.end());
        std::sort(toks.begin(), toks.end());
        toks.erase(std::unique(toks.begin(), toks.end()), toks.end());
        for (int32_t t : toks) {
          const auto range = std::equal_range(outs.begin(), outs.end(), t);
          pens.push_back({t, static_cast<int32_t>(range.second - range.first)});
        }
      }
      r.pen_count = static_cast<int32_t>(pens.size()) - r.pen_begin;
      r.block_begin = static_cast<int32_t>(blocked.size());
      blocked.insert(blocked.end(), sp.blocked_ids.begin(), sp.blocked_ids.end());
      r.block_count = static_cast<int32_t>(blocked.size()) - r.block_begin;
      r.bias_begin = static_cast<int32_t>(biases.size());
      for (const auto& [token, bias] : P.logit_bias) biases.push_back({token, bias});
      r.bias_count = static_cast<int32_t>(biases.size()) - r.bias_begin;
      if (!sp.allowed_mask.empty()) {
        mask_rows.push_back(r.logits_row);
        const size_t at = masks.size();
        masks.resize(at + static_cast<size_t>(mask_words), 0u);
        std::copy_n(sp.allowed_mask.begin(), std::min<size_t>(sp.allowed_mask.size(), static_cast<size_t>(mask_words)),
                    masks.begin() + static_cast<std::ptrdiff_t>(at));
      }
      plain_greedy = plain_greedy && P.greedy() && r.pen_count == 0 && r.block_count == 0 && r.bias_count == 0 &&
                     P.logprobs < 0;
    }
    CUDA_CHECK(cudaMemcpyAsync(sample_params_dev_.get(), prm, n * sizeof(cuda::SampleRowParams), cudaMemcpyHostToDevice,
                               stream_));
    auto stage = [&](auto& vec, PinnedBuffer& host, DeviceBuffer& dev) {
      using T = typename std::decay_t<decltype(vec)>::value_type;
      const size_t bytes = vec.size() * sizeof(T);
      if (bytes == 0) return;
      if (host.bytes() < bytes) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        host.reset(bytes * 2);
        dev.reset(bytes * 2);
      }
      std::memcpy(host.get(), vec.data(), bytes);
      CUDA_CHECK(cudaMemcpyAsync(dev.get(), host.get(), bytes, cudaMemcpyHostToDevice, stream_));
    };
    stage(pens, penalties_host_, penalties_dev_);
    stage(blocked, blocked_host_, blocked_dev_);
    stage(biases, biases_host_, biases_dev_);
    if (!mask_rows.empty()) {
      stage(mask_rows, token_mask_rows_host_, token_mask_rows_dev_);
      stage(masks, token_masks_host_, token_masks_dev_);
      cuda::apply_token_masks(logits_.as<float>(), d_.V, token_mask_rows_dev_.as<int32_t>(), token_masks_dev_.as<uint32_t>(),
                              mask_words, static_cast<int64_t>(mask_rows.size()), stream_);
    }
    cuda::sample_rows(logits_.as<float>(), d_.V, sample_params_dev_.as<cuda::SampleRowParams>(), static_cast<int64_t>(n),
                      penalties_dev_.as<cuda::PenaltyEntry>(), blocked_dev_.as<int32_t>(), sample_work_.as<float>(),
                      sample_mask_.as<uint8_t>(), sample_out_dev_.as<cuda::SampleOutput>(), stream_, plain_greedy,
                      biases.empty() ? nullptr : biases_dev_.as<cuda::BiasEntry>());
    CUDA_CHECK(cudaMemcpyAsync(sample_out_host_.get(), sample_out_dev_.get(), n * sizeof(cuda::SampleOutput),
                               cudaMemcpyDeviceToHost, stream_));
    profiler_.mark("sampling", stream_);
    const auto t_wait = Clock::now();
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    wait_s += cuda::StepTimer::seconds(t_wait, Clock::now());
    sampling_s += cuda::StepTimer::seconds(t_chunk, t_wait);
    const auto* so = sample_out_host_.as<cuda::SampleOutput>();
    for (size_t i = 0; i < n; ++i) {
      SampleResult& res = results[c0 + i];
      const SamplingParams& P = *specs[c0 + i].params;
      res.token = so[i].token;
      if (P.logprobs >= 0) {
        res.logprob = so[i].logprob;
        const int k = std::min<int>({P.logprobs, cuda::kMaxTopLogprobs, static_cast<int>(d_.V)});
        for (int j = 0; j < k && so[i].top_ids[j] >= 0; ++j) res.top.push_back({so[i].top_ids[j], so[i].top_logprobs[j]});
      }
    }
  }
  profiler_.end();
  if (specs.empty()) CUDA_CHECK(cudaStreamSynchronize(stream_));
  step_timer_.end_step();
  step_timer_.add_host(launch_s, sampling_s, wait_s);
}

void CudaExecutor::swap(const std::vector<BlockCopy>& copies, bool out) {
  PAGODA_CHECK(host_kv_.get() != nullptr, "swap without host swap space");
  CUDA_CHECK(cudaSetDevice(opt_.device));
  const int64_t block_bytes = d_.KVH * spec_.block_size * d_.Dh * elem_bytes(spec_.dtype);
  const int64_t host_layer = spec_.num_host_blocks * block_bytes;
  for (int64_t l = 0; l < d_.L; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      uint8_t* dev = kv_.as<uint8_t>() + (2 * l + kv) * kv_layer_bytes_;
      uint8_t* host = host_kv_.as<uint8_t>() + (2 * l + kv) * host_layer;
      for (const auto& [s, d] : copies) {
        if (out) {
          CUDA_CHECK(cudaMemcpyAsync(host + d * block_bytes, dev + s * block_bytes, static_cast<size_t>(block_bytes),
                                     cudaMemcpyDeviceToHost, stream_));
        } else {
          CUDA_CHECK(cudaMemcpyAsync(dev + d * block_bytes, host + s * block_bytes, static_cast<size_t>(block_bytes),
                                     cudaMemcpyHostToDevice, stream_));
        }
      }
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace

Result<std::unique_ptr<ModelExecutor>> make_cuda_executor(const Model& model, const KvCacheSpec& spec,
                                                          const CudaExecutorOptions& options) {
  std::string why;
  if (!cuda_available(&why)) return make_status(StatusCode::kNotFound, "{}", why);
  if (options.device < 0 || options.device >= cuda_device_count())
    return invalid_argument("no CUDA device {} ({} visible)", options.device, cuda_device_count());
  PAGODA_RETURN_IF_ERROR(options.tuning.validate());
  // StepOps implements the Llama family's layer ops only: the Gemma ops (post-norms, GeGLU,
  // soft-capping, per-layer RoPE tables and windows) run on the CPU backend.
  if (model.family().name != "llama")
    return unimplemented("the CUDA backend does not run the {} family ({}) yet; use the CPU (--device cpu)",
                         model.family().name, model.config().arch_name);
  PAGODA_ASSIGN_OR_RETURN(const DType act, resolve_compute_dtype(model, options.dtype));
  auto ex = std::make_unique<CudaExecutor>(model, spec, options, act);
  PAGODA_RETURN_IF_ERROR(ex->init());
  return std::unique_ptr<ModelExecutor>(std::move(ex));
}

}  // namespace pagoda
