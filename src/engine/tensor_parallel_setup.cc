#include "engine/tensor_parallel_setup.h"

#include <nlohmann/json.hpp>

namespace pagoda {
namespace {

using nlohmann::json;

// Reads fields of one JSON object, the first failure kept.
class Fields {
 public:
  Fields(const json& j, const char* what) : j_(j), what_(what) {
    if (!j_.is_object()) fail("", "is not an object");
  }
  template <class T>
  void get(const char* key, T& out) {
    if (!st_.ok()) return;
    auto it = j_.find(key);
    if (it == j_.end()) return fail(key, "is missing");
    try {
      out = it->get<T>();
    } catch (const json::exception&) {
      fail(key, "has the wrong type");
    }
  }
  const json& at(const char* key) {
    static const json kNull;
    auto it = j_.find(key);
    if (it == j_.end()) {
      fail(key, "is missing");
      return kNull;
    }
    return *it;
  }
  void fail(const std::string& key, const char* why) {
    if (st_.ok()) st_ = invalid_argument("{}: field '{}' {}", what_, key, why);
  }
  Status status() const { return st_; }

 private:
  const json& j_;
  const char* what_;
  Status st_;
};

Result<json> parse(std::string_view text, const char* what) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return invalid_argument("{}: not JSON", what);
  return j;
}

}  // namespace

std::string to_json(const TensorParallelSetup& s) {
  return json{{"size", s.size},
              {"device", s.device},
              {"device_index", s.device_index},
              {"comm", s.comm},
              {"nccl_id", s.nccl_id},
              {"shm_comm", s.shm_comm},
              {"model", s.model},
              {"load_format", std::string(load_format_name(s.load_format))},
              {"quantization", std::string(weight_quantization_name(s.quantization))},
              {"max_model_len", s.max_model_len},
              {"threads", s.threads}}
      .dump();
}

Result<TensorParallelSetup> parse_tensor_parallel_setup(std::string_view text) {
  PAGODA_ASSIGN_OR_RETURN(const json j, parse(text, "tensor-parallel setup"));
  TensorParallelSetup s;
  std::string load_format, quantization;
  Fields f(j, "tensor-parallel setup");
  f.get("size", s.size);
  f.get("device", s.device);
  f.get("device_index", s.device_index);
  f.get("comm", s.comm);
  f.get("nccl_id", s.nccl_id);
  f.get("shm_comm", s.shm_comm);
  f.get("model", s.model);
  f.get("load_format", load_format);
  f.get("quantization", quantization);
  f.get("max_model_len", s.max_model_len);
  f.get("threads", s.threads);
  PAGODA_RETURN_IF_ERROR(f.status());
  if (s.size < 2 || s.size > 64) return invalid_argument("tensor-parallel setup: size {} (2..64)", s.size);
  if (s.device != "cuda" && s.device != "cpu") return invalid_argument("tensor-parallel setup: device '{}'", s.device);
  if (s.comm != "nccl" && s.comm != "staged" && s.comm != "shm")
    return invalid_argument("tensor-parallel setup: communicator '{}'", s.comm);
  if (s.device_index < 0 || s.max_model_len < 0 || s.threads < 0)
    return invalid_argument("tensor-parallel setup: a negative device index, max_model_len or thread count");
  PAGODA_ASSIGN_OR_RETURN(s.load_format, parse_load_format(load_format));
  PAGODA_ASSIGN_OR_RETURN(s.quantization, parse_weight_quantization(quantization));
  return s;
}

std::string to_json(const TensorParallelExecutorSetup& s) {
  const TuningConfig& t = s.cuda.tuning;
  const CudaExecutorOptions& c = s.cuda;
  return json{{"kv",
               {{"num_blocks", s.kv.num_blocks},
                {"block_size", s.kv.block_size},
                {"dtype", std::string(dtype_name(s.kv.dtype))},
                {"num_host_blocks", s.kv.num_host_blocks}}},
              {"cuda",
               {{"dtype", c.dtype},
                {"max_num_tokens", c.max_num_tokens},
                {"max_num_seqs", c.max_num_seqs},
                {"max_model_len", c.max_model_len},
                {"cuda_graphs", c.cuda_graphs},
                {"batch_invariant", c.batch_invariant},
                {"prefill_tile_q", c.prefill_tile_q},
                {"cpu_offload_bytes", c.cpu_offload_bytes}}},
              {"tuning",
               {{"row_attention", t.row_attention},
                {"prefill_attention", t.prefill_attention},
                {"simt_heads", t.simt_heads},
                {"gemv_max_rows", t.gemv_max_rows},
                {"cuda_profile", t.cuda_profile},
                {"quant_weights", t.quant_weights},
                {"quant_gemv_max_rows", t.quant_gemv_max_rows},
                {"quant_mma_max_rows", t.quant_mma_max_rows},
                {"block_trace", t.block_trace},
                {"graph_capture", t.graph_capture},
                {"sparsity", t.sparsity},
                {"sparse_min_rows", t.sparse_min_rows}}}}
      .dump();
}

Result<TensorParallelExecutorSetup> parse_tensor_parallel_executor_setup(std::string_view text) {
  PAGODA_ASSIGN_OR_RETURN(const json j, parse(text, "tensor-parallel executor setup"));
  TensorParallelExecutorSetup s;
  Fields top(j, "tensor-parallel executor setup");
  const json& kv = top.at("kv");
  const json& cu = top.at("cuda");
  const json& tu = top.at("tuning");
  PAGODA_RETURN_IF_ERROR(top.status());
  std::string kv_dtype;
  Fields k(kv, "tensor-parallel executor setup: kv");
  k.get("num_blocks", s.kv.num_blocks);
  k.get("block_size", s.kv.block_size);
  k.get("dtype", kv_dtype);
  k.get("num_host_blocks", s.kv.num_host_blocks);
  PAGODA_RETURN_IF_ERROR(k.status());
  const std::optional<DType> dt = dtype_from_name(kv_dtype);
  if (!dt) return invalid_argument("tensor-parallel executor setup: KV dtype '{}'", kv_dtype);
  s.kv.dtype = *dt;
  if (s.kv.num_blocks < 1 || s.kv.block_size < 1 || s.kv.num_host_blocks < 0)
    return invalid_argument("tensor-parallel executor setup: a KV cache of {} blocks of {} ({} host blocks)", s.kv.num_blocks,
                            s.kv.block_size, s.kv.num_host_blocks);
  CudaExecutorOptions& c = s.cuda;
  Fields f(cu, "tensor-parallel executor setup: cuda");
  f.get("dtype", c.dtype);
  f.get("max_num_tokens", c.max_num_tokens);
  f.get("max_num_seqs", c.max_num_seqs);
  f.get("max_model_len", c.max_model_len);
  f.get("cuda_graphs", c.cuda_graphs);
  f.get("batch_invariant", c.batch_invariant);
  f.get("prefill_tile_q", c.prefill_tile_q);
  f.get("cpu_offload_bytes", c.cpu_offload_bytes);
  PAGODA_RETURN_IF_ERROR(f.status());
  TuningConfig& t = c.tuning;
  Fields g(tu, "tensor-parallel executor setup: tuning");
  g.get("row_attention", t.row_attention);
  g.get("prefill_attention", t.prefill_attention);
  g.get("simt_heads", t.simt_heads);
  g.get("gemv_max_rows", t.gemv_max_rows);
  g.get("cuda_profile", t.cuda_profile);
  g.get("quant_weights", t.quant_weights);
  g.get("quant_gemv_max_rows", t.quant_gemv_max_rows);
  g.get("quant_mma_max_rows", t.quant_mma_max_rows);
  g.get("block_trace", t.block_trace);
  g.get("graph_capture", t.graph_capture);
  g.get("sparsity", t.sparsity);
  g.get("sparse_min_rows", t.sparse_min_rows);
  PAGODA_RETURN_IF_ERROR(g.status());
  PAGODA_RETURN_IF_ERROR(t.validate());
  if (c.max_num_tokens < 1 || c.max_num_seqs < 1 || c.max_model_len < 1 || c.cpu_offload_bytes < 0)
    return invalid_argument("tensor-parallel executor setup: executor capacities must be positive");
  return s;
}

}  // namespace pagoda
