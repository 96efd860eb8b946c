// Process resource figures for reports.
#pragma once

#include <cstdint>

namespace pagoda {

// Peak resident set size of this process, bytes (getrusage).
int64_t peak_rss_bytes();
// Current resident set size, bytes (/proc/self/statm).
int64_t current_rss_bytes();
// Resident pages not backed by a file (heap, anonymous mappings, pinned host buffers): what the
// process holds beyond the memory-mapped weights.
int64_t current_anon_rss_bytes();
// CPU seconds used by all threads of this process so far (CLOCK_PROCESS_CPUTIME_ID): benchmarks
// divide work by it for a rate that does not depend on how busy the machine is.
double process_cpu_seconds();

}  // namespace pagoda
