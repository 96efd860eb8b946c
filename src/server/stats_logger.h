// The periodic stats line of `pagoda serve`, as vLLM prints it: every `interval_s` seconds while
// the engine has work (or just had), one INFO line with the prompt and generation throughput over
// the interval (tokens/s), running and waiting requests, KV cache usage and the prefix cache hit
// rate. Idle intervals after the first idle one print nothing. Runs its own thread; stop() (or
// destruction) joins it. The engine must outlive it.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "engine/engine.h"

namespace pagoda::server {

// One line from two snapshots `dt` seconds apart (exposed for tests).
std::string format_stats_line(const EngineStats& before, const EngineStats& now, double dt);

class StatsLogger {
 public:
  StatsLogger(Engine& engine, double interval_s);
  ~StatsLogger();
  void stop();

 private:
  void run();
  Engine& engine_;
  double interval_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pagoda::server
