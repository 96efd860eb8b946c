// The device memory of a draft head run on the target's device (ModelExecutor::make_draft_head_runner,
// --spec-device-head: the CUDA runner, backend/cuda/cuda_draft_head.cc, uploads and allocates these),
// for the memory planner (MemoryPlanInput's draft terms) and the runner's own check.
#pragma once

#include <cstdint>

#include "common/dtype.h"
#include "model/draft_head.h"

namespace pagoda {

struct DraftHeadDeviceMemory {
  // Its matrices in the compute dtype, its f32 vectors and RoPE tables, and its own embedding in the
  // compute dtype where it does not share the target's.
  int64_t weights = 0;
  int64_t kv_bytes_per_token = 0;  // its one layer's K and V in the compute dtype
  // The pass buffers of a pass of max_pass_rows rows with max_logits_rows logits rows (device
  // memory; the pinned host copies are not counted). The block tables' few entries are not counted.
  int64_t pass_buffers = 0;
};

// The device memory of head `h` in compute dtype `act` (bf16 or f32: the runner's dtypes);
// shares_target_embedding: h.embedding is the target's (already on the device).
DraftHeadDeviceMemory draft_head_device_memory(const DraftHead& h, DType act, bool shares_target_embedding,
                                               int64_t max_pass_rows, int64_t max_logits_rows);

}  // namespace pagoda
