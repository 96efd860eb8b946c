// Measures what this machine can do, so benchmark figures can be reported as ratios: the memory
// read bandwidth (the decode limit) and the f32 FMA peak (the prefill limit for float kernels).
// Each takes a fraction of a second; results are best-of-N to filter noise.
#pragma once

#include <cstdint>

#include "common/thread_pool.h"

namespace pagoda {

// Bytes/second streamed by all pool threads summing a buffer much larger than the last-level
// cache (`bytes`, default 512 MiB), best of `repeats`.
double measure_read_bandwidth(ThreadPool& pool, int64_t bytes = int64_t{512} << 20, int repeats = 5);

// f32 FLOP/s of independent FMA chains in registers on every pool thread, at the best vector
// width this machine runs (the ceiling no GEMM can beat).
double measure_fma_peak(ThreadPool& pool);

// Peak resident set size of this process, bytes.
int64_t peak_rss_bytes();

}  // namespace pagoda
