#include "backend/cuda/cuda_sizing.h"

#include <algorithm>
#include <optional>

#include "backend/cuda/device_weight.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sparse_2of4.h"
#include "ops/linear.h"
#include "runtime/cuda_block_formats.h"

namespace pagoda {
namespace cuda {

Result<DType> resolve_compute_dtype(const Model& m, const std::string& opt) {
  if (opt == "f32") return DType::kF32;
  if (opt == "bf16") return DType::kBF16;
  if (opt != "auto") return invalid_argument("--dtype must be auto, f32 or bf16, got '{}'", opt);
  for (const LinearEntry& e : m.weights().linears)
    for (const Tensor& part : e.parts)
      if (part.dtype() != DType::kF32) return DType::kBF16;
  return DType::kF32;
}

Dims::Dims(const Model& m) {
  const ModelConfig& c = m.config();
  D = c.hidden_size;
  H = c.num_heads;
  KVH = c.num_kv_heads;
  Dh = c.head_dim;
  F = c.is_moe() ? c.shared_expert_intermediate_size : c.intermediate_size;
  E = c.num_experts;
  topk = c.num_experts_per_tok;
  Fe = c.expert_intermediate_size;
  V = c.vocab_size;
  L = c.num_layers;
  Q = H * Dh;
  Nqkv = (H + 2 * KVH) * Dh;
  half = m.rope().rope_dim() / 2;
  max_pos = m.rope().max_positions();
}

// 1, 2, 4, 8, then steps of 8 to 64, of 32 to 512, of 64 to 1024, capped at max_seqs.
std::vector<int64_t> graph_buckets(int64_t max_seqs) {
  std::vector<int64_t> b;
  for (int64_t x : {1, 2, 4, 8})
    if (x <= max_seqs) b.push_back(x);
  for (int64_t x = 16; x <= 64 && x <= max_seqs; x += 8) b.push_back(x);
  for (int64_t x = 96; x <= 512 && x <= max_seqs; x += 32) b.push_back(x);
  for (int64_t x = 576; x <= 1024 && x <= max_seqs; x += 64) b.push_back(x);
  if (b.empty() || b.back() < std::min<int64_t>(max_seqs, 1024)) b.push_back(std::min<int64_t>(max_seqs, 1024));
  return b;
}

Capacities::Capacities(const CudaExecutorOptions& o) {
  const auto buckets = graph_buckets(std::max<int64_t>(1, o.max_num_seqs));
  max_bucket = o.cuda_graphs ? buckets.back() : 0;
  seqs = std::max<int64_t>({1, o.max_num_seqs, max_bucket});
  tokens = std::max<int64_t>({16, o.max_num_tokens, seqs});
  logits = seqs;
  att_rows = std::max<int64_t>(256, seqs);
}

int64_t workspace_bytes_for(const Dims& d, DType act, int64_t tokens, int64_t att_rows) {
  const int64_t e = elem_bytes(act);
  const int64_t per_token = d.D * 4 + d.D * e + d.Nqkv * 4 + d.Q * 4 + d.Q * e + 2 * d.F * e + d.F * e;
  const int64_t split = att_rows * d.H * kRowMaxSplits * (d.Dh + 2) * 4;
  return tokens * per_token + split;
}
int64_t moe_workspace_bytes_for(const Dims& d, DType act, int64_t tokens, bool shared_expert) {
  if (d.E <= 0) return 0;
  const int64_t e = elem_bytes(act), P = tokens * d.topk;
  const int64_t routing = tokens * d.E * 4 + 3 * P * 4 + (3 * d.E + 4) * 4;  // logits; ids, weights, order; segments + counter
  const int64_t experts = P * (2 * d.Fe * e + d.Fe * e + d.D * 4);           // gate/up, SwiGLU, outputs
  return routing + experts + (shared_expert ? tokens * d.D * 4 : 0);
}

int64_t logits_bytes_for(const Dims& d, DType act, int64_t logits_rows, int64_t sample_rows) {
  return logits_rows * (d.V * 4 + d.D * elem_bytes(act)) + sample_rows * (d.V * 5 + int64_t{sizeof(SampleOutput)});
}

namespace {

// The block format every matrix of `ids` (one kind of an expert set) keeps on the device, or
// nullopt when the grouped quantized kernels cannot read them in their blocks.
std::optional<DType> expert_block_format(const ModelWeights& w, const std::vector<LinearId>& ids, DType act,
                                         bool native) {
  if (!native || act != DType::kBF16 || ids.empty()) return std::nullopt;
  std::optional<DType> format;
  for (LinearId id : ids) {
    const LinearEntry& e = w.linear(id);
    if (e.input_order.defined()) return std::nullopt;
    const std::vector<DeviceWeightSegment> segs = plan_device_weight(e, act, native, nullptr);
    if (segs.size() != 1 || !cuda_block_format(segs.front().format)) return std::nullopt;
    if (format && *format != segs.front().format) return std::nullopt;
    format = segs.front().format;
  }
  return format;
}

}  // namespace

std::vector<bool> dense_only_linears(const Model& m, DType act, bool native_quant) {
  const ModelWeights& w = m.weights();
  std::vector<bool> dense(w.linears.size(), false);
  for (const ExpertSet& set : w.expert_sets)
    for (const auto* ids : {&set.gate_up, &set.down})
      if (!expert_block_format(w, *ids, act, native_quant))
        for (LinearId id : *ids) dense.at(static_cast<size_t>(id.index)) = true;
  return dense;
}

bool tied_output(const Model& m) { return m.weights().tied_output; }

bool native_quant(const CudaExecutorOptions& o) { return o.tuning.quant_weights == "native"; }

int64_t weight_bytes_for(const Model& m, DType act, bool native) {
  const Dims d(m);
  const ModelWeights& w = m.weights();
  int64_t total = device_weight_bytes(act, w.token_embd.dim(0), w.token_embd.dim(1));  // embedding
  for (const RopeTable* rope : m.rope_tables()) total += 2 * rope->max_positions() * (rope->rope_dim() / 2) * 4;  // cos, sin
  const std::vector<bool> dense = dense_only_linears(m, act, native);
  for (size_t i = 0; i < w.linears.size(); ++i) {
    if (w.tied_output && static_cast<int32_t>(i) == w.output.index) continue;  // reads the embedding
    int64_t bytes = 0;
    plan_device_weight(w.linears[i], act, native && !dense[i], &bytes);
    total += bytes;
  }
  for (const Tensor& v : w.vectors) total += v.numel() * 4;
  for (const LinearEntry& e : w.linears)
    if (e.input_order.defined()) total += e.input_order.nbytes();
  return total;
}

LayerWeightBytes layer_weight_bytes_for(const Model& m, DType act, bool native) {
  const ModelWeights& w = m.weights();
  const std::vector<bool> dense = dense_only_linears(m, act, native);
  LayerWeightBytes b;
  b.linears = layer_linears(m);
  b.linear.assign(w.linears.size(), 0);
  for (size_t i = 0; i < w.linears.size(); ++i) {
    if (w.tied_output && static_cast<int32_t>(i) == w.output.index) continue;
    plan_device_weight(w.linears[i], act, native && !dense[i], &b.linear[i]);
  }
  for (const auto& ids : b.linears.layers) {
    int64_t offset = 0;
    for (LinearId id : ids) {
      const int64_t bytes = b.linear[static_cast<size_t>(id.index)];
      offset = align_up(offset, kSegmentAlign) + bytes;
      b.in_layers += bytes;
    }
    b.region.push_back(offset);
  }
  return b;
}

std::vector<bool> linears_off_device(const LayerLinears& ll, const Model& m, const CudaExecutorOptions& o) {
  std::vector<bool> off(m.weights().linears.size(), false);
  const int64_t L = m.config().num_layers;
  if (o.layers.whole(L)) return off;
  for (int64_t l = o.layers.end_in(L); l < L; ++l)
    for (LinearId id : ll.layers[static_cast<size_t>(l)]) off[static_cast<size_t>(id.index)] = true;
  for (LinearId id : ll.outside) off[static_cast<size_t>(id.index)] = true;
  return off;
}

WeightOffloadPlan offload_plan_for(const LayerWeightBytes& b, const CudaExecutorOptions& o) {
  return plan_weight_offload(o.cpu_offload_bytes > 0 ? std::span<const int64_t>(b.region) : std::span<const int64_t>(),
                             o.cpu_offload_bytes);
}

int64_t input_order_scratch_bytes(const Model& m, DType act, int64_t tokens) {
  int64_t k = 0;
  for (const LinearEntry& e : m.weights().linears)
    if (e.input_order.defined()) k = std::max(k, e.k());
  return k == 0 ? 0 : align_up(tokens * k * elem_bytes(act), 256);
}

QuantScratch quant_scratch_for(const Model& m, DType act, bool native) {
  QuantScratch q;
  const std::vector<bool> dense = dense_only_linears(m, act, native);
  // The experts run through the grouped kernels (no scratch of their own), never a dense matmul.
  std::vector<bool> expert(m.weights().linears.size(), false);
  for (const ExpertSet& set : m.weights().expert_sets)
    for (const auto* ids : {&set.gate_up, &set.down})
      for (LinearId id : *ids) expert.at(static_cast<size_t>(id.index)) = true;
  for (size_t i = 0; i < m.weights().linears.size(); ++i) {
    if (expert[i]) continue;
    const LinearEntry& e = m.weights().linears[i];
    const auto segs = plan_device_weight(e, act, native && !dense[i], nullptr);
    if (segs.front().format == DType::kF8E4M3Rows) {
      q.fp8_max_k = std::max(q.fp8_max_k, e.k());
      q.fp8_max_n = std::max(q.fp8_max_n, e.n());
      continue;
    }
    if (!is_quantized(segs.front().format)) continue;
    q.dequant_elems = std::max(q.dequant_elems, e.n() * e.k());
    q.max_k = std::max(q.max_k, e.k());
  }
  return q;
}

std::vector<bool> sparse_2of4_candidates(const Model& m, DType act, const CudaExecutorOptions& o) {
  const ModelWeights& w = m.weights();
  std::vector<bool> c(w.linears.size(), false);
  const std::string& mode = o.tuning.sparsity;
  const bool on = mode == "2:4" || (mode == "auto" && m.config().sparsity_2of4);
  if (!on || act != DType::kBF16 || o.batch_invariant || o.cpu_offload_bytes > 0 ||
      !o.layers.whole(m.config().num_layers) || m.config().is_moe() || !SparseLt::available())
    return c;
  for (size_t i = 0; i < w.linears.size(); ++i) {
    const LinearEntry& e = w.linears[i];
    if (static_cast<int32_t>(i) == w.output.index || e.input_order.defined() || !SparseLt::shape_supported(e.n(), e.k())) continue;
    const auto segs = plan_device_weight(e, act, native_quant(o), nullptr);
    c[i] = segs.size() == 1 && segs.front().format == DType::kBF16;
  }
  return c;
}

int64_t sparse_2of4_bytes_for(const Model& m, DType act, const CudaExecutorOptions& o) {
  const std::vector<bool> c = sparse_2of4_candidates(m, act, o);
  int64_t bytes = 0, max_k = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (!c[i]) continue;
    const LinearEntry& e = m.weights().linears[i];
    bytes += align_up(e.n() * e.k() * 2 * 3 / 16, 256);
    max_k = std::max(max_k, e.k());
  }
  if (bytes == 0) return 0;
  return bytes + kSparseWorkspace + kSparseOutputScratch + align_up(kSparseRowAlign * max_k * 2, 256);
}

QuantScratch::Fp8Layout QuantScratch::fp8_layout(int64_t tokens) const {
  Fp8Layout l;
  if (fp8_max_k == 0) return l;
  l.codes = 0;
  l.scales = l.codes + align_up(tokens * fp8_max_k, 256);
  l.unscaled_out = l.scales + align_up(tokens * 4, 256);
  l.bytes = l.unscaled_out + align_up(std::min(tokens, kFp8UnscaledRows) * fp8_max_n * 4, 256);
  return l;
}

QuantScratch::Layout QuantScratch::layout(DType act) const {
  Layout l;
  if (max_k == 0) return l;
  l.xq = 0;
  l.xds = l.xq + align_up(kQuantGemvMaxM * max_k, 256);
  l.dequant = l.xds + align_up(kQuantGemvMaxM * (max_k / 32) * 8, 256);
  l.bytes = l.dequant + align_up(dequant_elems * elem_bytes(act), 256);
  return l;
}

}  // namespace cuda

Result<CudaMemoryTerms> cuda_memory_terms(const Model& model, const CudaExecutorOptions& options) {
  PAGODA_ASSIGN_OR_RETURN(const DType act, cuda::resolve_compute_dtype(model, options.dtype));
  cuda::Dims d(model);
  const CudaTensorParallel& tp = options.tensor_parallel;
  if (tp.vocab_size > 0) d.V = tp.vocab_size;  // a rank's logits are the whole vocabulary's
  const cuda::Capacities caps(options);
  CudaMemoryTerms t;
  t.compute_dtype = act;
  t.weights = cuda::weight_bytes_for(model, act, cuda::native_quant(options));
  const bool split = !options.layers.whole(model.config().num_layers);
  if (split || options.cpu_offload_bytes > 0) {
    const cuda::LayerWeightBytes b = cuda::layer_weight_bytes_for(model, act, cuda::native_quant(options));
    if (split) {
      // A layer split's first part: the later layers' linears and the output head stay on the host.
      const std::vector<bool> off = cuda::linears_off_device(b.linears, model, options);
      for (size_t i = 0; i < off.size(); ++i)
        if (off[i]) t.weights -= b.linear[i];
    }
    if (options.cpu_offload_bytes > 0) {
      // Streamed layers' linears leave the device; their slots come in.
      const WeightOffloadPlan offload = cuda::offload_plan_for(b, options);
      for (size_t l = 0; l < b.linears.layers.size(); ++l)
        if (offload.streamed[l])
          for (LinearId id : b.linears.layers[l]) t.offloaded += b.linear[static_cast<size_t>(id.index)];
      t.weights += offload.slots * offload.slot_bytes - t.offloaded;
      t.offload_summary = offload.summary();
    }
  }
  t.workspace = cuda::workspace_bytes_for(d, act, caps.tokens, caps.att_rows) +
                cuda::moe_workspace_bytes_for(d, act, caps.tokens, model.config().shared_expert_intermediate_size > 0) +
                cuda::quant_scratch_for(model, act, cuda::native_quant(options)).bytes(act) +
                cuda::quant_scratch_for(model, act, cuda::native_quant(options)).fp8_bytes(caps.tokens) +
                cuda::input_order_scratch_bytes(model, act, caps.tokens);
  t.weights += cuda::sparse_2of4_bytes_for(model, act, options);  // the compressed copies beside the dense ones, their scratch
  t.logits = cuda::logits_bytes_for(d, act, caps.logits, caps.seqs);
  if (tp.vocab_size > 0 && tp.comm != nullptr)  // the rank's part and every rank's gathered (CudaExecutor tp_part_, tp_gather_)
    t.logits += (1 + tp.comm->size()) * caps.logits * tp.vocab_rows_per_rank * 4;
  t.overhead = cuda::kOverhead;
  return t;
}

Result<CudaLayerWeightBytes> cuda_layer_weight_bytes(const Model& model, const CudaExecutorOptions& options) {
  PAGODA_ASSIGN_OR_RETURN(const DType act, cuda::resolve_compute_dtype(model, options.dtype));
  const cuda::LayerWeightBytes b = cuda::layer_weight_bytes_for(model, act, cuda::native_quant(options));
  return CudaLayerWeightBytes{b.region, cuda::weight_bytes_for(model, act, cuda::native_quant(options)) - b.in_layers};
}

}  // namespace pagoda
