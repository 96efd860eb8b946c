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

}  // namespace pagoda
