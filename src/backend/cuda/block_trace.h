// Block trace: when a step's kernels overlap under programmatic dependent launch, neither CUDA
// events (they serialise the kernels they separate) nor Nsight Compute (it replays kernels one at
// a time) show what the device does at a kernel boundary. With TuningConfig::block_trace = FILE
// (PAGODA_BLOCK_TRACE, --cuda-block-trace) the decode
// chain's kernels (the GEMVs, the split-KV row attention) record for every warp three readings of
// the global timer: when the warp started, when it passed its wait for the previous kernel, and
// when it ended, plus its SM. Each step overwrites the previous one's records; when the executor
// closes, the last step goes to FILE (binary records) and FILE.launches (one line a launch).
// tools/block_trace_report.py turns them into a timeline (docs/cuda.md, "Diagnostics").
//
// Diagnostics only, compiled in with -DPAGODA_CUDA_BLOCK_TRACE=ON (a build of its own: the kernels
// of the default build are the same code as without it). While it is on, steps run eagerly (a
// graph would replay the record slots of its capture, not of the step), and each warp pays three
// global stores.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace pagoda::cuda {

// One warp's record (32 bytes): global-timer nanoseconds and the SM the warp ran on.
struct WarpTraceRecord {
  uint64_t start, waited, end;
  uint32_t sm, pad;
};

// Where a launch's warps write: warp w of block b (linear block index) at records[base + b *
// warps_per_block + w]. records == nullptr: tracing off.
struct TraceSlots {
  WarpTraceRecord* records = nullptr;
  int64_t base = 0;
};

// Turns the trace on, writing to `path` (empty: off); a process traces into one file, so only the
// first call with a non-empty path counts. Builds without the trace warn on stderr and stay off.
// Not thread-safe: call before the first traced launch (the executor calls it at start-up).
void block_trace_open(const std::string& path);
// True when block_trace_open named a file and the build has the trace.
bool block_trace_enabled();
// A new step starts: its launches take slots from the start of the buffer again.
void block_trace_begin_step();
// Slots for a launch of `grid` blocks of `warps_per_block` warps; `label` names the kernel and
// shape, `bytes_per_warp` is what each warp streams (for the report's throughput timeline).
// Tracing off, or the buffer full: {nullptr, 0}.
TraceSlots block_trace_reserve(const char* label, dim3 grid, int warps_per_block, int64_t bytes_per_warp);
// Writes the last step's records (synchronises the device first). No-op when off.
void block_trace_write();

}  // namespace pagoda::cuda
