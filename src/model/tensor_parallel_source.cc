#include "model/tensor_parallel_source.h"

#include <cstring>
#include <map>
#include <string>

#include "common/dtype.h"
#include "model/tensor_table.h"

namespace pagoda {

Result<Tensor> cut_tensor(const Tensor& t, int dim, const std::vector<ShardRange>& ranges) {
  const int n = t.ndim();
  if (dim < 0 || dim >= n) return invalid_argument("cut of {} along dimension {}", t.shape_string(), dim);
  const int64_t len_full = t.dim(dim);
  int64_t len = 0;
  for (const ShardRange& r : ranges) {
    if (r.offset < 0 || r.length < 0 || r.offset + r.length > len_full)
      return invalid_argument("cut [{}, {}) of dimension {} of {} leaves the tensor", r.offset, r.offset + r.length, dim,
                              t.shape_string());
    len += r.length;
  }
  if (ranges.size() == 1 && ranges[0].offset == 0 && ranges[0].length == len_full) return t;  // the whole dimension
  if (dim == 0 && ranges.size() == 1) return t.slice_rows(ranges[0].offset, ranges[0].offset + ranges[0].length);
  std::vector<int64_t> shape = t.shape();
  shape[static_cast<size_t>(dim)] = len;
  Tensor out = Tensor::empty(t.dtype(), shape);
  const auto& tr = dtype_traits(t.dtype());
  const uint8_t* src = static_cast<const uint8_t*>(t.data());
  uint8_t* dst = static_cast<uint8_t*>(out.data());
  if (dim == n - 1) {  // along the innermost dimension: whole blocks of each row
    for (const ShardRange& r : ranges)
      if (r.offset % tr.block_size != 0 || r.length % tr.block_size != 0)
        return invalid_argument("cut [{}, {}) of {} splits a {}-element {} block", r.offset, r.offset + r.length,
                                t.shape_string(), tr.block_size, tr.name);
    const int64_t rows = t.rows(), in_row = t.row_bytes(), out_row = out.row_bytes();
    for (int64_t row = 0; row < rows; ++row) {
      uint8_t* d = dst + row * out_row;
      for (const ShardRange& r : ranges) {
        const int64_t at = r.offset / tr.block_size * tr.block_bytes, bytes = r.length / tr.block_size * tr.block_bytes;
        std::memcpy(d, src + row * in_row + at, static_cast<size_t>(bytes));
        d += bytes;
      }
    }
    return out;
  }
  // An outer dimension: [outer, len_full, inner bytes] -> [outer, len, inner bytes].
  int64_t outer = 1, inner = t.row_bytes();
  for (int i = 0; i < dim; ++i) outer *= t.dim(i);
  for (int i = dim + 1; i < n - 1; ++i) inner *= t.dim(i);
  uint8_t* d = dst;
  for (int64_t o = 0; o < outer; ++o)
    for (const ShardRange& r : ranges) {
      const int64_t bytes = r.length * inner;
      std::memcpy(d, src + (o * len_full + r.offset) * inner, static_cast<size_t>(bytes));
      d += bytes;
    }
  return out;
}

Result<std::unique_ptr<WeightSource>> tensor_parallel_weight_source(std::shared_ptr<const WeightSource> full,
                                                                    const TensorParallelPlan& plan, int rank) {
  if (rank < 0 || rank >= plan.size) return invalid_argument("rank {} of a tensor-parallel size {}", rank, plan.size);
  const WeightNaming naming = full->format() == WeightFormat::kGguf ? WeightNaming::kGguf : WeightNaming::kHuggingFace;
  std::map<std::string, Tensor> shards;
  for (const TensorShard& s : plan.ranks[static_cast<size_t>(rank)].tensors) {
    if (s.kind == ShardKind::kReplicated) continue;
    const std::string& name = decl_name(s.decl, naming);
    if (name.empty()) continue;
    // A stacked expert declaration in HF naming: each expert's [N, K] tensor, cut one dimension lower.
    const bool per_expert = s.decl.experts > 0 && naming == WeightNaming::kHuggingFace;
    const int64_t count = per_expert ? s.decl.experts : 1;
    for (int64_t e = 0; e < count; ++e) {
      const std::string tensor_name = per_expert ? expert_tensor_name(s.decl, e) : name;
      const Tensor* t = full->find(tensor_name);
      if (t == nullptr) {
        if (!s.decl.required) continue;
        return not_found("tensor parallel rank {}: '{}' is not in {}", rank, tensor_name, full->path());
      }
      auto cut = cut_tensor(*t, per_expert ? s.dim - 1 : s.dim, s.ranges);
      if (!cut.ok())
        return Status(cut.status().code(), fmt::format("tensor parallel rank {}: '{}': {}", rank, tensor_name,
                                                       cut.status().message()));
      shards.emplace(tensor_name, std::move(cut).value());
    }
  }
  return overlay_weight_source(std::move(full), std::move(shards));
}

Result<ModelConfig> rank_model_config(const ModelConfig& c, const TensorParallelPlan& plan, int rank) {
  if (rank < 0 || rank >= plan.size) return invalid_argument("rank {} of a tensor-parallel size {}", rank, plan.size);
  const RankShards& rs = plan.ranks[static_cast<size_t>(rank)];
  ModelConfig r = c;
  r.num_heads = rs.num_heads;
  r.num_kv_heads = rs.num_kv_heads;
  if (c.is_moe()) {
    r.expert_intermediate_size = rs.expert_intermediate_size;
    r.shared_expert_intermediate_size = rs.intermediate_size;
  } else {
    r.intermediate_size = rs.intermediate_size;
  }
  r.vocab_size = rs.vocab_end - rs.vocab_begin;
  return r;
}

}  // namespace pagoda
