#include "common/process_stats.h"

#include <ctime>

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

namespace pagoda {

int64_t peak_rss_bytes() {
  struct rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

int64_t current_rss_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

int64_t current_anon_rss_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size = 0, resident = 0, shared = 0;
  in >> size >> resident >> shared;
  return (resident - shared) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace pagoda
