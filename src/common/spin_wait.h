// Waiting on memory another process or thread writes (shared-memory channels and collectives):
// spin briefly, then sleep in growing steps.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace pagoda {

// Waits until `ready()` holds: spins, then sleeps 1 us growing to 1 ms; false after `timeout`.
template <class Ready>
bool spin_wait(Ready ready, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int i = 0; i < 2000; ++i)
    if (ready()) return true;
  auto nap = std::chrono::microseconds(1);
  while (!ready()) {
    if (std::chrono::steady_clock::now() >= deadline) return ready();
    std::this_thread::sleep_for(nap);
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace pagoda
