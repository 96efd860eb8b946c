#include "common/startup_profile.h"

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>

namespace pagoda::startup_profile {
namespace {

struct State {
  std::mutex mu;
  std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();
  std::vector<Phase> phases;
};

State& state() {
  static State s;
  return s;
}

// Seconds the process has existed, from its start time in /proc/self/stat (clock ticks since
// boot) and CLOCK_BOOTTIME; -1 when unavailable.
double process_age_s() {
  std::ifstream f("/proc/self/stat");
  std::string line;
  if (!std::getline(f, line)) return -1;
  const size_t paren = line.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return -1;
  std::istringstream rest(line.substr(paren + 2));
  std::string field;
  // Fields after the name start at 3 (state); starttime is field 22.
  for (int i = 3; i < 22; ++i) rest >> field;
  unsigned long long ticks = 0;
  if (!(rest >> ticks)) return -1;
  timespec ts{};
  if (clock_gettime(CLOCK_BOOTTIME, &ts) != 0) return -1;
  const double now = static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  const double age = now - static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
  return age >= 0 && age < 60 ? age : -1;
}

}  // namespace

void mark_process_start() {
  State& s = state();
  const double age = process_age_s();
  std::lock_guard<std::mutex> lock(s.mu);
  s.origin = std::chrono::steady_clock::now();
  if (age > 0) {
    // The origin moves back to the exec: the phases are then times since launch.
    s.origin -= std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(age));
    s.phases.push_back({"exec to main", 0, age, "dynamic loading, static constructors (10 ms resolution)"});
  }
}

double now_s() {
  State& s = state();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - s.origin).count();
}

void record(std::string name, double begin_s, double seconds, std::string detail) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.phases.push_back({std::move(name), begin_s, seconds, std::move(detail)});
}

std::vector<Phase> phases() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.phases;
}

double seconds_of(const std::string& name) {
  for (const Phase& p : phases())
    if (p.name == name) return p.seconds;
  return 0;
}

std::string report() {
  std::vector<Phase> ps = phases();
  std::stable_sort(ps.begin(), ps.end(), [](const Phase& a, const Phase& b) { return a.begin_s < b.begin_s; });
  std::string out = "start-up phases (seconds since launch):\n";
  for (const Phase& p : ps) {
    const size_t depth = static_cast<size_t>(std::count(p.name.begin(), p.name.end(), '/'));
    out += fmt::format("  {:8.3f} {:8.3f}  {}{}{}\n", p.begin_s, p.seconds, std::string(2 * depth, ' '), p.name,
                       p.detail.empty() ? "" : fmt::format("  ({})", p.detail));
  }
  return out;
}

void clear() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.phases.clear();
}

}  // namespace pagoda::startup_profile
