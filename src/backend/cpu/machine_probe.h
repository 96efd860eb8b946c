// Machine probes for benchmarks: measured memory read bandwidth and arithmetic peaks, so kernel
// and end-to-end figures can be reported as a ratio of what this machine can do (`pagoda bench`
// and bench/*_bench.cc use these).
#pragma once

#include <cstddef>

#include "common/thread_pool.h"

namespace pagoda::cpu {

// Streams a `bytes` buffer (split across the pool's threads) `reps` times, best of reps; GB/s
// (1e9 bytes per second). Use a buffer well past the last-level cache (>= 256 MiB).
double measure_read_bandwidth(ThreadPool& pool, size_t bytes = size_t{512} << 20, int reps = 5);

// Peak of independent FMA chains (f32, best ISA available), all pool threads; GFLOP/s (2 per FMA
// lane). 0 if the machine has no FMA.
double measure_fma_peak(ThreadPool& pool);
// Peak of independent vpdpbusd chains (AVX-512 VNNI), all pool threads; G int8 ops/s (2 per
// multiply-add). 0 without VNNI.
double measure_vnni_peak(ThreadPool& pool);

}  // namespace pagoda::cpu
