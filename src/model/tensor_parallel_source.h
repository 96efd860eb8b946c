// One rank's part of a checkpoint under tensor parallelism (docs/decisions.md D78): a WeightSource
// with the checkpoint's names whose declared tensors are the rank's shards as
// plan_tensor_parallel() cuts them, and the config of the rank's model, so that every rank builds
// its model through the same loader and family code as a whole model (its weights prepared for
// its device as usual).
//
// The rank's tensors: replicated ones are the checkpoint's own (views); a single range of the
// outermost dimension stays a view of the mapping; every other cut (several ranges, an inner
// dimension, columns along K) is copied into memory the tensor owns, whole quantization blocks at
// a time (the plan only cuts on block boundaries). Vocabulary-parallel tensors hold the rank's
// real rows (TensorShard::shape); the padding is the device's to allocate. Tensors the plan does
// not declare pass through.
//
// Thread-safety: the source is immutable after construction.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "loader/weight_source.h"
#include "model/model_config.h"
#include "model/tensor_parallel_plan.h"

namespace pagoda {

// The ranges `ranges` of dimension `dim` of `t`, concatenated in order (other dimensions whole):
// `t` itself for the whole dimension, a view for one range of dimension 0, else a copy.
// invalid-argument when a range leaves the dimension or cuts a quantization block of the
// innermost one.
Result<Tensor> cut_tensor(const Tensor& t, int dim, const std::vector<ShardRange>& ranges);

// Rank `rank`'s shards of `full`, the checkpoint the plan was made for (kept alive: its other
// tensors are the rank's replicated ones; the ranks of one process share it).
Result<std::unique_ptr<WeightSource>> tensor_parallel_weight_source(std::shared_ptr<const WeightSource> full,
                                                                    const TensorParallelPlan& plan, int rank);

// The config of rank `rank`'s model: its query and KV heads, its MLP / expert / shared-expert
// widths and its vocabulary rows; everything else as `c`.
Result<ModelConfig> rank_model_config(const ModelConfig& c, const TensorParallelPlan& plan, int rank);

}  // namespace pagoda
