// Invariant checks: a violated invariant is a bug, so it aborts with file:line and a message.
// Expected failures (bad input, no capacity) are values instead (status.h).
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace pagoda::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "%s:%d: PAGODA_CHECK(%s) failed%s%s\n", file, line, cond, msg.empty() ? "" : ": ",
               msg.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace pagoda::detail

// PAGODA_CHECK(cond) or PAGODA_CHECK(cond, "fmt {}", args...)
#define PAGODA_CHECK(cond, ...)                                                                  \
  do {                                                                                           \
    if (!(cond)) [[unlikely]]                                                                    \
      ::pagoda::detail::check_failed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
  } while (0)
