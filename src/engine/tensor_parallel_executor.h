// Rank 0's executor of a tensor-parallel model (docs/decisions.md D78): its own rank's executor,
// with every call that runs device work on the shards (forward, forward_sample, swap_out /
// swap_in, set_graphs_enabled) first handed to the other ranks (TensorParallelGroup::send), so
// that all ranks run the same step and their collectives meet. Reads of results (logits,
// samples, logprobs, statistics) are rank 0's alone. Hidden-state capture, draft-head runners and
// the output head alone are not offered (each rank holds a slice of the head).
//
// Made in two steps around the caller's memory plan:
//   start_tensor_parallel   the other ranks start loading their shards; a CUDA rank 0 gets its
//                           communicator (NCCL: once every rank has joined);
//   make_tensor_parallel_executor  the other ranks get the KV cache and executor options, rank 0
//                           builds its executor, the group is wrapped around it.
// The executor owns the group: destroying it shuts the workers down after rank 0's executor.
#pragma once

#include <memory>

#include "common/thread_pool.h"
#include "engine/tensor_parallel_group.h"
#include "model/model_loader.h"
#include "runtime/cuda_executor.h"
#include "runtime/model_executor.h"

namespace pagoda {

// `model`: rank 0's (LoadedModel::tensor_parallel.size > 1). `setup`: the device, device index,
// load options and threads; its size comes from `model`, its communicator from the device
// (CUDA: NCCL, or "staged" when the environment's PAGODA_TP_COMM says so; CPU: shared memory).
// `co` (CUDA; null for the CPU): its tensor_parallel is set to rank 0's communicator and place.
Result<std::unique_ptr<TensorParallelGroup>> start_tensor_parallel(TensorParallelSetup setup, const LoadedModel& model,
                                                                   CudaExecutorOptions* co);

// `co`: the CUDA executor options (from start_tensor_parallel); null: CPU ranks on `pool`.
Result<std::unique_ptr<ModelExecutor>> make_tensor_parallel_executor(std::unique_ptr<TensorParallelGroup> group,
                                                                     const LoadedModel& model, const KvCacheSpec& spec,
                                                                     const CudaExecutorOptions* co, ThreadPool& pool);

}  // namespace pagoda
