// A layer split (llama.cpp's -ngl; docs/decisions.md D76): one forward pass across two
// executors, the first running layers [0, N) (a GPU: the embedding and its layers' weights and KV
// on the device), the second layers [N, L), the final norm and the output head (the CPU, reading
// its weights from the mapped file). Between them the residual stream [T, D] f32 crosses through
// host memory once per step. Both caches are indexed by the same block ids (the engine's one
// block manager); each holds only its own layers' K and V.
//
// What the composition offers: forward() and row_logprobs() (the second part's logits, in host
// memory); sampling on the host (samples_on_device() false). What it refuses (callers refuse the
// configuration first, with their own message): swap and host KV blocks, hidden-state capture.
// Not thread-safe (the engine-core thread owns it), as every executor.
#pragma once

#include <memory>

#include "runtime/model_executor.h"

namespace pagoda {

// `first` made for layers [0, N), `rest` for [N, L) of the same model (0 < N < L); aborts
// otherwise.
std::unique_ptr<ModelExecutor> make_split_executor(std::unique_ptr<ModelExecutor> first,
                                                   std::unique_ptr<ModelExecutor> rest, int64_t num_layers);

}  // namespace pagoda
