// Wall-clock phases of a process's start-up (model file opened, weights read and prepared,
// tokenizer, memory plan, executor: device weights, KV cache, graphs; first token), kept so that
// `pagoda generate --profile-startup` and `pagoda serve --profile-startup` can print where the
// time from launch to first token (or to ready) went.
//
// Times are seconds since the process started: main() calls mark_process_start() first, which
// also records the time from exec to main (the dynamic loader, static constructors) from the
// kernel's start time of the process (/proc/self/stat, 10 ms resolution). Without that call the
// first use of this module is the origin.
// Phases may overlap (the tokenizer loads while the weights are read) and nest (names with a
// "/": "executor/weights upload" lies inside "executor"). Thread-safety: every function may be
// called from any thread.
#pragma once

#include <string>
#include <vector>

namespace pagoda::startup_profile {

struct Phase {
  std::string name;
  double begin_s = 0;   // since the process start
  double seconds = 0;   // duration
  std::string detail;   // e.g. "14.5 GB, 9.8 GB/s"; may be empty
};

// Call first in main(): the origin of every time here, and the "exec to main" phase.
void mark_process_start();
// Seconds since the origin.
double now_s();
void record(std::string name, double begin_s, double seconds, std::string detail = {});
// Phases recorded so far, in the order they ended.
std::vector<Phase> phases();
// Seconds of the phase named `name` (the first one), 0 if none.
double seconds_of(const std::string& name);
// A table: one line per phase (start, duration, name, detail), indented by nesting.
std::string report();
// Forgets every phase (tests); the origin stays.
void clear();

// Records [construction, destruction) as a phase (or until stop()).
class Scope {
 public:
  explicit Scope(std::string name) : name_(std::move(name)), begin_(now_s()) {}
  ~Scope() { stop(); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  void set_detail(std::string d) { detail_ = std::move(d); }
  void stop() {
    if (done_) return;
    done_ = true;
    record(std::move(name_), begin_, now_s() - begin_, std::move(detail_));
  }
  double elapsed() const { return now_s() - begin_; }

 private:
  std::string name_;
  double begin_;
  std::string detail_;
  bool done_ = false;
};

}  // namespace pagoda::startup_profile
