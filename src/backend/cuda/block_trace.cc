#include "backend/cuda/block_trace.h"

#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.h"

namespace pagoda::cuda {
namespace {

constexpr int64_t kCapacity = int64_t{4} << 20;  // records (128 MiB): a Llama-3-8B batch-1 step takes ~1.1 M

struct Launch {
  std::string label;
  int64_t base, count;
  dim3 grid;
  int warps;
  int64_t bytes_per_warp;
};

struct Tracer {
  std::string path;
  WarpTraceRecord* records = nullptr;
  int64_t next = 0;
  std::vector<Launch> launches;
  bool full = false;
};

Tracer& tracer() {
  static Tracer t;
  return t;
}

}  // namespace

void block_trace_open(const std::string& path) {
  Tracer& t = tracer();
  if (path.empty() || !t.path.empty()) return;
#ifdef PAGODA_BLOCK_TRACE
  t.path = path;
#else
  std::fprintf(stderr, "block trace %s requested, but this build has no block trace (configure with "
                       "-DPAGODA_CUDA_BLOCK_TRACE=ON): not tracing\n", path.c_str());
#endif
}

bool block_trace_enabled() { return !tracer().path.empty(); }

void block_trace_begin_step() {
  Tracer& t = tracer();
  t.next = 0;
  t.launches.clear();
}

TraceSlots block_trace_reserve(const char* label, dim3 grid, int warps_per_block, int64_t bytes_per_warp) {
  Tracer& t = tracer();
  if (t.path.empty()) return {};
  const int64_t count = static_cast<int64_t>(grid.x) * grid.y * grid.z * warps_per_block;
  if (t.next + count > kCapacity) {
    t.full = true;
    return {};
  }
  if (!t.records) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&t.records), kCapacity * sizeof(WarpTraceRecord)));
    CUDA_CHECK(cudaMemset(t.records, 0, kCapacity * sizeof(WarpTraceRecord)));
  }
  t.launches.push_back({label, t.next, count, grid, warps_per_block, bytes_per_warp});
  const TraceSlots s{t.records, t.next};
  t.next += count;
  return s;
}

void block_trace_write() {
  Tracer& t = tracer();
  if (t.path.empty() || !t.records) return;
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<WarpTraceRecord> host(static_cast<size_t>(t.next));
  CUDA_CHECK(cudaMemcpy(host.data(), t.records, host.size() * sizeof(WarpTraceRecord), cudaMemcpyDeviceToHost));
  FILE* f = std::fopen(t.path.c_str(), "wb");
  if (!f) {
    std::fprintf(stderr, "block trace: cannot write %s\n", t.path.c_str());
    return;
  }
  std::fwrite(host.data(), sizeof(WarpTraceRecord), host.size(), f);
  std::fclose(f);
  if ((f = std::fopen((t.path + ".launches").c_str(), "w"))) {
    std::fprintf(f, "# label base count grid_x grid_y grid_z warps_per_block bytes_per_warp%s\n",
                 t.full ? " (buffer was full: later launches untraced)" : "");
    for (const Launch& l : t.launches)
      std::fprintf(f, "%s %lld %lld %u %u %u %d %lld\n", l.label.c_str(), static_cast<long long>(l.base),
                   static_cast<long long>(l.count), l.grid.x, l.grid.y, l.grid.z, l.warps,
                   static_cast<long long>(l.bytes_per_warp));
    std::fclose(f);
  }
  std::fprintf(stderr, "block trace: %lld warp records of %zu launches written to %s\n", static_cast<long long>(t.next),
               t.launches.size(), t.path.c_str());
}

}  // namespace pagoda::cuda
