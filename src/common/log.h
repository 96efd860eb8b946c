// The one logging module: leveled lines on stderr, "LEVEL MM-DD HH:MM:SS.mmm [component] message".
// Thread-safe (one mutex serialises whole lines). The level is process-wide, set once at start-up
// (`--log-level`); lines below it are not formatted at all.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string_view>

namespace pagoda {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// "debug" | "info" | "warn" (or "warning") | "error"; nullopt otherwise.
std::optional<LogLevel> parse_log_level(std::string_view name);
std::string_view log_level_name(LogLevel level);

void set_log_level(LogLevel level);
LogLevel log_level();
inline bool log_enabled(LogLevel level) { return static_cast<int>(level) >= static_cast<int>(log_level()); }

// Writes one finished line (no trailing newline in `message`).
void log_write(LogLevel level, std::string_view component, std::string_view message);

template <typename... Args>
void log(LogLevel level, std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
  if (!log_enabled(level)) return;
  log_write(level, component, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(std::string_view c, fmt::format_string<Args...> f, Args&&... a) { log(LogLevel::kDebug, c, f, std::forward<Args>(a)...); }
template <typename... Args>
void log_info(std::string_view c, fmt::format_string<Args...> f, Args&&... a) { log(LogLevel::kInfo, c, f, std::forward<Args>(a)...); }
template <typename... Args>
void log_warn(std::string_view c, fmt::format_string<Args...> f, Args&&... a) { log(LogLevel::kWarn, c, f, std::forward<Args>(a)...); }
template <typename... Args>
void log_error(std::string_view c, fmt::format_string<Args...> f, Args&&... a) { log(LogLevel::kError, c, f, std::forward<Args>(a)...); }

}  // namespace pagoda
