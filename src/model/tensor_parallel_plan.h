// The tensor-parallel sharding plan (docs/decisions.md D78): for a model config and a number of
// ranks, which part of every declared weight each rank holds. Pure arithmetic over the family's
// tensor table; no weights are read. Megatron's split: q/k/v, gate/up (and their fused forms)
// column-parallel (rows of [N, K] split along N), o and down row-parallel (columns split along
// K, one all-reduce after each), embedding and output head vocabulary-parallel (rows split along
// V, padded), norms and the MoE router replicated, each expert's matrices split like a dense MLP.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/model_config.h"
#include "model/tensor_table.h"

namespace pagoda {

// How a weight is divided among the ranks.
enum class ShardKind {
  kReplicated,      // every rank holds all of it
  kColumnParallel,  // split along the output dimension N (rows of a linear [N, K]); no communication
  kRowParallel,     // split along the input dimension K (columns of [N, K]); partial sums all-reduced
  kVocabParallel,   // embedding / output head rows split by vocabulary range, padded per rank
};
const char* shard_kind_name(ShardKind k);

// A half-open range [offset, offset + length) along one dimension of the full tensor.
struct ShardRange {
  int64_t offset = 0;
  int64_t length = 0;
};

// One rank's part of one declared tensor. The rank's tensor is the full tensor's slices `ranges`
// along dimension `dim`, concatenated in order (fused q|k|v and gate|up have several ranges); all
// other dimensions whole. Replicated: dim -1, ranges empty, shape = the full shape.
struct TensorShard {
  TensorDecl decl;                   // the declared (full) tensor
  ShardKind kind = ShardKind::kReplicated;
  int dim = -1;                      // dimension of decl->shape that is split
  std::vector<ShardRange> ranges;
  std::vector<int64_t> shape;        // the rank's shape (vocabulary-parallel: the real rows only)
  int64_t padded_rows = 0;           // vocabulary-parallel: rows the rank allocates (real + zero padding)
  int64_t elements() const;          // of the real rows
};

struct RankShards {
  int rank = 0;
  int64_t first_head = 0, num_heads = 0;        // query heads [first_head, first_head + num_heads)
  int64_t first_kv_head = 0, num_kv_heads = 0;  // KV heads this rank stores and attends with
  int64_t intermediate_begin = 0, intermediate_size = 0;  // dense MLP (and shared expert: scaled range)
  int64_t expert_intermediate_begin = 0, expert_intermediate_size = 0;  // each expert's slice (MoE)
  int64_t vocab_begin = 0, vocab_end = 0;       // real vocabulary rows [begin, end) (may be empty)
  std::vector<TensorShard> tensors;             // one per declared tensor, in table order
};

// Quantized row layouts constrain where a weight may be cut.
struct ShardConstraints {
  // Elements per quantization block along K (GGUF Q4_0/Q8_0: 32, K-quants: 256, GPTQ/AWQ group
  // size: 128, 16-bit: 1): a row-parallel cut must fall on a block boundary.
  int64_t k_block = 1;
  // Rows packed together along N (an interleaved layout's row tile; 1: rows independent): a
  // column-parallel cut must fall on a multiple of it.
  int64_t n_tile = 1;
  // Each rank's vocabulary rows are rounded up to a multiple of this (vLLM pads to 64).
  int64_t vocab_pad = 64;
};

struct TensorParallelPlan {
  int size = 1;
  // A KV head is held by this many ranks (1: KV heads split; > 1: fewer KV heads than ranks, each
  // replicated on size / num_kv_heads consecutive ranks).
  int64_t kv_head_replicas = 1;
  int64_t vocab_rows_per_rank = 0;  // padded; vocab_rows_per_rank * size >= vocab_size
  std::vector<TensorDecl> table;    // the family's declared tensors
  std::vector<RankShards> ranks;    // [size]
};

// The plan for `size` ranks; size 1 is every tensor whole (the same code path). Errors name what
// does not divide: query heads, KV heads (neither a multiple nor a divisor of size), the
// intermediate or expert width, a quantization block or row tile, or a feature that needs
// cross-rank communication the plan does not provide (OLMoE's whole-projection q/k norm).
Result<TensorParallelPlan> plan_tensor_parallel(const ModelConfig& config, int size,
                                                const ShardConstraints& constraints = {});

// Bytes of one rank's shard of `decl` whose full checkpoint bytes are `full_bytes` (proportional to
// elements; vocabulary-parallel counts the padded rows).
int64_t shard_bytes(const TensorShard& shard, int64_t full_bytes);

}  // namespace pagoda
