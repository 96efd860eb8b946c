// A progress line for long CLI steps (loading weights, benchmarks) on stderr. On a terminal:
// one line redrawn in place ("label [#####.....]  45%  done/total unit  elapsed"), at most ten
// times a second, finished with a newline. Otherwise (a pipe or file): a plain log line every
// `plain_interval_s` seconds and one at the end, so logs stay readable. Quiet when the log
// level is above info. Thread-safe: update() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace pagoda::cli {

class Progress {
 public:
  // unit "B" prints sizes in MiB; any other unit prints plain counts ("requests", "tokens").
  Progress(std::string component, std::string label, std::string unit, double plain_interval_s = 5.0);
  ~Progress();  // finish() if not yet done

  void update(int64_t done, int64_t total);
  void finish();  // the last state, then the newline (terminal) or final line

 private:
  void draw(bool final);  // mu_ held
  std::string component_, label_, unit_;
  double plain_interval_s_;
  bool tty_, quiet_;
  std::mutex mu_;
  int64_t done_ = 0, total_ = 0;
  bool drawn_ = false, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace pagoda::cli
