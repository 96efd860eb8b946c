#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/log.h"

namespace pagoda::cli {

Progress::Progress(std::string component, std::string label, std::string unit, double plain_interval_s)
    : component_(std::move(component)),
      label_(std::move(label)),
      unit_(std::move(unit)),
      plain_interval_s_(plain_interval_s),
      tty_(isatty(STDERR_FILENO) == 1),
      quiet_(!log_enabled(LogLevel::kInfo)),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

Progress::~Progress() { finish(); }

void Progress::update(int64_t done, int64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  done_ = done;
  total_ = total;
  const auto now = std::chrono::steady_clock::now();
  const double since_last = std::chrono::duration<double>(now - last_).count();
  if (since_last < (tty_ ? 0.1 : plain_interval_s_)) return;
  last_ = now;
  draw(false);
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  if (drawn_ || total_ > 0) draw(true);
}

void Progress::draw(bool final) {
  if (quiet_) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double frac = total_ > 0 ? std::clamp(static_cast<double>(done_) / static_cast<double>(total_), 0.0, 1.0) : 0.0;
  const std::string amount = unit_ == "B"
                                 ? fmt::format("{:.1f}/{:.1f} MiB", done_ / 1048576.0, total_ / 1048576.0)
                                 : fmt::format("{}/{} {}", done_, total_, unit_);
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
    const std::string line = fmt::format("\r{} [{}] {:3.0f}%  {}  {:.1f} s\x1b[K{}", label_, bar, 100 * frac, amount,
                                         elapsed, final ? "\n" : "");
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
  } else {
    log_info(component_, "{}: {:.0f}% ({}) in {:.1f} s{}", label_, 100 * frac, amount, elapsed, final ? ", done" : "");
  }
  drawn_ = true;
}

}  // namespace pagoda::cli
