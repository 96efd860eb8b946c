// Token embedding gather.
#pragma once

#include <span>

#include "common/status.h"
#include "common/tensor.h"
#include "common/thread_pool.h"

namespace pagoda {

// table: [V, D] any weight dtype; ids: [T] in [0, V); out: [T, D] f32 (rows dequantized).
// An id outside [0, V) is an invariant violation (the engine validates ids on admission).
void embedding_lookup(const Tensor& table, std::span<const int32_t> ids, Tensor& out, ThreadPool& pool);

}  // namespace pagoda
