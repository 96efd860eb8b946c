#include "server/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace pagoda::server {
namespace {

// Seconds since boot at which this process started, and its CPU seconds (utime + stime).
bool read_self_stat(double* start_after_boot_s, double* cpu_s, double* vsize) {
  std::ifstream f("/proc/self/stat");
  std::string line;
  if (!std::getline(f, line)) return false;
  // Field 2 (comm) may hold spaces: parse after its closing parenthesis.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream in(line.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0, starttime = 0, vs = 0;
  // Fields from 3 (state) on: utime 14, stime 15, starttime 22, vsize 23.
  for (int i = 3; i <= 23 && (in >> field); ++i) {
    if (i == 14) utime = std::strtod(field.c_str(), nullptr);
    if (i == 15) stime = std::strtod(field.c_str(), nullptr);
    if (i == 22) starttime = std::strtod(field.c_str(), nullptr);
    if (i == 23) vs = std::strtod(field.c_str(), nullptr);
  }
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  *cpu_s = (utime + stime) / hz;
  *start_after_boot_s = starttime / hz;
  *vsize = vs;
  return true;
}

double boot_time_s() {
  std::ifstream f("/proc/stat");
  std::string key;
  while (f >> key) {
    if (key == "btime") {
      double b = 0;
      f >> b;
      return b;
    }
    f.ignore(1 << 20, '\n');
  }
  return 0;
}

int open_fds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n - 1;  // the descriptor opendir itself holds
}

void add(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

}  // namespace

std::string render_process_metrics() {
  std::string out;
  double start_after_boot = 0, cpu = 0, vsize = 0;
  if (read_self_stat(&start_after_boot, &cpu, &vsize)) {
    add(out, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", cpu);
    add(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", vsize);
    add(out, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
        boot_time_s() + start_after_boot);
  }
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  if (statm >> pages_total >> pages_resident)
    add(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
        static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE)));
  if (const int fds = open_fds(); fds >= 0)
    add(out, "process_open_fds", "gauge", "Number of open file descriptors.", fds);
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
    add(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.", static_cast<double>(rl.rlim_cur));
  return out;
}

std::string rename_metric_prefix(std::string_view text, std::string_view prefix) {
  if (prefix == "pagoda") return std::string(text);
  const std::string from = "pagoda:", to = std::string(prefix) + ":";
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    size_t name_at = 0;
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) name_at = 7;
    if (line.substr(name_at).starts_with(from)) {
      out.append(line.substr(0, name_at));
      out.append(to);
      out.append(line.substr(name_at + from.size()));
    } else {
      out.append(line);
    }
    if (end < text.size()) out.push_back('\n');
    pos = end + 1;
  }
  return out;
}

}  // namespace pagoda::server
