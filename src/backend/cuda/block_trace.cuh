// Device side of the block trace (block_trace.h): lane 0 of each warp stores a reading of the
// global timer at each point as it is taken, so a traced kernel holds nothing in registers for it.
// Compiled in only with PAGODA_BLOCK_TRACE (CMake -DPAGODA_CUDA_BLOCK_TRACE=ON): otherwise
// warp_trace is empty and the kernels are the same code as without it.
#pragma once

#include "backend/cuda/block_trace.h"

namespace pagoda::cuda {

enum class TracePoint { kStart, kWaited, kEnd };

__device__ __forceinline__ void warp_trace([[maybe_unused]] const TraceSlots& slots, [[maybe_unused]] TracePoint point) {
#ifdef PAGODA_BLOCK_TRACE
  if (slots.records == nullptr || (threadIdx.x & 31) != 0) return;
  const int64_t block = blockIdx.x + static_cast<int64_t>(gridDim.x) * (blockIdx.y + static_cast<int64_t>(gridDim.y) * blockIdx.z);
  WarpTraceRecord* r = slots.records + slots.base + block * (blockDim.x >> 5) + (threadIdx.x >> 5);
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (point == TracePoint::kStart) {
    uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    r->start = t;
    r->sm = sm;
  } else if (point == TracePoint::kWaited) {
    r->waited = t;
  } else {
    r->end = t;
  }
#endif
}

}  // namespace pagoda::cuda
