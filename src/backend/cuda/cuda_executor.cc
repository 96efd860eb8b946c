// The CUDA executor: weights, paged KV cache, activation workspace and the step of any family's
// forward pass (model/layer_ops.h; the ops themselves: cuda_step_ops.cc) on one GPU, with decode
// steps replayed from CUDA graphs, sampling on the device (cuda_executor_sampling.cc) and the
// hidden-state capture of the draft heads (cuda_hidden_capture.cc).
// runtime/cuda_executor.h states the compute paths and the batch-invariance contract.
//
// Inputs of a step (token ids, positions, slots, attention rows, block tables, ...) are packed
// on the host into pinned memory and copied with two or three asynchronous copies into fixed
// device buffers, so a decode step (every sequence one new token, up to the largest bucket) is
// one cudaGraphLaunch of the graph captured for its padded batch size. So is a verification step
// of speculative decoding (up to 1 + k tokens a sequence, cuda/step_graph_shape.h): graphs keyed by
// (bucket, rows a sequence), every token a split-KV attention row at its own context length.
// Padding rows have context 0 (attention writes zeros) and slot -1 (no KV write).
#include "backend/cuda/cuda_executor_impl.h"
#include "common/log.h"
#include "common/startup_profile.h"

namespace pagoda::cuda_impl {

// Graphs (cuda::step_graph_key): captured with max_keys = max_model_len, and for launches of few
// attention rows also with max_keys = cuda::kRowShortKeys (row_attention picks its SIMT kernel
// there: kernels.h), replayed by the batch's longest context.
using cuda::step_graph_key;
using cuda::StepGraphShape;

static_assert(cuda::kGemvMaxM == kTuningMaxGemvRows, "TuningConfig::gemv_max_rows bounds the GEMV's rows");

Status CudaExecutor::init() {
  startup_profile::Scope init_phase("engine core/executor/cuda context, cuBLASLt");
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
  if (partial()) {
    if (!opt_.layers.valid(d_.L) || !opt_.layers.first())
      return invalid_argument("CUDA layer split: {} (the device runs the first layers)", opt_.layers.to_string(d_.L));
    if (opt_.cpu_offload_bytes > 0)
      return invalid_argument("a layer split (--n-gpu-layers) and weight offload (--cpu-offload-gb) both keep weights off "
                              "the GPU: use one of them");
    if (spec_.num_host_blocks > 0)
      return unimplemented("a layer split (--n-gpu-layers) has no host KV blocks (swap preemption, the KV host and disk tiers)");
  }
  if (tp_ != nullptr) {
    const CudaTensorParallel& tp = opt_.tensor_parallel;
    const int r = tp_->rank();
    if (partial()) return invalid_argument("tensor parallelism with a layer split (--n-gpu-layers)");
    if (tp.vocab_rows_per_rank <= 0 || tp.vocab_begin != r * tp.vocab_rows_per_rank || tp_vocab_rows() <= 0 ||
        tp_vocab_rows() != tp_rank_vocab_rows(r))
      return invalid_argument("tensor-parallel rank {} of {}: its model's {} vocabulary rows from {} do not match the plan "
                              "({} rows a rank of {})", r, tp_->size(), tp_vocab_rows(), tp.vocab_begin,
                              tp.vocab_rows_per_rank, tp.vocab_size);
    // A communicator that synchronises with the host (the staged one) cannot be captured.
    if (!tp_->capturable()) opt_.cuda_graphs = false;
  }
  use_prefill_kernel_ = !opt_.batch_invariant && act_ == DType::kBF16 &&
                        cuda::prefill_attention_supported(d_.Dh, spec_.dtype);
  init_phase.stop();
  PAGODA_RETURN_IF_ERROR(upload_weights());
  startup_profile::Scope kv_phase("engine core/executor/kv cache and workspace");

  // KV cache: per layer K then V, each [num_blocks, KVH, block_size, Dh].
  kv_layer_bytes_ = spec_.num_blocks * d_.KVH * spec_.block_size * d_.Dh * elem_bytes(spec_.dtype);
  {
    // A cache that cannot fit is the caller's sizing error (the memory planner sizes the engine's):
    // said here, before the allocation would abort the process.
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const int64_t kv_bytes = 2 * kv_layers() * kv_layer_bytes_;
    if (kv_bytes > static_cast<int64_t>(free_bytes))
      return resource_exhausted("the KV cache ({} blocks of {} tokens, {}) needs {:.2f} GiB of device memory and {:.2f} GiB "
                                "of {:.2f} GiB is free after the weights: use fewer blocks (a shorter context or fewer "
                                "sequences) or a smaller KV dtype",
                                spec_.num_blocks, spec_.block_size, dtype_name(spec_.dtype), kv_bytes / 1073741824.0,
                                free_bytes / 1073741824.0, total_bytes / 1073741824.0);
  }
  kv_.reset(static_cast<size_t>(2 * kv_layers() * kv_layer_bytes_));
  CUDA_CHECK(cudaMemsetAsync(kv_.get(), 0, kv_.bytes(), stream_));
  if (spec_.num_host_blocks > 0) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&copies_done_, cudaEventDisableTiming));
    host_kv_.reset(static_cast<size_t>(2 * d_.L * spec_.num_host_blocks * d_.KVH * spec_.block_size * d_.Dh *
                                       elem_bytes(spec_.dtype)));
  }
  bt_stride_ = (opt_.max_model_len + spec_.block_size - 1) / spec_.block_size + 1;
  // Graph inputs: the largest bucket's tokens, and at least one verification of kMaxGraphRowsPerSeq
  // rows (batch 1 with up to 15 drafts, whatever max_num_seqs).
  graph_.allocate(std::max<int64_t>({1, caps_.max_bucket, cuda::kMaxGraphRowsPerSeq}),
                  std::max<int64_t>(1, caps_.max_bucket), bt_stride_);
  allocate_workspace(caps_.tokens, caps_.logits);
  buckets_ = graph_buckets(std::max<int64_t>(1, opt_.max_num_seqs));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  kv_phase.stop();
  // Block trace: every step eager (a replayed graph would write its capture's trace slots).
  // Lazy capture: each bucket at its first decode step (run_step).
  if (opt_.cuda_graphs && !cuda::block_trace_enabled() && !lazy_graphs()) {
    startup_profile::Scope graphs_phase("engine core/executor/graphs (warm-up, autotune, capture)");
    capture_graphs();
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    graphs_phase.set_detail(fmt::format("{} graphs of {} buckets", graphs_.size(), buckets_.size()));
  }
  return {};
}

std::string CudaExecutor::describe() const {
  std::map<std::string, int64_t> formats;  // weight formats on the device, by bytes
  for (const auto& w : linears_)
    if (w.sparse == nullptr)
      for (const auto& seg : w.segments) formats[std::string(dtype_name(seg.format))] += cuda::device_weight_bytes(seg.format, seg.n, w.k);
  std::string weights;
  for (const auto& [name, bytes] : formats) weights += fmt::format("{}{} {:.1f} MiB", weights.empty() ? "" : ", ", name, bytes / 1048576.0);
  if (sparse_ != nullptr) {
    int64_t n = 0;
    for (const auto& w : linears_) n += w.sparse != nullptr;
    weights += fmt::format(", 2:4 sparse {} linears {:.1f} MiB (our GEMV below {} rows, cuSPARSELt {} from there)", n,
                           sparse_bytes_ / 1048576.0, opt_.tuning.sparse_min_rows, sparse_->version());
  }
  cuda::PrefillAttentionParams pp;  // the kernel choice the prefill steps make
  pp.cache.head_dim = d_.Dh;
  pp.cache.dtype = spec_.dtype;
  pp.tile_q = opt_.prefill_tile_q;
  pp.kernel = prefill_kernel();
  const bool wgmma = cuda::prefill_attention_runs_wgmma(pp);
  return fmt::format("cuda:{} ({}, {} SMs) | compute {} | weights {} | kv {} | prefill attention {} | graphs {}{} | "
                     "batch-invariant {} | NVML {} | offload {}",
                     opt_.device, gpu_name_, sms_, dtype_name(act_), weights, dtype_name(spec_.dtype),
                     !use_prefill_kernel_ ? "split-KV rows" : wgmma ? "tensor-core wgmma" : "tensor-core mma.sync",
                     opt_.cuda_graphs ? fmt::format("on ({} buckets up to {})", buckets_.size(), caps_.max_bucket) : "off",
                     profiler_.enabled()         ? " (not replayed: the profiler times every step eagerly)"
                     : cuda::block_trace_enabled() ? " (not captured: the block trace records every step eagerly)"
                                                   : "",
                     opt_.batch_invariant ? "on" : "off", cuda::nvml_available() ? "yes" : "no", streamer_.describe());
}

void CudaExecutor::upload_linear(cuda::WeightUploader& up, size_t i, uint8_t* base, uint8_t* run_base) {
  const LinearEntry& e = model_.weights().linears[i];
  cuda::DeviceWeight& dw = linears_[i];
  int64_t row = 0;  // parts stacked along N, each copied, converted or dequantized on the way
  for (const Tensor& part : e.parts) {
    const cuda::DeviceWeightSegment* seg = &dw.segments.front();
    for (const auto& sg : dw.segments)
      if (row >= sg.row0 && row < sg.row0 + sg.n) seg = &sg;
    uint8_t* seg_base = base + seg->offset;
    const int64_t r = row - seg->row0;
    if (seg->format == DType::kF8E4M3Rows)
      up.upload_fp8_rows(part, seg_base + r * dw.k, seg_base + cuda::fp8_scales_offset(seg->n, dw.k) + r * 4);
    else
      up.upload(part, seg->format, seg_base + cuda::device_weight_bytes(seg->format, r, dw.k));
    row += part.dim(0);
  }
  for (auto& seg : dw.segments) seg.data = run_base + seg.offset;
}

Status CudaExecutor::upload_weights() {
  startup_profile::Scope phase("engine core/executor/weights upload");
  const ModelWeights& w = model_.weights();
  cuda::WeightUploader up(stream_);
  embed_.reset(static_cast<size_t>(cuda::device_weight_bytes(act_, w.token_embd.dim(0), w.token_embd.dim(1))));
  up.upload(w.token_embd, act_, embed_.get());
  linears_.resize(w.linears.size());
  const bool native = cuda::native_quant(opt_);
  const std::vector<bool> dense_only = cuda::dense_only_linears(model_, act_, native);
  std::vector<bool> done(w.linears.size(), false);
  // A layer split's first part: the later layers' linears and the output head are not uploaded
  // (no segments: nothing reads them here).
  if (partial()) done = cuda::linears_off_device(layer_linears(model_), model_, opt_);
  for (size_t i = 0; i < w.linears.size(); ++i) {
    const LinearEntry& e = w.linears[i];
    cuda::DeviceWeight& dw = linears_[i];
    dw.n = e.n();
    dw.k = e.k();
    if (done[i]) continue;
    if (e.parts.size() == 1 && e.parts[0].data() == w.token_embd.data()) {
      dw.segments = {{act_, 0, dw.n, 0, embed_.get()}};  // the tied output projection reads the embedding's copy
      done[i] = true;
      continue;
    }
    if (e.input_order.defined()) {
      dw.input_order.reset(static_cast<size_t>(e.input_order.nbytes()));
      CUDA_CHECK(cudaMemcpy(dw.input_order.get(), e.input_order.data(), static_cast<size_t>(e.input_order.nbytes()),
                            cudaMemcpyHostToDevice));
    }
    dw.segments = cuda::plan_device_weight(e, act_, native && !dense_only[i], nullptr);
  }
  // Offloaded layers: each uploaded into slot 0 at its linears' offsets (LayerWeightBytes::region),
  // stored into its pinned host region, and run from its slot.
  if (opt_.cpu_offload_bytes > 0) {
    const cuda::LayerWeightBytes b = cuda::layer_weight_bytes_for(model_, act_, native);
    const WeightOffloadPlan plan = cuda::offload_plan_for(b, opt_);
    PAGODA_RETURN_IF_ERROR(streamer_.init(plan, b.region));
    for (size_t l = 0; l < b.linears.layers.size(); ++l) {
      if (!plan.streamed[l]) continue;
      uint8_t* staging = streamer_.staging();
      int64_t offset = 0;
      for (LinearId id : b.linears.layers[l]) {
        const size_t i = static_cast<size_t>(id.index);
        offset = cuda::align_up(offset, cuda::kSegmentAlign);
        upload_linear(up, i, staging + offset, streamer_.slot_for(static_cast<int64_t>(l)) + offset);
        offset += b.linear[i];
        done[i] = true;
      }
      streamer_.store_layer(static_cast<int64_t>(l), staging, stream_);
    }
  }
  // Resident weights that cannot fit are the caller's sizing error (the engine's memory plan
  // offloads or refuses before this; `pagoda bench` has no plan): said here, before an allocation
  // would abort the process.
  std::vector<int64_t> resident_bytes(w.linears.size(), 0);
  int64_t resident_total = 0;
  for (size_t i = 0; i < w.linears.size(); ++i) {
    if (done[i]) continue;
    cuda::plan_device_weight(w.linears[i], act_, native && !dense_only[i], &resident_bytes[i]);
    resident_total += resident_bytes[i];
  }
  {
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (resident_total > static_cast<int64_t>(free_bytes)) {
      // Quantized experts held in the compute dtype (a format without MoE kernels) are worth naming.
      bool expanded_experts = false;
      for (const ExpertSet& set : w.expert_sets)
        for (LinearId id : set.gate_up)
          expanded_experts = expanded_experts ||
                             (dense_only[static_cast<size_t>(id.index)] && is_quantized(w.linear(id).parts.front().dtype()));
      return resource_exhausted("the model's resident matmul weights need {:.2f} GiB of device memory{} and {:.2f} GiB of "
                                "{:.2f} GiB is free: stream layers from host memory (--cpu-offload-gb), split the layers with "
                                "the CPU (--n-gpu-layers), quantize (--quantization), or use a larger GPU",
                                resident_total / 1073741824.0,
                                expanded_experts ? fmt::format(" (the experts in {}: the MoE kernels read the blocks of "
                                                               "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K only, "
                                                               "with --dtype bf16)", dtype_name(act_))
                                                 : std::string(),
                                free_bytes / 1073741824.0, total_bytes / 1073741824.0);
    }
  }
  for (size_t i = 0; i < w.linears.size(); ++i) {
    if (done[i]) continue;
    cuda::DeviceWeight& dw = linears_[i];
    const int64_t bytes = resident_bytes[i];
    dw.storage.reset(static_cast<size_t>(bytes));
    upload_linear(up, i, dw.storage.as<uint8_t>(), dw.storage.as<uint8_t>());
  }
  PAGODA_RETURN_IF_ERROR(make_sparse_copies());
  // The experts' device pointers (dense_only_linears: one segment each, every expert of a kind in
  // one format: the compute dtype or a block format).
  expert_sets_.resize(w.expert_sets.size());
  for (size_t i = 0; i < w.expert_sets.size(); ++i) {
    const ExpertSet& set = w.expert_sets[i];
    DeviceExpertSet& ds = expert_sets_[i];
    ds.E = set.num_experts();
    if (weight(set.gate_up.front()).segments.empty()) continue;  // a layer the split leaves to the CPU
    ds.gate_up_format = weight(set.gate_up.front()).format();
    ds.down_format = weight(set.down.front()).format();
    std::vector<const void*> ptrs;
    for (const auto* ids : {&set.gate_up, &set.down})
      for (LinearId id : *ids) {
        const cuda::DeviceWeight& dw = weight(id);
        const DType want = ids == &set.gate_up ? ds.gate_up_format : ds.down_format;
        PAGODA_CHECK(dw.uniform() && dw.format() == want && (want == act_ || cuda::quant_weight_supported(want)),
                     "expert weight {} is not one segment in its set's format", w.linear(id).name);
        ptrs.push_back(dw.data());
      }
    ds.F = weight(set.down.front()).k;
    ds.ptrs.reset(ptrs.size() * sizeof(void*));
    CUDA_CHECK(cudaMemcpy(ds.ptrs.get(), ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice));
  }
  vectors_.resize(w.vectors.size());
  for (size_t i = 0; i < w.vectors.size(); ++i) {
    const Tensor& v = w.vectors[i];
    PAGODA_CHECK(v.dtype() == DType::kF32, "expected an f32 vector");
    vectors_[i].reset(static_cast<size_t>(v.numel() * 4));
    up.upload_f32(v.data_as<float>(), v.numel(), vectors_[i].get());
  }
  for (const RopeTable* rope : model_.rope_tables()) {
    DeviceRope& dr = ropes_.emplace_back();
    const int64_t n = rope->max_positions() * (rope->rope_dim() / 2);
    dr.cos.reset(static_cast<size_t>(n * 4));
    dr.sin.reset(static_cast<size_t>(n * 4));
    up.upload_f32(rope->cos(0), n, dr.cos.get());
    up.upload_f32(rope->sin(0), n, dr.sin.get());
    dr.rope_dim = rope->rope_dim();
    dr.interleaved = rope->layout() == RopeLayout::kInterleaved;
    rope_index_[rope] = ropes_.size() - 1;
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  const double s = phase.elapsed();
  phase.set_detail(fmt::format("{:.2f} GB read from the mapped file, {:.2f} GB/s", up.bytes_read() / 1e9,
                               up.bytes_read() / 1e9 / std::max(s, 1e-9)));
  if (streamer_.active()) streamer_.measure_bandwidth();
  return {};
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
  if (d_.E > 0) {
    const int64_t P = tokens * d_.topk;
    moe_logits_.reset(static_cast<size_t>(tokens * d_.E * 4));
    moe_ids_.reset(static_cast<size_t>(P * 4));
    moe_weights_.reset(static_cast<size_t>(P * 4));
    moe_order_.reset(static_cast<size_t>(P * 4));
    moe_seg_.reset(static_cast<size_t>((3 * d_.E + 4) * 4));  // + moe_norm_route's counter, 0 between launches
    CUDA_CHECK(cudaMemsetAsync(moe_seg_.get(), 0, moe_seg_.bytes(), stream_));
    moe_gu_.reset(static_cast<size_t>(P * 2 * d_.Fe * e));
    moe_act_.reset(static_cast<size_t>(P * d_.Fe * e));
    moe_out_.reset(static_cast<size_t>(P * d_.D * 4));
    if (model_.config().shared_expert_intermediate_size > 0) moe_shared_.reset(static_cast<size_t>(tokens * d_.D * 4));
  }
  const int64_t rows = caps_.att_rows;
  part_o_.reset(static_cast<size_t>(rows * d_.H * cuda::kRowMaxSplits * d_.Dh * 4));
  part_ml_.reset(static_cast<size_t>(rows * d_.H * cuda::kRowMaxSplits * 2 * 4));
  att_counters_.reset(static_cast<size_t>(rows * d_.H * 4));  // >= rows x kv heads x head chunks
  CUDA_CHECK(cudaMemsetAsync(att_counters_.get(), 0, att_counters_.bytes(), stream_));
  last_.reset(static_cast<size_t>(logits_rows * d_.D * e));
  logits_.reset(static_cast<size_t>(logits_rows * d_.V * 4));
  if (tp_ != nullptr) {
    const int64_t per = opt_.tensor_parallel.vocab_rows_per_rank;
    tp_part_.reset(static_cast<size_t>(logits_rows * per * 4));
    tp_gather_.reset(static_cast<size_t>(tp_->size() * logits_rows * per * 4));
  }
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
    const cuda::QuantScratch::Layout l = qs.layout(act_);
    quant_scratch_.reset(static_cast<size_t>(l.bytes));
    xq_ = reinterpret_cast<int8_t*>(quant_scratch_.as<uint8_t>() + l.xq);
    xds_ = reinterpret_cast<float2*>(quant_scratch_.as<uint8_t>() + l.xds);
    dequant_ = quant_scratch_.as<uint8_t>() + l.dequant;
  }
  if (qs.fp8_max_k > 0) {
    const cuda::QuantScratch::Fp8Layout l = qs.fp8_layout(tokens);
    fp8_scratch_.reset(static_cast<size_t>(l.bytes));
    fp8_xq_ = fp8_scratch_.as<uint8_t>() + l.codes;
    fp8_xs_ = reinterpret_cast<float*>(fp8_scratch_.as<uint8_t>() + l.scales);
    fp8_acc_ = reinterpret_cast<float*>(fp8_scratch_.as<uint8_t>() + l.unscaled_out);
    fp8_rows_cap_ = tokens;
  }
  const int64_t gather_bytes = cuda::input_order_scratch_bytes(model_, act_, tokens);
  if (gather_bytes > 0) gather_scratch_.reset(static_cast<size_t>(gather_bytes));
  workspace_bytes_ = cuda::workspace_bytes_for(d_, act_, tokens, rows) +
                     cuda::moe_workspace_bytes_for(d_, act_, tokens, model_.config().shared_expert_intermediate_size > 0) +
                     qs.bytes(act_) + qs.fp8_bytes(tokens) + gather_bytes +
                     cuda::logits_bytes_for(d_, act_, logits_rows, srows) +
                     static_cast<int64_t>(tp_part_.bytes() + tp_gather_.bytes());
}

cuda::KvCacheLayer CudaExecutor::kv_layer(int64_t l) const {
  PAGODA_CHECK(l >= 0 && l < kv_layers(), "KV layer {} outside the device's [0, {})", l, kv_layers());
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
  captured_shapes_.clear();
  verify_graphs_ = verify_graph_bytes_ = 0;
}

void CudaExecutor::capture_graphs() {
  destroy_graphs();
  reset_graph_inputs();
  for (int64_t b : buckets_) capture_shape({b, 1});
}

void CudaExecutor::reset_graph_inputs() {
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
}

void CudaExecutor::capture_shape(const StepGraphShape& s) {
  InputRegion& in = graph_;
  captured_shapes_.insert(step_graph_key(s, false));
  const int64_t T = s.tokens();
  if (T > graph_token_limit() || s.bucket > in.seq_cap) return;
  size_t free_before = 0, free_after = 0, total = 0;
  if (s.rows > 1) CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  {
    for (bool short_keys : {false, true}) {
      StepShape sh;
      sh.tokens = sh.rows = sh.logits = T;
      sh.decode = s.rows == 1;
      sh.fresh_keys = s.rows > 1 ? s.rows : -1;
      sh.max_keys = short_keys ? std::min(cuda::kRowShortKeys, opt_.max_model_len) : opt_.max_model_len;
      // The short graph only where it differs from the other one.
      if (short_keys && (!cuda::row_attention_short(T, sh.max_keys) || cuda::row_attention_short(T, opt_.max_model_len)))
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
      graphs_[step_graph_key(s, short_keys)] = exec;
      if (s.rows > 1) ++verify_graphs_;
    }
  }
  if (s.rows > 1) {
    CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
    verify_graph_bytes_ += static_cast<int64_t>(free_before) - static_cast<int64_t>(free_after);
  }
}

bool CudaExecutor::replay_verify_graph(const ForwardBatch& batch, const StepGraphShape& s, int64_t max_blocks) {
  if (!captured_shapes_.count(step_graph_key(s, false))) {
    // First verification step of this shape: the warm-up runs on padding inputs (no KV write),
    // then the real inputs are written below.
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    reset_graph_inputs();
    if (lazy_graphs()) {
      capture_shape(s);
    } else {
      for (int64_t b : buckets_)
        if (b * s.rows <= graph_token_limit() && !captured_shapes_.count(step_graph_key({b, s.rows}, false)))
          capture_shape({b, s.rows});
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  const int64_t T = s.tokens();
  int64_t max_ctx = 0;
  for (const auto& sq : batch.seqs) max_ctx = std::max<int64_t>(max_ctx, sq.context_len);
  auto it = graphs_.find(step_graph_key(s, cuda::row_attention_short(T, max_ctx)));
  if (it == graphs_.end()) it = graphs_.find(step_graph_key(s, false));
  if (it == graphs_.end()) return false;
  InputRegion& in = graph_;
  for (int64_t g = 0; g < T; ++g) {  // padding everywhere, then the sequences' tokens
    in.h<int32_t>(in.o_ids)[g] = 0;
    in.h<int32_t>(in.o_pos)[g] = 0;
    in.h<int32_t>(in.o_slots)[g] = -1;
    in.h<int32_t>(in.o_rtok)[g] = static_cast<int32_t>(g);
    in.h<int32_t>(in.o_rseq)[g] = static_cast<int32_t>(g / s.rows);
    in.h<int32_t>(in.o_rctx)[g] = 0;
    in.h<int32_t>(in.o_lrows)[g] = static_cast<int32_t>(g);
  }
  const int64_t n_seqs = static_cast<int64_t>(batch.seqs.size());
  for (int64_t i = 0; i < n_seqs; ++i) {
    const ForwardSeq& sq = batch.seqs[i];
    for (int32_t j = 0; j < sq.num_tokens; ++j) {
      const int64_t g = i * s.rows + j, t = sq.token_begin + j;
      PAGODA_CHECK(batch.slots[t] < (int64_t{1} << 31), "slot {} exceeds int32", batch.slots[t]);
      in.h<int32_t>(in.o_ids)[g] = batch.token_ids[t];
      in.h<int32_t>(in.o_pos)[g] = batch.positions[t];
      in.h<int32_t>(in.o_slots)[g] = static_cast<int32_t>(batch.slots[t]);
      in.h<int32_t>(in.o_rctx)[g] = sq.context_len - sq.num_tokens + j + 1;
    }
    std::memcpy(in.h<int32_t>(in.o_bt) + i * in.bt_stride, sq.block_table.data(), sq.block_table.size() * 4);
  }
  graph_token_map_.resize(static_cast<size_t>(batch.num_tokens()));
  cuda::map_graph_tokens(batch, s, graph_token_map_);
  const int64_t n_logits = static_cast<int64_t>(batch.logits_rows.size());
  for (int64_t r = 0; r < n_logits; ++r)
    in.h<int32_t>(in.o_lrows)[r] = graph_token_map_[static_cast<size_t>(batch.logits_rows[r])];
  copy_inputs(in, n_seqs, max_blocks, 0);
  step_timer_.launch_graph(it->second, stream_);
  ++verify_steps_;
  last_logits_rows_ = n_logits;
  return true;
}

std::string CudaExecutor::graph_report() const {
  if (verify_graphs_ == 0 && verify_steps_ == 0) return {};
  return fmt::format("verification graphs: {} captured ({:.1f} MiB of device memory at capture), {} steps replayed\n",
                     verify_graphs_, verify_graph_bytes_ / 1048576.0, verify_steps_);
}

bool CudaExecutor::output_logits(const float* x, int64_t m, float* logits) {
  if (partial() || tp_ != nullptr) return false;  // under tensor parallelism the head is split
  if (m <= 0) return true;
  CUDA_CHECK(cudaSetDevice(opt_.device));
  const int64_t D = d_.D, V = d_.V;
  if (head_logits_.get() == nullptr) {
    head_in_.reset(static_cast<size_t>(kOutputRows * D) * sizeof(float));
    head_act_.reset(static_cast<size_t>(kOutputRows * D * elem_bytes(act_)));
    head_logits_.reset(static_cast<size_t>(kOutputRows * V) * sizeof(float));
  }
  const cuda::DeviceWeight& w = weight(model_.weights().output);
  PAGODA_CHECK(w.k == D && w.n == V, "output head [{}, {}] for hidden {} and vocabulary {}", w.n, w.k, D, V);
  for (int64_t r0 = 0; r0 < m; r0 += kOutputRows) {
    const int64_t n = std::min(kOutputRows, m - r0);
    CUDA_CHECK(cudaMemcpyAsync(head_in_.get(), x + r0 * D, static_cast<size_t>(n * D) * sizeof(float), cudaMemcpyHostToDevice,
                               stream_));
    cuda::convert(head_in_.get(), DType::kF32, head_act_.get(), act_, n * D, stream_);
    linear(head_act_.get(), w, n, head_logits_.get(), GemmOut::kStoreF32);
    CUDA_CHECK(cudaMemcpyAsync(logits + r0 * V, head_logits_.get(), static_cast<size_t>(n * V) * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  return true;
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
    if (opt_.cuda_graphs && !cuda::block_trace_enabled()) {
      if (lazy_graphs()) destroy_graphs();  // captured again at each bucket's next decode step
      else capture_graphs();
    }
  }
  capture_rows_.clear();
  if (!capture_.empty()) reserve_capture_host(T);
  // Graphs (decode and verification steps) unless the profiler wants every step eager.
  const bool graphs = opt_.cuda_graphs && graphs_on_ && !profiler_.enabled();
  bool decode = graphs && T <= caps_.max_bucket && n_logits == T && n_seqs == T;
  for (int64_t i = 0; decode && i < n_logits; ++i) decode = batch.logits_rows[i] == i && batch.seqs[i].num_tokens == 1;
  if (decode) {
    const int64_t B = *std::lower_bound(buckets_.begin(), buckets_.end(), T);
    if (!captured_shapes_.count(step_graph_key({B, 1}, false)) && !cuda::block_trace_enabled()) {
      // Lazy capture: this bucket's first decode step. The warm-up runs on padding inputs (no KV
      // write), then the real inputs are written below.
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      reset_graph_inputs();
      capture_shape({B, 1});
      CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    int64_t max_ctx = 0;
    for (const auto& sq : batch.seqs) max_ctx = std::max<int64_t>(max_ctx, sq.context_len);
    auto it = graphs_.find(step_graph_key({B, 1}, cuda::row_attention_short(B, max_ctx)));
    if (it == graphs_.end()) it = graphs_.find(step_graph_key({B, 1}, false));
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
      copy_graph_capture(T, nullptr);  // graph rows [0, T) are the batch's tokens
      last_logits_rows_ = n_logits;
      return;
    }
  }
  // Verification steps of speculative decoding (each sequence its last token and its drafts).
  // (Not for a split's first part: its residual rows must stay in batch order.)
  if (graphs && !cuda::block_trace_enabled() && !partial()) {
    const auto vs = cuda::verify_graph_shape(batch, buckets_, graph_token_limit());
    if (vs && replay_verify_graph(batch, *vs, max_blocks)) {
      copy_graph_capture(vs->tokens(), &graph_token_map_);
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

const Tensor& CudaExecutor::forward_part(const ForwardBatch& batch, const Tensor* residual_in) {
  if (!partial()) {
    PAGODA_CHECK(residual_in == nullptr, "an input residual for the whole model's executor");
    return forward(batch);
  }
  PAGODA_CHECK(residual_in == nullptr, "the CUDA part of a layer split runs the first layers: no input residual");
  run_step(batch);
  // Residual rows 0..T-1 are the batch's tokens in order (eager steps and decode graphs alike).
  const int64_t T = batch.num_tokens();
  const size_t bytes = static_cast<size_t>(T * d_.D * 4);
  if (residual_host_.bytes() < bytes) residual_host_.reset(std::max(bytes, static_cast<size_t>(d_.D * 4 * 256)));
  CUDA_CHECK(cudaMemcpyAsync(residual_host_.get(), residual_.get(), bytes, cudaMemcpyDeviceToHost, stream_));
  profiler_.mark("residual to host", stream_);
  profiler_.end();
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  step_timer_.end_step();
  residual_tensor_ = Tensor::view(DType::kF32, {T, d_.D}, residual_host_.get(), nullptr);
  return residual_tensor_;
}

const Tensor& CudaExecutor::forward(const ForwardBatch& batch) {
  PAGODA_CHECK(!partial(), "forward() on the CUDA part of a layer split ({}): it runs through forward_part()",
               opt_.layers.to_string(d_.L));
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
  finish_capture(batch.num_tokens());
  return logits_tensor_;
}

void CudaExecutor::forward_discard(const ForwardBatch& batch) {
  PAGODA_CHECK(!partial(), "forward_discard() on the CUDA part of a layer split");
  run_step(batch);
  profiler_.end();
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // the step's pinned inputs are reused by the next one
  step_timer_.end_step();
  finish_capture(batch.num_tokens());
}

void CudaExecutor::swap(const std::vector<BlockCopy>& copies, bool out) {
  PAGODA_CHECK(host_kv_.get() != nullptr, "swap without host swap space");
  if (copies.empty()) return;
  CUDA_CHECK(cudaSetDevice(opt_.device));
  const int64_t block_bytes = d_.KVH * spec_.block_size * d_.Dh * elem_bytes(spec_.dtype);
  const int64_t host_layer = spec_.num_host_blocks * block_bytes;
  CUDA_CHECK(cudaEventRecord(compute_done_, stream_));
  CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
  for (size_t i = 0; i < copies.size();) {
    size_t n = 1;  // a run: (s, d), (s + 1, d + 1), ...
    while (i + n < copies.size() && copies[i + n].first == copies[i].first + static_cast<BlockId>(n) &&
           copies[i + n].second == copies[i].second + static_cast<BlockId>(n))
      ++n;
    const auto [s, d] = copies[i];
    PAGODA_CHECK(s > 0 && d > 0, "block copy ({}, {}) touches the null block", s, d);
    const size_t bytes = static_cast<size_t>(n * block_bytes);
    for (int64_t l = 0; l < kv_layers(); ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        uint8_t* dev = kv_.as<uint8_t>() + (2 * l + kv) * kv_layer_bytes_;
        uint8_t* host = host_kv_.as<uint8_t>() + (2 * l + kv) * host_layer;
        if (out) {
          CUDA_CHECK(cudaMemcpyAsync(host + d * block_bytes, dev + s * block_bytes, bytes, cudaMemcpyDeviceToHost, copy_stream_));
        } else {
          CUDA_CHECK(cudaMemcpyAsync(dev + d * block_bytes, host + s * block_bytes, bytes, cudaMemcpyHostToDevice, copy_stream_));
        }
      }
    }
    i += n;
  }
  CUDA_CHECK(cudaEventRecord(copies_done_, copy_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(stream_, copies_done_, 0));
}

void CudaExecutor::move_host_block(BlockId block, uint8_t* out, const uint8_t* in) {
  PAGODA_CHECK(host_kv_.get() != nullptr && block > 0 && block < spec_.num_host_blocks, "host block {} out of range", block);
  CUDA_CHECK(cudaSetDevice(opt_.device));
  CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  const int64_t block_bytes = d_.KVH * spec_.block_size * d_.Dh * elem_bytes(spec_.dtype);
  const int64_t host_layer = spec_.num_host_blocks * block_bytes;
  size_t off = 0;
  for (int64_t l = 0; l < d_.L; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      uint8_t* p = host_kv_.as<uint8_t>() + (2 * l + kv) * host_layer + block * block_bytes;
      if (out != nullptr) std::memcpy(out + off, p, static_cast<size_t>(block_bytes));
      else std::memcpy(p, in + off, static_cast<size_t>(block_bytes));
      off += static_cast<size_t>(block_bytes);
    }
  }
}

}  // namespace pagoda::cuda_impl

namespace pagoda {

using cuda_impl::CudaExecutor;

Result<std::unique_ptr<ModelExecutor>> make_cuda_executor(const Model& model, const KvCacheSpec& spec,
                                                          const CudaExecutorOptions& options) {
  std::string why;
  if (!cuda_available(&why)) return make_status(StatusCode::kNotFound, "{}", why);
  if (options.device < 0 || options.device >= cuda_device_count())
    return invalid_argument("no CUDA device {} ({} visible)", options.device, cuda_device_count());
  PAGODA_RETURN_IF_ERROR(options.tuning.validate());
  PAGODA_RETURN_IF_ERROR(cuda_supports_model(model.config()));
  PAGODA_ASSIGN_OR_RETURN(const DType act, cuda::resolve_compute_dtype(model, options.dtype));
  auto ex = std::make_unique<CudaExecutor>(model, spec, options, act);
  PAGODA_RETURN_IF_ERROR(ex->init());
  return std::unique_ptr<ModelExecutor>(std::move(ex));
}

}  // namespace pagoda
